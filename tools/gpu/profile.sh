#!/usr/bin/env bash
# Where a step's GPU time goes, dp against PyTorch, on the GPU machine after tools/gpu/build.sh:
# each kernel's time per step (Nsight Compute for dp, torch.profiler for PyTorch eager, with cuDNN's
# default and its deterministic algorithms), and each side's wall time per step, dp's for each
# --cudnn choice. Appends to $OUT/profile.txt and keeps Nsight Compute's CSV beside it
# (ncu-MODEL-BATCH.csv.gz), so a table that fails to read loses no lease time. Exit 1 when a part
# failed (tools/gpu/verify.sh profile runs it).
#   tools/gpu/profile.sh convnet:128 convnet:1024 resnet18:256
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
source build-gpu/env.sh
out=${OUT:-profile-out}
mkdir -p "$out"
steps=4
failed=0
for spec in "$@"; do
  model=${spec%%:*} batch=${spec##*:}
  log="$out/profile.txt"
  {
    echo "######## $model, batch $batch"
    for cudnn in deterministic heuristic benchmark; do
      echo "== dp train --devices cuda:0 --model $model --batch $batch --cudnn $cudnn: wall time"
      build-gpu/dp train --model "$model" --devices cuda:0 --batch "$batch" --steps 30 --generated-size $((batch * 30)) \
        --cudnn $cudnn --metrics /tmp/m.jsonl >/dev/null 2>&1 &&
        python3 -c "
import json; r=[json.loads(l) for l in open('/tmp/m.jsonl') if '\"step\"' in l][10:]
print(f'{1000*sum(sum(x[\"chunks\"])/x[\"samples_per_s\"] for x in r)/len(r):.3f} ms per step (steps 10-29)')"
    done
    echo "== dp: Nsight Compute, $steps steps (the first with cuDNN's set-up)"
    ncu --csv --metrics gpu__time_duration.sum --clock-control none --cache-control none \
      build-gpu/dp train --model "$model" --devices cuda:0 --batch "$batch" --steps $steps \
      --generated-size $((batch * steps)) >/tmp/ncu.csv 2>/tmp/ncu.err
    gzip -c /tmp/ncu.csv >"$out/ncu-$model-$batch.csv.gz"
    python3 tools/gpu/kernel_times.py /tmp/ncu.csv $steps || { failed=1; tail -5 /tmp/ncu.err; }
    for det in "" --deterministic; do
      echo "== PyTorch eager ${det:-(the default algorithms)}"
      python3 tools/bench/torch_speed.py --model "$model" --batch "$batch" --steps 30 --warmup 10 --profile 5 $det ||
        failed=1
    done
  } >>"$log" 2>&1
done
echo "---- $out/profile.txt"; grep -E "^(####|==|kernel time|[0-9.]+ ms per)" "$out/profile.txt"
exit $failed

