"""Optimization passes on programs (placeholder: dead-code elimination only)."""

from __future__ import annotations

import dataclasses

from .program import Graph


def dce(graph: Graph) -> Graph:
    """Drop the equations no output reaches."""
    live = {o for o in graph.outputs if isinstance(o, str)}
    kept = []
    for e in reversed(graph.equations):
        if e.output in live:
            kept.append(e)
            live.update(a for a in e.inputs if isinstance(a, str))
    return dataclasses.replace(graph, equations=kept[::-1])


def optimize(graph: Graph) -> Graph:
    """Run the passes."""
    return dce(graph)
