"""The exceptions einad raises for bad input and failed gradient checks."""


class EinsumError(ValueError):
    """Malformed einsum subscripts, or operands that do not fit them."""


class GradcheckError(AssertionError):
    """A derivative disagrees with central differences (raised by `gradcheck`)."""
