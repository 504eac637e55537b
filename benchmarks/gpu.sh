#!/usr/bin/env bash
# One device check: einad's GPU tests, then the benchmarks' GPU rows. Everything under $OUT comes back.
cd "$(dirname "$0")/.."  # the repository root
# .gpu/ (git-ignored) holds wheels the device lacks: array-api-compat, array-api-strict, cotengra, autoray
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee $OUT/gpu.txt
python3 -c "import numpy, opt_einsum, torch, cupy, jax, sys; print(sys.version.split()[0], 'numpy', numpy.__version__, 'opt_einsum', opt_einsum.__version__, 'torch', torch.__version__, 'cupy', cupy.__version__, 'jax', jax.__version__, torch.cuda.get_device_name(0))" 2>&1 | tee -a $OUT/gpu.txt
timeout 100 python3 -m pytest tests/test_arrays.py -p no:cacheprovider -W ignore::DeprecationWarning -rs 2>&1 | tee $OUT/tests.log
echo "tests exit: ${PIPESTATUS[0]}" | tee -a $OUT/tests.log
E=manual,einad,einad-jit,torch,torch-cuda,einad-torch-cuda,einad-jit-torch-cuda,einad-cupy,jax-jit-gpu
for c in "1,4" "5a" "n1,n2" "n3,n4"; do
  timeout ${BENCH_T:-200} python3 -m benchmarks --cases $c --engines $E --json $OUT/gpu-${c//,/_}.json 2>&1 | tee -a $OUT/bench.log
  echo "bench $c exit: ${PIPESTATUS[0]}" | tee -a $OUT/bench.log
done
