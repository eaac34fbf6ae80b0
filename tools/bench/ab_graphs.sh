#!/usr/bin/env bash
# --cuda-graphs off against on, interleaved: samples/s of each run over its steps after the first
# 10% (the steps' own time summed, and the wall clock from the metrics' time_s).
#   tools/bench/ab_graphs.sh MODEL DEVICES BATCH STEPS REPEATS [DP]
# e.g. tools/bench/ab_graphs.sh mlp host:2 128 1000 4      (take the median of each side)
set -euo pipefail
model=$1 devices=$2 batch=$3 steps=$4 repeats=$5 dp=${6:-build/dp}
if grep -q avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-SkylakeX}; fi
metrics=$(mktemp) log=$(mktemp)
trap 'rm -f "$metrics" "$log"' EXIT
for _ in $(seq "$repeats"); do
  for graphs in off on; do
    "$dp" train --model "$model" --devices "$devices" --batch "$batch" --steps "$steps" \
      --generated-size $((batch * steps)) --cuda-graphs "$graphs" --metrics "$metrics" >"$log" 2>&1 ||
      { cat "$log" >&2; exit 1; }
    /usr/bin/python3 - "$metrics" "$graphs" <<'PY'
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if '"step"' in line]
rows = rows[len(rows) // 10:]
samples = sum(sum(r["chunks"]) for r in rows)
seconds = sum(sum(r["chunks"]) / r["samples_per_s"] for r in rows)
wall = rows[-1]["time_s"] - rows[0]["time_s"]
print(f"{sys.argv[2]:>3} {samples / seconds:8.0f} samples/s   wall {(samples - sum(rows[0]['chunks'])) / wall:8.0f}")
PY
  done
done
