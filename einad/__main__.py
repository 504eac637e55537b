"""``python -m einad explain SUBSCRIPTS --shapes ...``"""

import sys

from .explain import main

if __name__ == "__main__":
    sys.exit(main())
