#!/usr/bin/env bash
# One short GPU check (under five minutes on an H200): the CUDA tests, then
# each bundled seed evaluated against itself and one tunable variant, with
# device-side timing.  Results go to $OUT (or ./gpu-check-out) for docs/gpu.md.
#
#   bash scripts/gpu-check.sh            # uses .venv/bin/python, else python3
#
# The machine needs torch (CUDA build) and triton==3.9.0 importable; nothing is
# installed from the network.  tik-agent is used from this checkout.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
OUT=${OUT:-gpu-check-out}
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
  "$PY" -c "import torch, triton; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'gpu', torch.cuda.is_available())"
  # Which OS isolation the evaluations below run under (bwrap with /dev/nvidia* bound is untested on GPUs).
  "$PY" -c "from tik_agent.sandbox.isolation import best; r = best().report(); print('isolation', r.level, r.mechanism, ','.join(r.layers), r.why)"
} 2>&1 | tee "$OUT/environment.txt"

timeout 150 "$PY" -m pytest -q -p no:cacheprovider tests/test_cuda.py 2>&1 | tee "$OUT/pytest-cuda.txt"

for seed in rmsnorm logprobs matmul; do
  timeout 60 "$PY" -m tik_agent eval "tik_agent/seed_kernels/$seed/kernel.py" --seed "$seed" --device cuda --rounds 10 --json \
    > "$OUT/eval-$seed-self.json" 2> "$OUT/eval-$seed-self.err"
  echo "$seed vs itself: exit $?"
done
sed 's/ROWS_PER_PROGRAM = 1/ROWS_PER_PROGRAM = 4/' tik_agent/seed_kernels/rmsnorm/kernel.py > "$OUT/rmsnorm_rows4.py"
timeout 60 "$PY" -m tik_agent eval "$OUT/rmsnorm_rows4.py" --seed rmsnorm --device cuda --rounds 10 --json \
  > "$OUT/eval-rmsnorm-rows4.json" 2> "$OUT/eval-rmsnorm-rows4.err"
echo "rmsnorm ROWS_PER_PROGRAM=4: exit $?"
