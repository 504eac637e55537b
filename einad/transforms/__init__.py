"""The transformations layer: what turns a function into another function.

`autodiff` (vjp, grad, jvp, jacobians, hessian), `batching` (vmap and the batching rules),
`custom` (custom_vjp, custom_jvp, checkpoint), `passes` (program-to-program optimizations)
and `jit` (stage, optimize, compile). Order within the layer: batching -> autodiff -> custom;
passes -> jit.
"""
