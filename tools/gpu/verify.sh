#!/usr/bin/env bash
# The GPU session's one command (METHOD.md: one script that builds, checks and times in one call):
# run on the device machine with carry [".gpu-kit"] (tools/gpu/kit.sh makes it here), e.g.
#   tools/gpu/verify.sh build tests equal bench
# Stages, in the order given (each writes $OUT/<stage>.log, at most 8 files come back):
#   build     tools/gpu/build.sh (incremental where the machine still has build-gpu)
#   tests     ctest -L gpu with DP_REQUIRE_GPU=1: each GPU test case its own ctest, in its own
#             process, with a time limit (one sticky CUDA error cannot hide the cases after it, a
#             hang is named, and no GPU is a failure)
#   unit      every other test (ctest -LE gpu) on that machine
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck, initcheck on each GPU test case and
#             on dp train --devices cuda:0x4 --steps 3 (mlp, convnet; in-replica, eval, tf32, split
#             auto, balance-memory, --cuda-graphs on, --sync allreduce: the ring enqueued on the comm
#             streams, and with --accumulate: no_sync, the sum added into its buckets; the GPT with
#             dropout; resnet8 with --recompute blocks), several processes at once on the one GPU
#   equal     50 steps on cuda:0x4 against host:4, losses and weights (tools/gpu/compare_runs.py,
#             tolerance calibrated by host:4 with 1 and 2 threads per device);
#             one epoch of the convnet on MNIST (.gpu-kit/mnist, carried) on cuda:0x2 against
#             host:2, test accuracy; --device-memory on cuda:0: exit 3 naming remedies
#   profile   tools/gpu/profile.sh: each kernel's time per step, dp (ncu) against PyTorch, and dp's
#             wall time per --cudnn choice (convnet 128 and 1024, resnet18 256)
#   bench     tools/bench/bench_gpu.py (Markdown for RESULTS.md)
# Every stage runs even when one before it failed (except after a failed build); summary.txt
# gets one line per stage and is printed last. Exit status: the number of failed stages.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
out=${OUT:-verify-out}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
failed=0
jobs=${DP_SANITIZE_JOBS:-14}

note() { echo "$*" | tee -a "$summary"; }
stage_result() {  # stage name, exit status, what
  if [[ $2 -eq 0 ]]; then note "PASS $1: $3"; else note "FAIL $1 (exit $2): $3"; failed=$((failed + 1)); fi
}

stage_build() {
  local t0=$SECONDS
  tools/gpu/build.sh >"$out/build.log" 2>&1
  local rc=$?
  stage_result build "$rc" "tools/gpu/build.sh in $((SECONDS - t0)) s"
  [[ $rc -ne 0 ]] && { tail -30 "$out/build.log"; exit 1; }
}

env_ready() { [[ -f build-gpu/env.sh ]] && source build-gpu/env.sh; }

stage_tests() {
  local log="$out/tests.log" t0=$SECONDS
  {
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv,noheader
    nvcc --version | tail -1
  } >"$log" 2>&1
  # One at a time: a case that measures the GPU's free memory must have it to itself.
  DP_REQUIRE_GPU=1 ctest --test-dir build-gpu -L gpu --output-on-failure >>"$log" 2>&1
  local rc=$?
  stage_result tests "$rc" "ctest -L gpu in $((SECONDS - t0)) s: $(grep -E 'tests passed' "$log" | tail -1)"
}

stage_unit() {
  local t0=$SECONDS
  ctest --test-dir build-gpu -LE gpu -j"$(nproc)" --output-on-failure >"$out/unit.log" 2>&1
  local rc=$?
  stage_result unit "$rc" "ctest -LE gpu in $((SECONDS - t0)) s: $(grep -E 'tests passed' "$out/unit.log" | tail -1)"
}

# One compute-sanitizer run: tool, log file, then the command. Prints "clean" or "dirty" last.
sanitize_one() {
  local tool=$1 log=$2
  shift 2
  timeout "${DP_SANITIZE_TIMEOUT:-540}" compute-sanitizer --tool "$tool" --error-exitcode 99 "$@" >"$log.full" 2>&1
  local rc=$?
  # a doctest filter that matched nothing ran nothing: not clean
  grep -qE 'test cases: *0 \|' "$log.full" && rc=98
  {
    echo "== compute-sanitizer --tool $tool $*"
    grep -E "ERROR SUMMARY|========= (Invalid|Race|Uninitialized|Barrier|Program hit)" "$log.full" | head -20
    [[ $rc -eq 124 ]] && echo "-- TIMED OUT after ${DP_SANITIZE_TIMEOUT:-540} s (not clean: unfinished)"
    if [[ $rc -ne 0 ]]; then
      echo "-- exit $rc; the end of its output:"
      tail -40 "$log.full"
    fi
  } >"$log"
  rm -f "$log.full"
  [[ $rc -eq 0 ]] && echo clean >>"$log" || echo dirty >>"$log"
  # into the stage's log as each run ends: a stage cut short by a time limit still reports
  if command -v flock >/dev/null; then flock "$SANITIZE_LOG" cat "$log" >>"$SANITIZE_LOG"; else cat "$log" >>"$SANITIZE_LOG"; fi
}
export -f sanitize_one

stage_sanitize() {
  local log="$out/sanitize.log" dir t0=$SECONDS
  dir=$(mktemp -d)
  local -a trains=(
    "--model mlp"
    "--model convnet"
    "--model mlp --loss in-replica --eval"
    "--model convnet --tf32 --split auto"
    "--model convnet --split balance-memory"
    "--model mlp --cuda-graphs on"
    "--model convnet --cuda-graphs on --loss in-replica"
    "--model mlp --sync allreduce --loss in-replica --bucket-mb 0.5"
    "--model convnet --sync allreduce --loss in-replica --precision bf16"
    "--model convnet --sync allreduce --loss in-replica --accumulate 2 --batch 32"
    "--model gpt --gpt-layers 2 --gpt-dim 64 --context 32 --batch 8 --generated-size 20000 --dropout 0.2"
    "--model resnet8 --batch 16 --recompute blocks --generated-size 256"
  )
  export SANITIZE_LOG=$log
  : >"$log"
  local bin=build-gpu/tests/dp_gpu_tests
  # DP_SANITIZE_QUICK=1: racecheck, synccheck and initcheck only on the kernel cases and the first
  # two trains (memcheck on everything); the step cases under racecheck take many minutes.
  # DP_SANITIZE_PART=slow|rest: only the step cases under racecheck, synccheck and initcheck (slow),
  # or everything else (rest), so the whole set fits in two calls of the device tool's 10 minutes.
  local quick=${DP_SANITIZE_QUICK:-0} part=${DP_SANITIZE_PART:-all}
  mapfile -t cases < <("$bin" --list-test-cases --no-intro | grep -v '^\[doctest\]' | grep -v '^===' | sed '/^$/d')
  # Each job a file of NUL-separated words (tool, then the command: doctest names hold spaces and
  # parentheses), run $jobs at a time on the one GPU.
  # The slow ones (racecheck, synccheck, initcheck on the step cases: every kernel of several
  # trainings instrumented) are numbered first, so they start at once and the rest fill in around
  # them.
  local n=1000
  job() { n=$((n + 1)); printf '%s\0' "$@" >"$dir/$n.job"; }
  local -a step_cases=() kernel_cases=()
  for name in "${cases[@]}"; do
    # the cases that measure or fill the GPU's memory would see the other processes': alone below
    [[ $name == *"memory comes back"* || $name == *"sibling's cache"* ]] && continue
    if [[ $name == *"cuda:0x"* ]]; then step_cases+=("$name"); else kernel_cases+=("$name"); fi
  done
  if [[ $quick != 1 && $part != rest ]]; then
    for tool in racecheck synccheck initcheck; do
      for name in "${step_cases[@]}"; do job "$tool" "$bin" "-tc=${name//,/?}"; done
    done
  fi
  [[ $part == slow ]] && step_cases=() kernel_cases=() cases=()
  for tool in memcheck racecheck synccheck initcheck; do
    [[ $part == slow ]] && break
    for name in "${kernel_cases[@]}"; do job "$tool" "$bin" "-tc=${name//,/?}"; done
    [[ $tool == memcheck ]] && for name in "${step_cases[@]}"; do job "$tool" "$bin" "-tc=${name//,/?}"; done
    local -a these=("${trains[@]}")
    [[ $quick == 1 && $tool != memcheck ]] && these=("${trains[@]:0:2}")
    for t in "${these[@]}"; do
      # shellcheck disable=SC2086
      job "$tool" build-gpu/dp train --devices cuda:0x4 --steps 3 --generated-size 384 $t
    done
  done
  printf '%s\n' "$dir"/*.job | xargs -P "$jobs" -I{} bash -c 'mapfile -d "" -t w <"$1"; sanitize_one "${w[0]}" "${1%.job}.log" "${w[@]:1}"' _ {}
  local bad runs
  for name in "${cases[@]}"; do
    [[ $name == *"memory comes back"* || $name == *"sibling's cache"* ]] || continue
    for tool in memcheck initcheck; do
      n=$((n + 1))
      sanitize_one "$tool" "$dir/$n.log" "$bin" "-tc=${name//,/?}"
    done
  done
  runs=$(grep -c '^== compute-sanitizer' "$log")
  bad=$(grep -c '^dirty$' "$log")
  rm -rf "$dir"
  stage_result sanitize "$bad" "$((runs - bad)) of $runs compute-sanitizer runs clean in $((SECONDS - t0)) s"
}

stage_equal() {
  local log="$out/equal.log" bad=0 dir
  dir=$(mktemp -d)
  : >"$log"
  # 50 steps. Training magnifies last-bit differences step by step, so each comparison is calibrated
  # by two host:4 runs that differ only in the order of their float sums (1 and 2 threads per
  # device): tolerance 10x their drift, at least 1e-3. The convnet at the default lr 0.05 (its loss
  # jumps to 12 at step 6 and the GPU's drift grows past what 2 threads' reordering shows) is
  # reported, not judged.
  local -a runs=("mlp:0.05:judged" "convnet:0.01:judged" "convnet:0.05:reported")
  for r in "${runs[@]}"; do
    IFS=: read -r model lr what <<<"$r"
    for devices in cuda:0x4 host:4 host:4t2; do
      local -a extra=()
      [[ $devices == host:4t2 ]] && extra=(--threads-per-device 2)
      build-gpu/dp train --model "$model" --devices "${devices%t2}" "${extra[@]}" --steps 50 --batch 128 --generated-size 6400 \
        --lr "$lr" --metrics "$dir/$model-$lr-$devices.jsonl" --save "$dir/$model-$lr-$devices.safetensors" >>"$log" 2>&1 ||
        bad=$((bad + 1))
    done
    echo "== $model, lr $lr: cuda:0x4 against host:4, 50 steps ($what)" >>"$log"
    python3 tools/gpu/compare_runs.py "$dir/$model-$lr-cuda:0x4.jsonl" "$dir/$model-$lr-cuda:0x4.safetensors" \
      "$dir/$model-$lr-host:4.jsonl" "$dir/$model-$lr-host:4.safetensors" \
      --calibrate "$dir/$model-$lr-host:4t2.jsonl" "$dir/$model-$lr-host:4t2.safetensors" \
      "$dir/$model-$lr-host:4.jsonl" "$dir/$model-$lr-host:4.safetensors" >>"$log" 2>&1 || [[ $what == reported ]] ||
      bad=$((bad + 1))
  done
  # One epoch of MNIST on cuda:0x2 and host:2 from the same seed: the same accuracy within 0.5 points.
  if [[ -f .gpu-kit/mnist/train-images-idx3-ubyte.gz ]]; then
    for devices in cuda:0x2 host:2; do
      build-gpu/dp train --model convnet --devices "$devices" --data .gpu-kit/mnist --epochs 1 --eval \
        --metrics "$dir/mnist-$devices.jsonl" >>"$log" 2>&1 || bad=$((bad + 1))
    done
    python3 - "$dir/mnist-cuda:0x2.jsonl" "$dir/mnist-host:2.jsonl" >>"$log" 2>&1 <<'PY' || bad=$((bad + 1))
import json, sys
acc = [max(json.loads(l).get("test_accuracy") or 0 for l in open(p)) for p in sys.argv[1:]]
print(f"== MNIST, one epoch of the convnet: test accuracy cuda:0x2 {acc[0]:.4f}, host:2 {acc[1]:.4f}")
sys.exit(0 if acc[1] > 0.5 and abs(acc[0] - acc[1]) <= 0.005 else 1)
PY
  else
    echo "== MNIST: .gpu-kit/mnist not carried" >>"$log"
    bad=$((bad + 1))
  fi
  # --device-memory on a GPU: out of memory is exit 3 with its remedies.
  build-gpu/dp train --model convnet --devices cuda:0 --batch 4096 --steps 1 --generated-size 8192 --device-memory 16MiB \
    >"$dir/oom.txt" 2>&1
  local rc=$?
  { echo "== --device-memory 16MiB on cuda:0, batch 4096: exit $rc"; tail -5 "$dir/oom.txt"; } >>"$log"
  [[ $rc -eq 3 ]] || bad=$((bad + 1))
  rm -rf "$dir"
  stage_result equal "$bad" "50 steps cuda:0x4 against host:4 ($(grep -c '^within' "$log") of 3 within calibrated tolerance, 2 judged), MNIST epoch, --device-memory exit 3"
}

stage_profile() {
  local t0=$SECONDS
  OUT="$out" tools/gpu/profile.sh convnet:128 convnet:1024 resnet18:256 >/dev/null 2>&1
  stage_result profile $? "tools/gpu/profile.sh in $((SECONDS - t0)) s (profile.txt)"
}

stage_bench() {
  python3 tools/bench/bench_gpu.py --dp build-gpu/dp >"$out/bench.md" 2>&1
  stage_result bench $? "tools/bench/bench_gpu.py (bench.md)"
}

[[ $# -gt 0 ]] || set -- build tests equal bench
for stage in "$@"; do
  case "$stage" in
    build) stage_build ;;
    tests | unit | sanitize | equal | profile | bench)
      env_ready || { note "FAIL $stage: no build-gpu/env.sh (run the build stage first)"; failed=$((failed + 1)); continue; }
      "stage_$stage"
      ;;
    *) echo "verify.sh: unknown stage '$stage' (build, tests, unit, sanitize, equal, profile, bench)" >&2; exit 2 ;;
  esac
done
echo "---- summary"
cat "$summary"
exit "$failed"
