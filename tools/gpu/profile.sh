#!/usr/bin/env bash
# Where a step's GPU time goes, dp against PyTorch, on the GPU machine after tools/gpu/build.sh:
# each kernel's time per step (Nsight Compute for dp, torch.profiler for PyTorch eager, with cuDNN's
# default and its deterministic algorithms), and each side's wall time per step, dp's for each
# --cudnn choice. Appends to $OUT/profile.txt and keeps Nsight Compute's CSV beside it
# (ncu-MODEL-BATCH[xN].csv.gz, in $OUT/ncu-csv.tar), so a table that fails to read loses no GPU time. Exit 1 when a part
# failed (tools/gpu/verify.py profile runs it).
# A spec phases:MODEL:BATCH instead: DataParallel's overhead phase by phase, the mean time of each
# phase of a step on cuda:0x1 and on cuda:0x4 at that global batch (tools/gpu/phase_table.py).
# A spec replicas:MODEL:BATCH: DataParallel's GPU work, the kernel time per step on cuda:0x4 at
# that global batch (Nsight Compute runs kernels one at a time: every replica's, summed), beside
# cuda:0x1's and cuda:0x4's wall time per step.
# A spec loader:MODEL:BATCH: the wall time per step on cuda:0 with the batches normalised by the
# loader (--normalise-on host) and as pixels normalised on the GPU (device), eager and captured:
# what making and moving the batches costs the run.
# A spec ops:MODEL[@PRECISION]:BATCH: dp train --op-times on cuda:0 (each op's GPU time a step, per
# phase and op, beside its time at roofline on this GPU, and the step's wall time: what the step
# spends outside dp's ops), no Nsight Compute, so real sizes fit; MODEL gpt2 is GPT-2 small at
# context 1024 (gpt2-fused: with --attention fused), resnet50 the kit's model file at 3x224x224;
# the JSON goes into ncu-csv.tar.
#   tools/gpu/profile.sh convnet:128 convnet:1024 resnet18:256 phases:mlp:1024 replicas:convnet:1024 loader:mlp:1024
#   tools/gpu/profile.sh ops:gpt2@bf16:8 ops:gpt2-fused@bf16:8 ops:resnet50@bf16:128
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
source build-gpu/env.sh
out=${OUT:-profile-out}
mkdir -p "$out"
steps=4
failed=0
log="$out/profile.txt"

# Nsight Compute's kernel time per step of `dp train` on DEVICES ($steps steps, the first with
# cuDNN's set-up), its CSV kept under $out.
ncu_kernels() {  # MODEL BATCH DEVICES
  local model=$1 batch=$2 devices=$3
  ncu --csv --metrics gpu__time_duration.sum --clock-control none --cache-control none \
    build-gpu/dp train --model "$model" --devices "$devices" --batch "$batch" --steps $steps \
    --generated-size $((batch * steps)) >/tmp/ncu.csv 2>/tmp/ncu.err
  # one tar of them all: few files are kept from the GPU machine, and tests.log must be one
  local name="ncu-$model-$batch${devices#cuda:0}.csv.gz"
  gzip -c /tmp/ncu.csv >"/tmp/$name" && tar -rf "$out/ncu-csv.tar" -C /tmp "$name" && rm -f "/tmp/$name"
  python3 tools/gpu/kernel_times.py /tmp/ncu.csv $steps || { failed=1; tail -5 /tmp/ncu.err; }
}

# 30 steps of `dp train` on DEVICES (more flags after), their metrics into FILE.
train_metrics() {  # MODEL BATCH DEVICES FILE [FLAGS...]
  local model=$1 batch=$2 devices=$3 file=$4
  shift 4
  rm -f "$file"
  build-gpu/dp train --model "$model" --devices "$devices" --batch "$batch" --steps 30 \
    --generated-size $((batch * 30)) --metrics "$file" "$@" >/dev/null 2>&1
}

# Their wall-clock time per step from step 10 on.
wall_time() {  # MODEL BATCH DEVICES [FLAGS...]
  local model=$1 batch=$2 devices=$3
  shift 3
  train_metrics "$model" "$batch" "$devices" /tmp/m.jsonl "$@" &&
    python3 tools/gpu/phase_table.py --step-time 10 /tmp/m.jsonl || failed=1
}

# The specs' parts, each one MODEL and BATCH: what their headers and tables hold.
replicas_part() {
  echo "######## DataParallel's GPU work: $model, global batch $batch, cuda:0x4 against cuda:0x1"
  for devices in cuda:0x1 cuda:0x4; do
    echo "== dp train --devices $devices --model $model --batch $batch: wall time"
    wall_time "$model" "$batch" "$devices"
  done
  echo "== dp on cuda:0x4: Nsight Compute, $steps steps (every replica's kernels, one at a time)"
  ncu_kernels "$model" "$batch" cuda:0x4
}

loader_part() {
  echo "######## Making the batches: $model, batch $batch, cuda:0, float32 from the loader against pixels normalised on the GPU ($(nproc) cores, --loader-threads auto)"
  for graphs in off on; do
    for where in host device; do
      echo "== dp train --devices cuda:0 --model $model --batch $batch --cuda-graphs $graphs --normalise-on $where: wall time"
      wall_time "$model" "$batch" cuda:0 --cuda-graphs "$graphs" --normalise-on "$where"
    done
  done
}

phases_part() {
  echo "######## DataParallel's overhead by phase: $model, global batch $batch, cuda:0x1 against cuda:0x4"
  local -a runs=()
  for devices in cuda:0x1 cuda:0x4; do
    train_metrics "$model" "$batch" "$devices" "/tmp/phases-$devices.jsonl" || failed=1
    runs+=("$devices=/tmp/phases-$devices.jsonl")
  done
  python3 tools/gpu/phase_table.py 10 "${runs[@]}" || failed=1
}

# This GPU's name as dp plan --roofline knows it (docs/plan.md), or nothing.
roofline_gpu() {
  case "$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)" in
    *H200*) echo H200 ;;
    *H100*PCIe*) echo H100-PCIe ;;
    *H100*) echo H100 ;;
    *A100*40GB*) echo A100-40GB ;;
    *A100*) echo A100 ;;
  esac
}

kernels_part() {
  echo "######## $model, batch $batch"
  local gpu
  gpu=$(roofline_gpu)
  if [[ -n $gpu ]]; then  # what each op must take at best, beside what its kernels took below
    echo "== dp plan --roofline $gpu: the step's lower bound per phase and op"
    { build-gpu/dp plan --model "$model" --batch "$batch" --devices meta:1 --roofline "$gpu" >/tmp/roofline.txt &&
      sed -n '/^roofline on/,$p' /tmp/roofline.txt; } || failed=1
  fi
  for cudnn in deterministic heuristic benchmark; do
    echo "== dp train --devices cuda:0 --model $model --batch $batch --cudnn $cudnn: wall time"
    wall_time "$model" "$batch" cuda:0 --cudnn "$cudnn"
  done
  echo "== dp: Nsight Compute, $steps steps (the first with cuDNN's set-up)"
  ncu_kernels "$model" "$batch" cuda:0
  for det in "" --deterministic; do
    echo "== PyTorch eager ${det:-(the default algorithms)}"
    python3 tools/bench/torch_speed.py --model "$model" --batch "$batch" --steps 30 --warmup 10 --profile 5 $det ||
      failed=1
  done
}

ops_part() {
  local name=${model%@*} precision=fp32 gpu
  [[ $model == *@* ]] && precision=${model#*@}
  local -a flags
  case $name in
    gpt2) flags=(--model gpt --gpt-layers 12 --gpt-heads 12 --gpt-dim 768 --context 1024 --vocab 50257) ;;
    gpt2-fused) flags=(--model gpt --gpt-layers 12 --gpt-heads 12 --gpt-dim 768 --context 1024 --vocab 50257
                       --attention fused) ;;
    resnet50) flags=(--model .gpu-kit/resnet50-224.json --generated-size $((batch * 6))) ;;
    gpt) flags=(--model gpt) ;;
    *) flags=(--model "$name" --generated-size $((batch * 6))) ;;
  esac
  gpu=$(roofline_gpu)
  local json="ops-$name-$precision-$batch.json"
  echo "######## Op times: $name, batch $batch, $precision, cuda:0 (dp train --op-times${gpu:+ --roofline $gpu}, 6 steps)"
  if build-gpu/dp train "${flags[@]}" --devices cuda:0 --batch "$batch" --steps 6 --precision "$precision" \
    --op-times "/tmp/$json" ${gpu:+--roofline "$gpu"} >/tmp/ops.txt 2>/tmp/ops.err; then
    sed -n '/^op times/,/^trained/p' /tmp/ops.txt | grep -v '^trained'
    tar -rf "$out/ncu-csv.tar" -C /tmp "$json"
  else
    failed=1
    tail -5 /tmp/ops.err
  fi
}

# A spec is [KIND:]MODEL:BATCH, KIND replicas, loader, phases or ops (none: the kernels part).
for spec in "$@"; do
  kind=kernels
  [[ $spec == *:*:* ]] && kind=${spec%%:*} spec=${spec#*:}
  model=${spec%%:*} batch=${spec##*:}
  case $kind in
    replicas | loader | phases | ops | kernels) "${kind}_part" >>"$log" 2>&1 ;;
    *) echo "profile.sh: no part '$kind' (replicas, loader, phases, ops, or MODEL:BATCH alone)" >&2; failed=1 ;;
  esac
done
echo "---- $out/profile.txt"; grep -E "^(####|==|kernel time|op times|[0-9.]+ ms per)" "$out/profile.txt"
exit $failed

