#!/usr/bin/env bash
# One session on a GPU machine for a course model (TOOL: tools/course_bert.py, the default, or
# tools/course_gpt.py), within a time limit (default 520 s):
#   1. the tests marked gpu (at most 120 s; TESTS=0 leaves them out);
#   2. ``$TOOL sweep``: the learning rates LRS side by side for the seconds left, less 60, each for as many
#      steps as fit, or for STEPS steps when set (then only the first rate runs if the others would not fit);
#   3. each run packed into $OUT/lr-*.tar.gz: float16 weights (``export`` stores float16 anyway),
#      config.json, vocab.txt, metrics.jsonl, pretraining_args.json, command.json and sweep.json.
# Needs the packed segments (python tools/course_bert.py pack) at runs/imdb-train-128.npz.
#
#     OUT=runs/gpu LIMIT=520 bash tools/course_model_gpu.sh                 # the course BERT's session
#     OUT=runs/gpu LIMIT=520 TOOL=tools/course_gpt.py STEPS=11350 bash tools/course_model_gpu.sh
set -uo pipefail
start=$(date +%s)
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD OMP_NUM_THREADS=4
OUT=${OUT:-runs/gpu}
LIMIT=${LIMIT:-520}
LRS=${LRS:-1e-3 2e-3}
TOOL=${TOOL:-tools/course_bert.py}
WORK=runs/$(basename "$TOOL" .py | tr _ -)-sweep
mkdir -p "$OUT"
{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import sys, torch, transformers; print(sys.version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__)"
} 2>&1 | tee "$OUT/session.log"

[ "${TESTS:-1}" = 1 ] && timeout 120 python3 -m pytest -m gpu -q -p no:cacheprovider -o addopts="" \
  tests/test_attention.py tests/test_bert.py tests/test_distillation.py tests/test_efficient.py \
  tests/test_finetuning.py tests/test_gpt.py tests/test_norm.py tests/test_positional.py tests/test_pretraining.py \
  tests/test_transformer.py tests/test_utils.py >"$OUT/gpu-tests.log" 2>&1
echo "gpu tests: exit $? after $(( $(date +%s) - start )) s; $(tail -1 "$OUT/gpu-tests.log")" | tee -a "$OUT/session.log"

seconds=$(( LIMIT - ($(date +%s) - start) - 60 ))
python3 "$TOOL" sweep --lrs $LRS --seconds "$seconds" ${STEPS:+--steps "$STEPS"} --device "${DEVICE:-cuda}" --work "$WORK" \
  2>&1 | grep -v "^\s*$" | tee -a "$OUT/session.log"

for run in "$WORK"/lr-*; do
  [ -f "$run/model.safetensors" ] || continue
  python3 - "$run" <<'EOF'
import sys
from safetensors.torch import load_file, save_file
path = f"{sys.argv[1]}/model.safetensors"
save_file({name: tensor.half() for name, tensor in load_file(path).items()}, path, metadata={"format": "pt"})
EOF
  cp "$WORK/sweep.json" "$run/" 2>/dev/null
  tar czf "$OUT/$(basename "$run").tar.gz" -C "$run" model.safetensors config.json vocab.txt metrics.jsonl \
    pretraining_args.json command.json $( [ -f "$run/sweep.json" ] && echo sweep.json )
done
echo "done after $(( $(date +%s) - start )) s" | tee -a "$OUT/session.log"
