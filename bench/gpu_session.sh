#!/bin/bash
# One GPU session's measurements, in one call (the order is the order of importance):
#   1. bench/gpu.py --svd --realistic: MeCeFO's SVD refresh full vs randomized at 350M/1B/7B FFN
#      shapes; LLaMA-130M/350M/1B at sequence 256 and the largest micro-batch that fits, plain loop,
#      harness, harness compiled and a compiled loop (compiled variants at llama_350m only: each
#      compile costs about a minute)
#   2. the measured profile (hardware=measured) of llama_130m at micro-batch 16 x 256, the shape of
#      the first H100 profile, to compare its optimizer kernel
#   3. pytest -m cuda
# Wheels the machine lacks travel in .whl (carry it, with .cache/corpus for the small corpus);
# everything it writes goes to $OUT (gpu.json, gpu.log, profile_llama_130m.json, pytest.log).
#   SMOKE=1 bash bench/gpu_session.sh     # the same steps on a CPU, tiny shapes (OUT defaults to /tmp)
set -o pipefail
OUT=${OUT:-/tmp/gpu_session}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
PY=${PY:-python3}
if [ -d .whl ] && [ -z "$SMOKE" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site || exit 1
fi
SMALL="[pydoc_topics,stdlib_docstrings,lee_background]"
if [ -n "$SMOKE" ]; then
  DEV="--device cpu --smoke --models llama_tiny --micro-batch 2 --steps 3 --warmup 1 --svd-rank 8"
  PROFILE="--device cpu --models llama_tiny --micro-batch 2 --seq-len 64"
  CUDA_TESTS=""
else
  DEV="--steps 12 --warmup 4 --compile-models llama_350m"
  PROFILE="--models llama_130m --micro-batch 16"
  CUDA_TESTS=1
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
fi
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)"
start=$(date +%s)
timeout ${T1:-380} $PY bench/gpu.py --svd --realistic $DEV --data-sources "$SMALL" --json "$OUT/gpu.json" 2>&1 \
  | grep --line-buffered -v "^\[" | tee "$OUT/gpu.log"
echo "step 1: exit $? after $(( $(date +%s) - start )) s"
timeout ${T2:-90} $PY bench/gpu.py --realistic --profile-only $PROFILE --data-sources "$SMALL" \
  --write-profile "$OUT/profile.json" 2>&1 | grep -v "^\[" | tail -5
echo "step 2: exit $? after $(( $(date +%s) - start )) s"
[ -f "$OUT/profile.json" ] && $PY - "$OUT/profile.json" <<'PYEOF'
import json, sys
k = json.load(open(sys.argv[1]))["kernels"]
for name in sorted(k):
    print(f"  {name:<45} {k[name] * 1e3:10.2f} ms")
print(f"  optimizer / mb:normal {k['optimizer'] / k['mb:normal']:.3f}")
PYEOF
if [ -n "$CUDA_TESTS" ]; then
  timeout ${T3:-110} $PY -m pytest -q -m cuda tests/test_cuda.py 2>&1 | tail -15 | tee "$OUT/pytest.log"
  echo "step 3: exit $? after $(( $(date +%s) - start )) s"
fi
