#!/usr/bin/env bash
# The libFuzzer targets (tests/fuzz/, docs/testing.md "Fuzzing"): one a format dp reads, built with
# clang under ASan and UBSan in build-fuzz/.
#   tools/fuzz.sh build                        install clang's libFuzzer if missing, build every fuzz_<format>
#   tools/fuzz.sh run FORMAT [SECONDS] [FLAG...]  fuzz one target from its seeds (default 60 s; new inputs
#                                              and findings in build-fuzz/tests/fuzz/{corpus,findings}/FORMAT)
#   tools/fuzz.sh ci                           every target for 20 s (-DDP_FUZZ_SECONDS=N): ctest -L fuzz
#   tools/fuzz.sh long RUNS                    every target for RUNS executions, its final stats printed
#   tools/fuzz.sh replay FORMAT FILE...        run one target on files (a finding to reproduce)
# The formats: a tests/fuzz/fuzz_<format>.cpp each.
set -euo pipefail
cd "$(dirname "$0")/.."
formats=$(cd tests/fuzz && ls fuzz_*.cpp | sed 's/^fuzz_\(.*\)\.cpp$/\1/' | tr '\n' ' ')
limits=(-malloc_limit_mb=2048 -rss_limit_mb=2048 -timeout=10)

target() {  # FORMAT: the executable, built
  local exe="build-fuzz/tests/fuzz/fuzz_$1"
  [[ " $formats " == *" $1 "* ]] || { echo "fuzz: no target '$1' (formats: $formats)" >&2; exit 2; }
  [[ -x "$exe" ]] || { echo "fuzz: $exe is not built: run tools/fuzz.sh build" >&2; exit 2; }
  echo "$exe"
}

fuzz() {  # FORMAT FLAG...: new inputs to the build tree's corpus, crashes to findings/
  local format=$1
  shift
  local exe work=build-fuzz/tests/fuzz/corpus/$format findings=build-fuzz/tests/fuzz/findings/$format
  exe=$(target "$format")
  mkdir -p "$work" "$findings"
  "$exe" "${limits[@]}" -dict="tests/fuzz/dicts/$format.dict" -artifact_prefix="$findings/" "$@" \
    "$work" "tests/fuzz/corpus/$format"
}

case "${1:-}" in
  build) tools/setup.sh --fuzz ;;
  run)
    format=${2:?run needs a format: $formats}
    seconds=${3:-60}
    shift $(($# < 3 ? $# : 3))
    fuzz "$format" -max_total_time="$seconds" -print_final_stats=1 "$@"
    ;;
  ci) ctest --test-dir build-fuzz -L fuzz -j"$(nproc)" --output-on-failure ;;
  long)
    # Every target, even after one finds something (libFuzzer stops at its first finding: the
    # summary names it, the file is in findings/FORMAT); exit 1 if any did.
    runs=${2:?long needs a number of executions}
    status=0
    for format in $formats; do
      echo "== fuzz_$format: $runs executions"
      fuzz "$format" -runs="$runs" -print_final_stats=1 >"/tmp/fuzz-$format.log" 2>&1 || status=1
      grep -E '^(stat::|#[0-9]+[[:space:]]+DONE|==[0-9]+==ERROR|SUMMARY|fuzz finding)' "/tmp/fuzz-$format.log" || true
    done
    exit $status
    ;;
  replay)
    format=${2:?replay needs a format: $formats}
    shift 2
    "$(target "$format")" "${limits[@]}" "$@"
    ;;
  *)
    sed -n '2,10p' "$0" >&2
    exit 2
    ;;
esac
