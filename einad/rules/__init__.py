"""The rules layer: every primitive with its implementation and derivative rules.

One module per family, importing each other in one direction only (see docs/design.md):
`shape` (reshape, astype, getitem, stop_gradient) -> `einsum` (the Einsum primitive, `Spread`,
the sliced contraction) -> `structural` (broadcast, concatenate, where, sums back to a shape) ->
`elementwise` (the table of elementwise derivatives) -> `linear` (einsum's front ends:
`ea.einsum`, matmul, transpose, sum, ...) -> `reductions` -> `indexing` -> `linalg`.
"""
