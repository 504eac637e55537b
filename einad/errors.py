"""The exceptions einad raises for bad input and failed gradient checks."""


class EinsumError(ValueError):
    """Malformed einsum subscripts, or operands that do not fit them."""


class GradcheckError(AssertionError):
    """A derivative disagrees with central differences (raised by `gradcheck`)."""


class TracerError(TypeError):
    """A traced value used where its value is unknown or its transformation has ended.

    Raised for Python control flow on a value staged by `einad.jit` (``if x > 0``,
    ``float(x)``), and for a traced value used after the transformation that made
    it returned (saved in a list or a global and used later).
    """
