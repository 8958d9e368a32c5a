#!/usr/bin/env bash
# Runs every script here on the GPU, asynchronously and with CUDA_LAUNCH_BLOCKING=1; one log
# per run under $OUT/logs (tests/gpu-logs/README.md).
cd "$(dirname "$0")"
OUT="${OUT:?set OUT to a folder for the logs}"
py=/opt/torch/.venv/bin/python3; [ -x "$py" ] || py=python3
mkdir -p "$OUT/logs"
"$py" -c 'import torch, triton; print(torch.__version__, torch.version.cuda, triton.__version__, torch.cuda.get_device_name(0))' > "$OUT/logs/versions.txt" 2>&1
one() { f=$1; n=${f%.py}
  timeout 120 "$py" "$f" > "$OUT/logs/$n.async.log" 2>&1; echo "exit $?" >> "$OUT/logs/$n.async.log"
  CUDA_LAUNCH_BLOCKING=1 timeout 120 "$py" "$f" > "$OUT/logs/$n.sync.log" 2>&1; echo "exit $?" >> "$OUT/logs/$n.sync.log"; }
export -f one; export py OUT
ls *.py | grep -v '^oom_' | xargs -P 6 -I{} bash -c 'one {}'
for f in oom_*.py; do one "$f"; done
ls "$OUT/logs" | wc -l
