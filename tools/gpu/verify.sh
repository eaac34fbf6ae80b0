#!/usr/bin/env bash
# The GPU check's one command (one script that builds, checks and times in one run): run on the
# GPU machine with .gpu-kit beside the tree (tools/gpu/kit.sh and tools/gpu/prebuild.sh make it on
# the build machine; tools/gpu/README.md has the procedure), e.g.
#   tools/gpu/verify.sh --within 520 probe build tests equal sanitize
# --within S: everything ends S seconds after the start. Each stage gets what is left (a stage with
# too little left is skipped, saying so), each command in it a time limit from the same clock, so a
# cut-short run still keeps every log and a summary; without it nothing is limited but the
# stages' own limits.
# Stages, in the order given (each writes $OUT/<stage>.log; with more than 8 files there, all but
# summary.txt are packed into logs.tar.gz at the end, since at most 8 files come back):
#   probe     the machine: GPU, driver, nvcc, CPU flags, cuDNN, NCCL and mpirun found where
#   build     tools/gpu/build.sh: the binaries prebuilt here if they fit, else a build from source
#   tests     every GPU test case in its own process, one at a time, with a time limit and
#             DP_REQUIRE_GPU=1 (one sticky CUDA error cannot hide the cases after it, a hang is
#             named, a filter matching nothing and no GPU are failures)
#   poisoned  the same with DP_POISON_ALLOCATIONS=1: every allocation filled with NaN first, so a
#             result that depends on memory nothing wrote fails its comparison
#   unit      every other test on that machine: ctest -LE gpu after a build from source; with the
#             prebuilt binaries the same run by hand (each unit case in its own process, the CLI
#             suites), less the PyTorch cross-checks and the MPI suite
#   equal     50 steps on cuda:0x4 against host:4, losses and weights (tools/gpu/compare_runs.py,
#             tolerance calibrated by host:4 with 1 and 2 threads per device);
#             one epoch of the convnet on MNIST (.gpu-kit/mnist, carried) on cuda:0x2 against
#             host:2, test accuracy; --device-memory on cuda:0: exit 3 naming remedies
#   sanitize  compute-sanitizer memcheck, racecheck, synccheck, initcheck on each GPU test case and
#             on dp train --devices cuda:0x4 --steps 3 runs (below), several processes at once on
#             the one GPU, the most telling first: memcheck on everything, then the other three
#             on the kernel cases and the train runs, then on the step cases, initcheck first
#             (slow: every kernel of several trainings instrumented). DP_SANITIZE_PART=slow|rest
#             and DP_SANITIZE_MATCH=<regex> choose runs. A dirty initcheck run is run once more
#             poisoned, a racecheck run the tool failed itself once more on dp's kernels only,
#             and if it fails itself there too, a third time instrumenting no kernel (the same
#             failure again: "tool-failed", neither clean nor dirty)
#   capabilities  tools/gpu/capabilities.py: dp plan on meta devices against dp memprof on
#             cuda:0x4 (each device's peak and categories; every memprof report written to
#             $OUT/fixtures for tests/fixtures), ZeRO's stages on cuda:0x4 against host:4 and
#             against --sync allreduce, one update of the model files .gpu-kit/resnet50.json and
#             .gpu-kit/nanogpt.json on cuda:0x2 against host:2 within the float32 spread, and dp's device memory against
#             PyTorch's (resnet18, the GPT); DP_CAPABILITIES (a comma list) runs some of them
#             (capabilities.md)
#   export    tools/export_model.py under this machine's PyTorch (2.x; the CPU machines have 1.13):
#             tests/torch/nanogpt_export_check.py and, where torchvision is there,
#             tests/torch/zoo_export_check.py (every torchvision family exported and planned)
#   prime     torch.compile's cache for the bench's table 9 filled in the background (prime.log):
#             put it before stages that time nothing; the bench waits for it (DP_PRIME_WAIT
#             seconds at most, 90) and stops it before it times anything
#   mpi       tests/cli/test_mpi.py (its GPU case: one rank through NCCL) where mpirun is there
#             and dp was built with MPI; else skipped, saying which is missing
#   profile   tools/gpu/profile.sh: each kernel's time per step, dp (ncu) against PyTorch, and dp's
#             wall time per --cudnn choice (convnet 1024, resnet18 256); each phase's time on
#             cuda:0x1 against cuda:0x4 (mlp and convnet, global batch 1024); the convnet's
#             kernel time per step on cuda:0x4 (every replica's, Nsight Compute); DP_PROFILE_SPECS
#             names other specs
#   bench     tools/bench/bench_gpu.py $DP_BENCH_ARGS (Markdown for RESULTS.md), for at most
#             DP_BENCH_SECONDS (the tables it finished come back)
# Every stage runs even when one before it failed (except after a failed build); summary.txt
# gets one line per stage (PASS, FAIL or SKIP) and is printed last. Exit status: the number of
# failed stages.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
out=${OUT:-verify-out}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
failed=0
jobs=${DP_SANITIZE_JOBS:-14}

# The clock every limit is read from: DP_DEADLINE (epoch seconds), set by --within; 0 is none.
export DP_DEADLINE=0
if [[ ${1:-} == --within ]]; then
  [[ ${2:-} =~ ^[0-9]+$ ]] || { echo "verify.sh: --within takes seconds, e.g. --within 520" >&2; exit 2; }
  DP_DEADLINE=$(($(date +%s) + $2))
  shift 2
fi
# Seconds left before the deadline (a large number when there is none).
left() { if ((DP_DEADLINE == 0)); then echo 999999; else echo $((DP_DEADLINE - $(date +%s))); fi; }
# A time limit for one command: its own cap, or what is left less a margin for the logs, if less.
limit() {
  local cap=$1 l
  l=$(($(left) - 10))
  ((l < cap)) && cap=$l
  ((cap < 1)) && cap=1
  echo "$cap"
}
export -f left limit
# A doctest run whose filter matched nothing ran nothing: never a pass. (Its output file.)
ran_nothing() { grep -qE 'test cases: *0 \|' "$1"; }
export -f ran_nothing
# Debian's OpenBLAS in the kit misreads these CPUs and falls back to generic kernels (as ctest's
# DP_TEST_ENV does on the CPU machine): every stage's CPU references and host devices get the core.
if [[ -z ${OPENBLAS_CORETYPE:-} ]]; then
  if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
  elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
fi

note() { echo "$*" | tee -a "$summary"; }
stage_result() {  # stage name, exit status, what
  if [[ $2 -eq 0 ]]; then note "PASS $1: $3"; else note "FAIL $1 (exit $2): $3"; failed=$((failed + 1)); fi
}
# A stage starts only with this many seconds left; else one SKIP line says so.
fits() {  # stage name, seconds it needs at least
  local l
  l=$(left)
  ((l >= $2)) && return 0
  note "SKIP $1: ${l} s left before the deadline, it needs at least $2 s"
  return 1
}

stage_probe() {
  local log="$out/probe.log"
  {
    echo "== GPU"; nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm --format=csv,noheader
    echo "== nvcc"; nvcc --version | tail -2
    # KINDS.md: on gVisor (kernel 4.4.0) compute-sanitizer and ncu cannot see the GPU; on Firecracker they can
    local kernel
    kernel=$(uname -r)
    case "$kernel" in
      4.4.0) echo "runtime: gVisor (kernel $kernel): no compute-sanitizer, no ncu counters" ;;
      *-fc-*) echo "runtime: Firecracker (kernel $kernel)" ;;
      *) echo "runtime: unknown (kernel $kernel)" ;;
    esac
    echo "== CPU"; grep -m1 'model name' /proc/cpuinfo; nproc
    echo "x86-64-v3 flags: $(for f in avx2 fma bmi2 f16c movbe avx512f; do grep -qw $f /proc/cpuinfo && printf '%s ' $f; done)"
    echo "== CUDA's libraries"; ls /usr/local/cuda/lib64/lib{cudart,cublas,cudnn,nccl}.so.[0-9]* 2>&1
    echo "== wheels"; python3 -c '
import importlib
for n in ("nvidia.cudnn", "nvidia.nccl", "nvidia.cublas", "mpi4py", "torch"):
    try:
        m = importlib.import_module(n); print(n, getattr(m, "__version__", ""), list(getattr(m, "__path__", [""]))[:1])
    except Exception as e:
        print(n, "missing:", e)'
    echo "== MPI"; command -v mpirun && mpirun --version 2>&1 | head -1 || echo "no mpirun"
    ls /usr/lib/x86_64-linux-gnu/libmpi.so* 2>/dev/null || echo "no libmpi in /usr/lib/x86_64-linux-gnu"
  } >"$log" 2>&1
  note "PASS probe: $(grep -A1 '^== GPU' "$log" | tail -1); $(grep '^runtime:' "$log" | cut -d'(' -f1); $(grep '^x86-64-v3' "$log"); $(grep -c missing "$log") wheel(s) missing; $(grep -q '^no mpirun' "$log" && echo 'no mpirun' || echo 'mpirun there')"
}

stage_build() {
  local t0=$SECONDS
  tools/gpu/build.sh >"$out/build.log" 2>&1
  local rc=$?
  stage_result build "$rc" "tools/gpu/build.sh in $((SECONDS - t0)) s: $(grep -E '^(prebuilt binaries used|built from source)' "$out/build.log" | cut -c1-160)"
  [[ $rc -ne 0 ]] && { tail -30 "$out/build.log"; exit 1; }
}

env_ready() { [[ -f build-gpu/env.sh ]] && source build-gpu/env.sh; }

doctest_cases() {  # a doctest binary's case names, one a line
  "$1" --list-test-cases --no-intro | grep -v '^\[doctest\]' | grep -v '^===' | sed '/^$/d'
}
gpu_cases() { doctest_cases build-gpu/tests/dp_gpu_tests; }

stage_tests() { gpu_cases_each tests 300 ""; }
# The same with every allocation filled with NaN first (DP_POISON_ALLOCATIONS): a kernel whose result
# depends on memory nothing wrote fails its comparison here. Without compute-sanitizer's slowdown,
# it tells whether initcheck's reports of reads matter (RESULTS.md, 2026-11-26).
# Each fill waits for its stream, so a step that waits inside on another thread's work could hang:
# a shorter limit per case (the slowest takes 30 s unpoisoned on the H200). Left out: the case that
# compares the GPU's times for 4 and 1020 samples, which the fills' waits would flatten.
stage_poisoned() { gpu_cases_each poisoned 150 "*replica times on a GPU*" DP_POISON_ALLOCATIONS=1; }

# Every GPU case in its own process: the stage's name (its log is $out/NAME.log), each case's time
# limit in seconds, a pattern of the cases to leave out ("" for none), then variables to set for
# each case.
gpu_cases_each() {
  local stage=$1 log="$out/$1.log" case_limit=$2 leave_out=$3 t0=$SECONDS pass=0 bad=0 unrun=0 skipped=0 rc name
  local slowest=0 slowest_name="" took
  shift 3
  local -a cases env_vars=("$@")
  mapfile -t cases < <(gpu_cases)
  : >"$log"
  if build-gpu/tests/dp_gpu_tests --list-test-cases --no-intro | grep -n ';' >>"$log"; then
    echo "a case's name holds ';' (ctest would split it)" >>"$log"; bad=$((bad + 1))
  fi
  # One at a time: a case that measures the GPU's free memory must have it to itself (a prime put
  # before this stage is waited for: run it after the cases to overlap it with other work).
  prime_done "the GPU cases have the GPU to themselves"
  for name in "${cases[@]}"; do
    if (($(left) < 20)); then unrun=$((unrun + 1)); echo "NOT RUN (deadline): $name" >>"$log"; continue; fi
    # shellcheck disable=SC2053
    if [[ -n $leave_out && $name == $leave_out ]]; then skipped=$((skipped + 1)); echo "LEFT OUT: $name" >>"$log"; continue; fi
    local s=$SECONDS
    env "${env_vars[@]}" DP_REQUIRE_GPU=1 timeout "$(limit "$case_limit")" build-gpu/tests/dp_gpu_tests "-tc=${name//,/?}" \
      --no-intro >"$out/case.txt" 2>&1
    rc=$?
    took=$((SECONDS - s))
    ((took > slowest)) && slowest=$took slowest_name=$name
    # a filter that matched nothing ran nothing: not a pass
    ran_nothing "$out/case.txt" && rc=98
    if ((rc == 0)); then
      pass=$((pass + 1)); echo "pass ($took s): $name" >>"$log"
    else
      bad=$((bad + 1))
      { echo "FAIL (exit $rc$( ((rc == 124)) && echo ', timed out'), $took s): $name"; tail -40 "$out/case.txt"; } >>"$log"
    fi
  done
  rm -f "$out/case.txt"
  stage_result "$stage" $((bad + unrun)) "$pass of ${#cases[@]} GPU cases pass, $bad fail, $unrun not run$( ((skipped)) &&
    echo ", $skipped left out"), in $((SECONDS - t0)) s (slowest ${slowest} s: ${slowest_name:0:60})"
}

stage_unit() {
  local t0=$SECONDS log="$out/unit.log" rc
  if [[ -f build-gpu/CTestTestfile.cmake ]]; then
    timeout "$(limit 900)" ctest --test-dir build-gpu -LE gpu -j"$(nproc)" --output-on-failure >"$log" 2>&1
    rc=$?
    stage_result unit "$rc" "ctest -LE gpu in $((SECONDS - t0)) s: $(grep -E 'tests passed' "$log" | tail -1)"
    return
  fi
  # Prebuilt binaries have no ctest files. What `ctest -LE gpu` runs, run here the same way: each
  # unit case in its own process, every core busy, then the CLI suites beside each other. Not the
  # PyTorch cross-checks (their reference is Debian's CPU PyTorch 1.13, not this image's) nor the
  # MPI suite (the prebuilt dp has no MPI): the CPU machine's CI runs those.
  local dir pass bad unrun f
  dir=$(mktemp -d)
  export UNIT_DIR=$dir
  # DP_UNIT_CASES (a grep -E pattern) and DP_UNIT_SUITES (names) run a part: a rerun of what failed.
  doctest_cases build-gpu/tests/dp_tests | grep -E -- "${DP_UNIT_CASES:-.}" >"$dir/cases"
  # Every CLI suite but MPI's and this script's own (it takes the GPU test binary, and fakes a GPU).
  local -a suites
  if [[ -n ${DP_UNIT_SUITES+set} ]]; then
    read -r -a suites <<<"$DP_UNIT_SUITES"
  else
    for f in tests/cli/test_*.py; do
      f=$(basename "$f" .py)
      [[ $f == test_mpi || $f == test_gpu_verify ]] || suites+=("$f")
    done
  fi
  {  # the suites first: each takes longer than any unit case
    local k=0 suite
    for suite in "${suites[@]}"; do k=$((k + 1)); printf 'cli\t%d\t%s\n' "$k" "$suite"; done
    nl -ba -w6 -s$'\t' "$dir/cases" | sed 's/^ */unit\t/'
  } >"$dir/jobs"
  # One job a line: kind, number, name. Its verdict goes to its own file, read back in order below.
  # shellcheck disable=SC2016
  xargs -P "$(nproc)" -d '\n' -I{} bash -c '
    IFS=$'"'"'\t'"'"' read -r kind n name <<<"$1"
    f="$UNIT_DIR/$kind.$n"
    if (($(left) < 15)); then echo "NOT RUN (deadline): $name" >"$f"; exit 0; fi
    if [[ $kind == unit ]]; then
      timeout "$(limit 300)" build-gpu/tests/dp_tests "-tc=${name//,/?}" --no-intro >"$f.out" 2>&1
      rc=$?
      ran_nothing "$f.out" && rc=98
    else
      timeout "$(limit 600)" python3 "tests/cli/$name.py" build-gpu/dp >"$f.out" 2>&1
      rc=$?
    fi
    if ((rc == 0)); then echo "pass: $kind $name" >"$f"; else { echo "FAIL (exit $rc): $kind $name"; tail -30 "$f.out"; } >"$f"; fi
    rm -f "$f.out"' _ {} <"$dir/jobs"
  : >"$log"
  while IFS=$'\t' read -r kind n _; do
    f="$dir/$kind.$n"
    if [[ -f $f ]]; then cat "$f" >>"$log"; else echo "NOT RUN: $kind $n" >>"$log"; fi
  done <"$dir/jobs"
  local cases
  cases=$(wc -l <"$dir/cases")
  rm -rf "$dir"
  pass=$(grep -c '^pass: ' "$log")
  bad=$(grep -c '^FAIL ' "$log")
  unrun=$(grep -c '^NOT RUN' "$log")
  stage_result unit $((bad + unrun)) "$pass of $((pass + bad + unrun)) pass ($cases unit cases, each in its own process, and ${#suites[@]} CLI suites), $bad fail, $unrun not run, in $((SECONDS - t0)) s"
}

# A dirty run's check once more, changed as LABEL says: LOG, LABEL, then the command. Its verdict
# goes into LOG above the first run's, which stays the run's (the last line). Returns 1 when the
# tool failed itself again (an "Internal Sanitizer Error"), else 0 (a rerun skipped for the
# deadline included).
run_again() {
  local log=$1 label=$2 again rc failed_itself=0
  shift 2
  again=$(limit "${DP_SANITIZE_TIMEOUT:-540}")
  ((again >= 15)) || return 0
  timeout "$again" "$@" >"$log.again" 2>&1
  rc=$?
  grep -q "Internal Sanitizer Error" "$log.again" && failed_itself=1
  {
    sed '$d' "$log"
    case $rc in
      0) echo "-- again $label: clean" ;;
      124) echo "-- again $label: unfinished (time limit)" ;;
      *)
        echo "-- again $label: dirty (exit $rc), every finding:"
        awk -f tools/gpu/sanitizer_tally.awk "$log.again" | sort -rn | head -20
        grep -m 3 "Internal Sanitizer Error" "$log.again"
        ;;
    esac
    tail -1 "$log"
  } >"$log.with-again"
  mv "$log.with-again" "$log"
  rm -f "$log.again"
  return $((failed_itself))
}
export -f run_again

# Appends standard input to a file that parallel sanitizer runs share, one writer at a time.
append_locked() {
  if command -v flock >/dev/null; then flock "$1" cat >>"$1"; else cat >>"$1"; fi
}
export -f append_locked

# One compute-sanitizer run: tool, log file, then the command. Prints "clean", "dirty",
# "unfinished" or (racecheck failing itself with no kernel instrumented) "tool-failed" last. Its
# time limit is DP_SANITIZE_TIMEOUT or what is left, if less. A run that finished in an earlier
# call on this machine with the same binaries ($SANITIZE_DONE) is not run again: its verdict is
# copied, so a second call goes on where the first was cut off.
sanitize_one() {
  local tool=$1 log=$2 cap header done_file
  shift 2
  local -a options=()
  # racecheck-ours: racecheck on dp's kernels only (LIBRARY_KERNELS left out)
  [[ $tool == racecheck-ours ]] && tool=racecheck options=(--kernel-name-exclude "regex=$LIBRARY_KERNELS")
  # Cases whose CUDA calls fail by design: the check that a failed call is reported once makes
  # one fail; NCCL's set-up asks for kernels built for other GPUs and gets error 209 inside
  # libnccl; the out-of-memory cases fill the GPU until cudaMalloc fails. Their API errors are
  # expected (dp checks every return code and throws or, out of memory, empties caches and says
  # so); their memory accesses are still checked.
  case "$*" in
    *"a failed CUDA call is reported once"* | *"NCCL on one GPU"* | *"memory comes back"* | *"sibling's cache"*)
      options+=(--report-api-errors no) ;;
  esac
  # initcheck with what the probe in stage_sanitize found this compute-sanitizer takes (see there)
  if [[ $tool == initcheck && -n ${SANITIZE_INITCHECK_EXTRA:-} ]]; then
    local -a extra
    read -ra extra <<<"$SANITIZE_INITCHECK_EXTRA"
    options+=("${extra[@]}")
  fi
  header="== compute-sanitizer --tool $tool $*"
  done_file="$SANITIZE_DONE/$(sha1sum <<<"$header${options[*]}" | cut -c1-40).log"
  # The run and the sources it checks (a dp train run: the library and dp's; a test case: the
  # library and the tests): a clean verdict recorded for this key in tools/gpu/sanitized.txt, by an
  # earlier GPU run at the same sources, is taken instead of running again.
  local sources=$SOURCES_CASES key
  [[ $* == *" train "* ]] && sources=$SOURCES_TRAIN
  key=$(sha1sum <<<"$header${options[*]} $sources" | cut -c1-40)
  cap=$(limit "${DP_SANITIZE_TIMEOUT:-540}")
  if grep -q "^$key " "$SANITIZE_RECORDED" 2>/dev/null; then
    { echo "$header${options[*]:+ (${options[*]})}"; echo "-- (clean at these sources in an earlier GPU run: tools/gpu/sanitized.txt)"
      echo clean; } >"$log"
  elif [[ -f $done_file ]]; then
    { sed '$d' "$done_file"; echo "-- (finished in an earlier call with these binaries)"; tail -1 "$done_file"; } >"$log"
  elif ((cap < 15)); then
    { echo "$header${options[*]:+ (${options[*]})}"; echo "-- not started: the deadline"; echo unfinished; } >"$log"
  else
    # --print-limit: the tally below sees (nearly) every finding, not the default 100
    timeout "$cap" compute-sanitizer --tool "$tool" "${options[@]}" --print-limit 20000 --error-exitcode 99 "$@" \
      >"$log.full" 2>&1
    local rc=$?
    # a doctest filter that matched nothing ran nothing: not clean
    ran_nothing "$log.full" && rc=98
    {
      echo "$header${options[*]:+ (${options[*]})}"
      # each finding's first line and where it was (the kernel, its thread and block)
      grep -E "ERROR SUMMARY|========= (Invalid|Race|Uninitialized|Barrier|Program hit|Host API|Internal Sanitizer)|^=========     (at|by|Uninitialized)" \
        "$log.full" | head -30
      if grep -qE "^========= (Invalid|Race|Uninitialized|Barrier|Program hit|Host API)" "$log.full"; then
        echo "-- every finding, counted by kind and where:"
        awk -f tools/gpu/sanitizer_tally.awk "$log.full" | sort -rn | head -40
      fi
      [[ $rc -eq 124 ]] && echo "-- TIMED OUT after $cap s (not clean: unfinished)"
      if [[ $rc -ne 0 ]]; then
        echo "-- exit $rc; the end of its output:"
        tail -40 "$log.full"
      fi
      if [[ $rc -eq 0 ]]; then echo clean; elif [[ $rc -eq 124 ]]; then echo unfinished; else echo dirty; fi
    } >"$log"
    # A dirty run's first findings whole (each with its address and the host frames that launched the
    # kernel: which op read what), for the account afterwards; one file for every run (few files
    # are kept from the GPU machine).
    if [[ $rc -ne 0 && $rc -ne 124 ]]; then
      { echo "$header${options[*]:+ (${options[*]})}"; head -3000 "$log.full"; } | gzip -c >"$log.full.gz"
    fi
    # A dirty initcheck run, once more with every allocation dp makes written first (NaN,
    # DP_POISON_ALLOCATIONS=1). Clean then: every read it flagged is of dp's own blocks, and the
    # case still passes with them NaN first, so what those reads found had been written (by writes
    # the tool does not follow) wherever a NaN would reach the case's checks. Dirty still: memory
    # outside dp's allocator (a library's own), or a case that fails on NaN. The verdict stays dirty.
    local dirty=0  # findings or a failed case: not cut by the time limit (124), not a filter matching nothing (98)
    ((rc != 0 && rc != 124 && rc != 98)) && dirty=1
    if ((dirty)) && [[ $tool == initcheck && -z ${DP_POISON_ALLOCATIONS:-} ]]; then
      run_again "$log" "with DP_POISON_ALLOCATIONS=1 (every allocation written first)" \
        env DP_POISON_ALLOCATIONS=1 compute-sanitizer --tool "$tool" "${options[@]}" --print-limit 20000 \
        --error-exitcode 99 "$@"
    fi
    # racecheck that failed itself (an "Internal Sanitizer Error", as on cuDNN's bf16 convolutions
    # on an H100), once more with a filter that names dp's kernels instead of the libraries', so no
    # library kernel is instrumented whatever its name: clean then, the exclude list let through a
    # library kernel racecheck cannot instrument. The same error (H100, 2026-11-27): once more with a
    # filter no kernel's name can match, so racecheck instruments nothing. The same error again:
    # racecheck's presence alone breaks a kernel, and no kernel of dp's is involved; clean: one of
    # dp's kernels, instrumented, is where it fails.
    if ((dirty)) && [[ $tool == racecheck ]] && grep -q "Internal Sanitizer Error" "$log.full"; then
      local -a ours=()
      local o
      for o in "${options[@]}"; do [[ $o == --kernel-name-exclude || $o == regex=* ]] || ours+=("$o"); done
      if ! run_again "$log" "checking dp's kernels only (--kernel-name regex=$DP_KERNELS)" \
        compute-sanitizer --tool racecheck "${ours[@]}" --kernel-name "regex=$DP_KERNELS" --print-limit 20000 \
        --error-exitcode 99 "$@"; then
        # It failed itself on dp's kernels only too: once more instrumenting nothing. The same error
        # then (the bf16 step cases on an H100, 2026-11-27): racecheck could not check the run, and
        # no kernel of dp's is involved. Neither clean nor dirty: its own verdict, which still fails
        # the stage.
        if ! run_again "$log" "instrumenting no kernel (--kernel-name regex=$NO_KERNELS)" \
          compute-sanitizer --tool racecheck "${ours[@]}" --kernel-name "regex=$NO_KERNELS" --print-limit 20000 \
          --error-exitcode 99 "$@"; then
          { sed '$d' "$log"; echo "-- racecheck fails itself instrumenting no kernel: the tool's failure, not dp's"
            echo tool-failed; } >"$log.verdict"
          mv "$log.verdict" "$log"
        fi
      fi
    fi
    rm -f "$log.full"
    [[ $rc -ne 124 ]] && cp "$log" "$done_file"
  fi
  # Clean: its key for tools/gpu/sanitized.txt (the run's sanitized.txt under $OUT, to append there).
  if [[ $(tail -1 "$log") == clean ]]; then
    echo "$key $tool ${*#build-gpu/}" | append_locked "$SANITIZE_CLEAN"
  fi
  # into the stage's log as each run ends: a stage cut short by a time limit still reports
  append_locked "$SANITIZE_LOG" <"$log"
}
export -f sanitize_one
# The kernels of cuBLAS, cuDNN and NCCL, by what their names hold (as the profiles print them):
# racecheck on the step cases leaves them out. It checks shared memory within a kernel, and the
# step cases run the kernels the kernel cases and the dp train runs have checked whole, libraries
# included; what the step cases add is dp's kernels at the step's shapes. Instrumenting every
# library GEMM and convolution of several trainings kept all 12 unfinished in every GPU run to
# 2026-11-26. No kernel of dp's matches (tests/cli/test_gpu_verify.py checks its sources).
export LIBRARY_KERNELS='xmma|cutlass|cudnn|cublas|nccl|fft2d|convolve|wgrad_alg|wgrad2d|dgrad|flip_filter|winograd|op_generic|gemv|gemmSN|splitKreduce'
# dp's own kernels, all in namespace dp::cuda: the name demangled or mangled (_ZN2dp4cuda...)
export DP_KERNELS='dp::cuda|2dp4cuda'
# a filter no kernel's name matches, mangled or not (a C++ name holds no '-')
export NO_KERNELS='^instrument-no-kernel$'

stage_sanitize() {
  local log="$out/sanitize.log" dir t0=$SECONDS
  dir=$(mktemp -d)
  # The named runs (mlp and convnet; in-replica, eval, tf32, split auto, balance-memory), then what
  # came after: captured steps, --sync allreduce (the ring on the comm streams; bf16; with
  # --accumulate: no_sync, the sum added into its buckets), the GPT with dropout, resnet8 recomputing,
  # the convnet with cuDNN timing its algorithms (on the allocator's memory since 2026-11-27).
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
    "--model convnet --cudnn benchmark"
  )
  export SANITIZE_LOG=$log
  # Finished runs, kept for a later call on this machine, by the binaries they ran.
  SANITIZE_DONE=${DP_SANITIZE_DONE_ROOT:-/tmp/dp-sanitized}/$(cat build-gpu/dp build-gpu/tests/dp_gpu_tests | md5sum | cut -c1-32)
  export SANITIZE_DONE
  # Clean verdicts of earlier GPU runs, by run and sources (DP_SANITIZE_RECORDED=/dev/null: none),
  # and this run's, written to $OUT/sanitized.txt for appending to it.
  SANITIZE_RECORDED=${DP_SANITIZE_RECORDED:-tools/gpu/sanitized.txt}
  SANITIZE_CLEAN="$out/sanitized.txt"
  SOURCES_CASES=$(tools/gpu/source_hash.sh CMakeLists.txt core kernels runtime models data io engine tools/dp/flags tests/gpu tests/helpers.hpp \
    tests/step_batches.hpp tests/conv_wgrad_cases.hpp tests/doctest_main.hpp)
  SOURCES_TRAIN=$(tools/gpu/source_hash.sh CMakeLists.txt core kernels runtime models data io engine plan tools/dp)
  export SANITIZE_RECORDED SANITIZE_CLEAN SOURCES_CASES SOURCES_TRAIN
  : >"$SANITIZE_CLEAN"
  mkdir -p "$SANITIZE_DONE"
  : >"$log"
  local bin=build-gpu/tests/dp_gpu_tests
  local -a cases
  mapfile -t cases < <(gpu_cases)
  # First, whether compute-sanitizer can instrument this GPU at all (on gVisor it says "Device not
  # supported" and every run would read as dirty): one kernel case, seconds. Matched in its own
  # words (the lines it starts with =========), not the tested program's.
  local sanitizer_cannot='device not supported|^=+ .*(unable to|failed to initialize|not supported)'
  local first=${cases[0]:-} tried refusal
  tried=$(timeout "$(limit 90)" compute-sanitizer --tool memcheck --error-exitcode 99 "$bin" "-tc=${first//,/?}" 2>&1)
  refusal=$(grep -m1 -iE "$sanitizer_cannot" <<<"$tried" | sed 's/^=* *//')
  if [[ -n $refusal ]]; then
    { echo "== compute-sanitizer cannot instrument this GPU here (kernel $(uname -r)):"; tail -20 <<<"$tried"; } >"$log"
    rm -rf "$dir"
    stage_result sanitize 1 "not run: compute-sanitizer cannot instrument this GPU here ($refusal; kernel $(uname -r))"
    return
  fi
  # What initcheck sees: Hopper kernels (cuBLAS's and cuDNN's among them) store through bulk copies
  # (TMA) and warpgroup MMA, which compute-sanitizer instruments only when asked (where it has the
  # options); a store it does not see makes every later read of those bytes read as uninitialised.
  # Asked for when this compute-sanitizer lists the options and a kernel case runs clean with them.
  echo "== this compute-sanitizer: $(compute-sanitizer --version 2>&1 | grep -m1 -i version)" >>"$log"
  local help wanted=() opt
  help=$(compute-sanitizer --help 2>&1)
  for opt in --check-bulk-copy --check-warpgroup-mma; do grep -q -- "$opt" <<<"$help" && wanted+=("$opt" yes); done
  export SANITIZE_INITCHECK_EXTRA=""
  if ((${#wanted[@]})); then
    if timeout "$(limit 90)" compute-sanitizer --tool initcheck "${wanted[@]}" --error-exitcode 99 "$bin" "-tc=${first//,/?}" \
      >"$dir/initcheck-options.txt" 2>&1; then
      SANITIZE_INITCHECK_EXTRA="${wanted[*]}"
      echo "== initcheck runs with ${wanted[*]}" >>"$log"
    else
      { echo "== initcheck without ${wanted[*]} (a kernel case with them did not run clean):"; tail -5 "$dir/initcheck-options.txt"; } >>"$log"
    fi
  else
    echo "== initcheck as it comes (this compute-sanitizer lists neither --check-bulk-copy nor --check-warpgroup-mma)" >>"$log"
  fi
  # DP_SANITIZE_QUICK=1: racecheck, synccheck and initcheck only on the kernel cases and the first
  # two trains (memcheck on everything).
  # DP_SANITIZE_PART=slow|rest: only the step cases under racecheck, synccheck and initcheck (slow),
  # or everything else (rest).
  local quick=${DP_SANITIZE_QUICK:-0} part=${DP_SANITIZE_PART:-all}
  # Each job a file of NUL-separated words (tool, then the command: doctest names hold spaces and
  # parentheses), started in the order of their numbers, $jobs at a time on the one GPU.
  # DP_SANITIZE_MATCH: only the runs whose tool and command match this extended regex (e.g.
  # '^racecheck-ours .*bf16' for the racecheck of the step cases with bf16 in their names).
  local n=1000 match=${DP_SANITIZE_MATCH:-}
  job() {
    [[ -z $match || "$*" =~ $match ]] || return 0
    n=$((n + 1))
    printf '%s\0' "$@" >"$dir/$n.job"
  }
  train_job() {  # tool, then the train's flags
    local tool=$1
    shift
    job "$tool" build-gpu/dp train --devices cuda:0x4 --steps 3 --generated-size 384 "$@"
  }
  local -a step_cases=() kernel_cases=() alone=() timed=()
  for name in "${cases[@]}"; do
    # the cases that measure or fill the GPU's memory would see the other processes': alone, last
    if [[ $name == *"memory comes back"* || $name == *"sibling's cache"* ]]; then alone+=("$name"); continue; fi
    # a case that compares the GPU's times (a replica with 255 times the work takes longer): the
    # other tools' instrumentation costs per kernel and per barrier, not per unit of work, so only
    # memcheck keeps the proportion it asserts
    if [[ $name == *"replica times on a GPU"* ]]; then timed+=("$name"); continue; fi
    if [[ $name == *"cuda:0x"* ]]; then step_cases+=("$name"); else kernel_cases+=("$name"); fi
  done
  local t tool
  if [[ $part != slow ]]; then
    for name in "${kernel_cases[@]}" "${step_cases[@]}" "${timed[@]}"; do job memcheck "$bin" "-tc=${name//,/?}"; done
    # shellcheck disable=SC2086
    for t in "${trains[@]}"; do train_job memcheck $t; done
    for tool in racecheck synccheck initcheck; do
      for name in "${kernel_cases[@]}"; do job "$tool" "$bin" "-tc=${name//,/?}"; done
      local -a these=("${trains[@]}")
      [[ $quick == 1 ]] && these=("${trains[@]:0:2}")
      # shellcheck disable=SC2086
      for t in "${these[@]}"; do train_job "$tool" $t; done
    done
  fi
  if [[ $quick != 1 && $part != rest ]]; then
    # initcheck first: what a step adds to its kernels is ordering between streams, which decides
    # whether a read finds memory written; racecheck and synccheck look inside each kernel (shared
    # memory, barriers), which the kernel cases have covered already; racecheck on dp's kernels only
    for tool in initcheck synccheck racecheck-ours; do
      for name in "${step_cases[@]}"; do job "$tool" "$bin" "-tc=${name//,/?}"; done
    done
  fi
  # The cases that fill the GPU's memory run alone: memcheck first (it belongs with memcheck on
  # every case, and coming last it was never reached in two H100 runs of 2026-11-26), initcheck last.
  alone_under() {
    [[ $part == slow ]] && return
    for name in "${alone[@]}"; do
      [[ -z $match || "$1 $bin -tc=${name//,/?}" =~ $match ]] || continue
      n=$((n + 1))
      sanitize_one "$1" "$dir/$n.log" "$bin" "-tc=${name//,/?}"
    done
  }
  alone_under memcheck
  if compgen -G "$dir/*.job" >/dev/null; then
    printf '%s\n' "$dir"/*.job | xargs -P "$jobs" -I{} bash -c 'mapfile -d "" -t w <"$1"; sanitize_one "${w[0]}" "${1%.job}.log" "${w[@]:1}"' _ {}
  fi
  alone_under initcheck
  if compgen -G "$dir/*.log.full.gz" >/dev/null; then
    # one gzip stream per dirty run, concatenated: zcat reads them as one text
    cat "$dir"/*.log.full.gz >"$out/sanitize-findings.txt.gz"
  fi
  local runs bad unfinished tool_failed
  runs=$(grep -c '^== compute-sanitizer' "$log")
  bad=$(grep -c '^dirty$' "$log")
  unfinished=$(grep -c '^unfinished$' "$log")
  tool_failed=$(grep -c '^tool-failed$' "$log")
  rm -rf "$dir"
  local tool_text=""
  ((tool_failed)) && tool_text=", $tool_failed failed by racecheck itself (instrumenting no kernel)"
  stage_result sanitize $((bad + unfinished + tool_failed)) "$((runs - bad - unfinished - tool_failed)) of $runs compute-sanitizer runs clean, $bad dirty, $unfinished unfinished (time limit)$tool_text; $(grep -c '^-- (finished in an earlier call' "$log") verdicts from an earlier call, $(grep -c '^-- (clean at these sources' "$log") recorded at these sources (sanitized.txt: $(wc -l <"$SANITIZE_CLEAN") clean); in $((SECONDS - t0)) s"
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
      timeout "$(limit 300)" build-gpu/dp train --model "$model" --devices "${devices%t2}" "${extra[@]}" --steps 50 --batch 128 \
        --generated-size 6400 --lr "$lr" --metrics "$dir/$model-$lr-$devices.jsonl" --save "$dir/$model-$lr-$devices.safetensors" \
        >>"$log" 2>&1 || bad=$((bad + 1))
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
      timeout "$(limit 300)" build-gpu/dp train --model convnet --devices "$devices" --data .gpu-kit/mnist --epochs 1 --eval \
        --metrics "$dir/mnist-$devices.jsonl" >>"$log" 2>&1 || bad=$((bad + 1))
    done
    python3 - "$dir/mnist-cuda:0x2.jsonl" "$dir/mnist-host:2.jsonl" >>"$log" 2>&1 <<'PY' || bad=$((bad + 1))
import json, sys
acc = [max(json.loads(l).get("test_accuracy") or 0 for l in open(p)) for p in sys.argv[1:]]
print(f"== MNIST, one epoch of the convnet: test accuracy cuda:0x2 {acc[0]:.4f}, host:2 {acc[1]:.4f}")
sys.exit(0 if acc[1] > 0.5 and abs(acc[0] - acc[1]) <= 0.005 else 1)
PY
  else
    echo "== MNIST: .gpu-kit/mnist not carried (tools/gpu/kit.sh copies it)" >>"$log"
    bad=$((bad + 1))
  fi
  # --device-memory on a GPU: out of memory is exit 3 with its remedies.
  timeout "$(limit 120)" build-gpu/dp train --model convnet --devices cuda:0 --batch 4096 --steps 1 --generated-size 8192 \
    --device-memory 16MiB >"$dir/oom.txt" 2>&1
  local rc=$?
  { echo "== --device-memory 16MiB on cuda:0, batch 4096: exit $rc"; tail -5 "$dir/oom.txt"; } >>"$log"
  [[ $rc -eq 3 ]] || bad=$((bad + 1))
  rm -rf "$dir"
  stage_result equal "$bad" "50 steps cuda:0x4 against host:4 ($(grep -c '^within' "$log") of 3 within calibrated tolerance, 2 judged), MNIST epoch, --device-memory exit 3"
}

stage_capabilities() {
  local t0=$SECONDS log="$out/capabilities.md" rc
  # Each memprof report from the GPU goes to $out/fixtures (record_run.py makes them tests/fixtures/gpu-memprof).
  PYTHONUNBUFFERED=1 timeout "$(limit 900)" python3 tools/gpu/capabilities.py --dp build-gpu/dp \
    --only "${DP_CAPABILITIES:-plan,zero,file,memory}" --fixtures "$out/fixtures" >"$log" 2>&1
  rc=$?
  stage_result capabilities "$rc" "tools/gpu/capabilities.py in $((SECONDS - t0)) s: $(grep -E '^(PASS|FAIL) ' "$log" | cut -c1-120 | paste -sd ' ' -)"
}

# DP_PROFILE_SPECS: profile.sh's specs instead of these (e.g. "replicas:mlp:1024").
stage_profile() {
  local t0=$SECONDS specs
  read -ra specs <<<"${DP_PROFILE_SPECS:-convnet:1024 resnet18:256 mlp:1024 phases:mlp:1024 phases:convnet:1024 replicas:convnet:1024 loader:mlp:1024}"
  OUT="$out" timeout "$(limit 900)" tools/gpu/profile.sh "${specs[@]}" >/dev/null 2>&1
  stage_result profile $? "tools/gpu/profile.sh ${specs[*]} in $((SECONDS - t0)) s (profile.txt)"
}

# The exporter's checks with this machine's PyTorch; exit 77 (no torchvision) is a SKIP line.
stage_export() {
  local t0=$SECONDS log="$out/export.log" rc all=0 ran=0 check
  if ! python3 -c 'import torch; print("torch", torch.__version__)' >"$log" 2>&1; then
    note "SKIP export: no PyTorch for python3 ($(tail -1 "$log"))"
    return
  fi
  for check in nanogpt_export_check zoo_export_check; do
    echo "== $check" >>"$log"
    PYTHONUNBUFFERED=1 timeout "$(limit 600)" python3 "tests/torch/$check.py" build-gpu/dp >>"$log" 2>&1
    rc=$?
    if [[ $rc -eq 77 ]]; then note "SKIP export: $check ($(tail -1 "$log"))"; continue; fi
    ran=$((ran + 1))
    [[ $rc -ne 0 ]] && all=$rc
  done
  ((ran > 0)) && stage_result export "$all" "the exporter under $(head -1 "$log") in $((SECONDS - t0)) s: $(grep -E 'passed|FAILED' "$log" | cut -c1-100 | paste -sd ' ' -)"
}

# torch.compile's cache filled for the bench's table 9, in the background while the stages after it
# run (they time nothing; the bench waits for it before it times anything).
prime_pid=""
stage_prime() {
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 setsid timeout "$(limit 400)" python3 tools/bench/bench_gpu.py --dp build-gpu/dp --prime \
    ${DP_BENCH_ARGS:-} >"$out/prime.log" 2>&1 &
  prime_pid=$!
  note "PASS prime: started torch.compile's cache for the bench in the background (prime.log)"
}

# Waits for the prime, at most DP_PRIME_WAIT seconds (90), then stops it: the bench must time alone,
# and a GPU case must have the GPU to itself (the reason given, for prime.log).
prime_done() {
  [[ -n $prime_pid ]] || return 0
  local why=${1:-the bench times alone}
  local waited=0 most=${DP_PRIME_WAIT:-90}
  while kill -0 "$prime_pid" 2>/dev/null && ((waited < most && $(left) > 60)); do sleep 1; waited=$((waited + 1)); done
  if kill -0 "$prime_pid" 2>/dev/null; then
    kill -- -"$prime_pid" 2>/dev/null || kill "$prime_pid"
    echo "stopped after waiting $waited s: $why" >>"$out/prime.log"
  fi
  wait "$prime_pid" 2>/dev/null
  prime_pid=""
}

stage_bench() {
  local t0=$SECONDS
  prime_done
  # shellcheck disable=SC2086
  PYTHONUNBUFFERED=1 timeout "$(limit "${DP_BENCH_SECONDS:-900}")" python3 tools/bench/bench_gpu.py --dp build-gpu/dp ${DP_BENCH_ARGS:-} >"$out/bench.md" 2>&1
  stage_result bench $? "tools/bench/bench_gpu.py ${DP_BENCH_ARGS:-} in $((SECONDS - t0)) s (bench.md)"
}

# The least time each stage is started with.
declare -A needs=([tests]=60 [poisoned]=60 [unit]=60 [sanitize]=60 [equal]=60 [capabilities]=60 [mpi]=30 [profile]=60 [bench]=60
                  [prime]=120 [export]=60)
[[ $# -gt 0 ]] || set -- probe build tests equal bench
for stage in "$@"; do
  case "$stage" in
    probe) stage_probe ;;
    build) stage_build ;;
    tests | poisoned | unit | sanitize | equal | capabilities | mpi | profile | bench | prime | export)
      env_ready || { note "FAIL $stage: no build-gpu/env.sh (run the build stage first)"; failed=$((failed + 1)); continue; }
      fits "$stage" "${needs[$stage]}" && "stage_$stage"
      ;;
    *) echo "verify.sh: unknown stage '$stage' (probe, build, tests, poisoned, unit, sanitize, equal, capabilities, mpi, profile, prime, bench, export)" >&2; exit 2 ;;
  esac
done
prime_done
echo "---- summary"
cat "$summary"
# At most 8 files come back from a GPU machine: with more, or a folder (the fixtures), everything but
# the summary goes into logs.tar.gz (DP_PACK_LOGS=0 leaves them as they are).
mapfile -t made < <(find "$out" -mindepth 1 -maxdepth 1 \( -type f -o -type d \) ! -name summary.txt -printf '%f\n' | LC_ALL=C sort)
if [[ ${DP_PACK_LOGS:-1} != 0 ]] && { ((${#made[@]} > 7)) || [[ -n $(find "$out" -mindepth 1 -maxdepth 1 -type d) ]]; }; then
  tar -C "$out" -czf "$out/logs.tar.gz.part" "${made[@]}" && mv "$out/logs.tar.gz.part" "$out/logs.tar.gz" &&
    (cd "$out" && rm -rf "${made[@]}") && echo "(${#made[@]} logs packed into $out/logs.tar.gz)"
fi
exit "$failed"
