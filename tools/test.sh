#!/usr/bin/env bash
# Installs, builds and runs every test (doctest suites, CLI bad-input checks, the PyTorch
# cross-check, the run page in a headless Chromium) through ctest.
#   tools/test.sh                      release build, all tests
#   tools/test.sh --sanitize address   unit tests under ASan+UBSan
#   tools/test.sh --sanitize thread    unit tests under TSan
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh "${@:---tests}"
if [[ "${1:-}" == "--sanitize" ]]; then
  dir="build-asan"
  [[ "$2" == "thread" ]] && dir="build-tsan"
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  # tests/tsan.supp: OpenBLAS's threads, whose synchronisation TSan cannot see.
  export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan.supp"
  # TSan needs the old address-space layout on kernels with high mmap randomisation.
  run=()
  [[ "$2" == "thread" ]] && command -v setarch >/dev/null && run=(setarch "$(uname -m)" -R)
  "${run[@]}" ctest --test-dir "$dir" -L unit -j"$(nproc)" --output-on-failure
else
  # The run page's browser test (ctest -L html) renders in Debian's Chromium: a test tool, so the
  # test setup installs it, not tools/setup.sh.
  if ! command -v chromium >/dev/null; then
    echo "test: installing chromium (for the run page's browser test)"
    sudo=""
    [[ $(id -u) -eq 0 ]] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends chromium >/dev/null
  fi
  ctest --test-dir build -j"$(nproc)" --output-on-failure
fi
