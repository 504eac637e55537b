"""einad's benchmark suite (issue 4): ``python -m benchmarks --help``.

* `cases`   — the programs, their inputs and hand-written numpy derivatives;
* `engines` — einad, opt_einsum, the `manual` speed limit and the peers;
* `timing`  — medians after warm-up, machine busy-ness, the progress bar;
* `__main__` — the command line, the table, the JSON record and the plot.
"""

# the engines, in running order (`engines.all_engines` builds them; kept here so the
# command line can list them without importing numpy)
ENGINE_NAMES = [
    "manual",
    "opt_einsum",
    "einad",
    "einad-jit",
    "einad-jit-numpy",
    "autograd",
    "jax",
    "jax-jit",
    "torch",
    "einad-torch",
    "einad-dask-1",
    "einad-dask-2",
    "einad-threads-2",
    "einad-cluster-1",
    "einad-cluster-2",
    "torch-cuda",
    "einad-torch-cuda",
    "einad-jit-torch-cuda",
    "einad-cupy",
    "jax-jit-gpu",
]
