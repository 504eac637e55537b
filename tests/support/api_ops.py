"""The operation names API.md fixes, listed once for the tests that loop over them."""

# Elementwise, one operand.
UNARY = [
    "negative",
    "exp",
    "log",
    "log1p",
    "expm1",
    "sin",
    "cos",
    "tan",
    "tanh",
    "sinh",
    "cosh",
    "arcsin",
    "arccos",
    "arctan",
    "sqrt",
    "square",
    "abs",
    "sign",
    "sigmoid",
    "relu",
    "softplus",
]
# The unary ones numpy has under the same name (so numpy can be the reference).
NUMPY_UNARY = [n for n in UNARY if n not in ("sigmoid", "relu", "softplus")]

# Elementwise, two operands, with numpy broadcasting.
BINARY = ["add", "subtract", "multiply", "divide", "power", "maximum", "minimum"]

# Reductions and stable compositions.
REDUCTIONS = ["logsumexp", "softmax", "log_softmax", "mean", "var", "max", "min", "prod", "sum"]

# Structural operations, and the linear helpers written as one einsum.
STRUCTURAL = [
    "where",
    "clip",
    "reshape",
    "broadcast_to",
    "expand_dims",
    "squeeze",
    "concatenate",
    "stack",
    "split",
    "flip",
    "moveaxis",
    "stop_gradient",
]
LINEAR = ["einsum", "matmul", "dot", "inner", "outer", "tensordot", "transpose", "trace", "diagonal"]

ALL = UNARY + BINARY + REDUCTIONS + STRUCTURAL + LINEAR
