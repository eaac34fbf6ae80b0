#!/usr/bin/env bash
# Installs what dp-engine needs (Debian packages) when it is missing, then configures and builds.
#   tools/setup.sh                      release build of dp in build/ (CUDA too when nvcc and a GPU are found),
#                                       and the Python package dp_engine for /usr/bin/python3 (build/python)
#   tools/setup.sh --tests              the same build with every test binary, CUDA's where nvcc is found
#                                       (tools/test.sh)
#   tools/setup.sh --sanitize address   ASan+UBSan build of the unit tests in build-asan/
#   tools/setup.sh --sanitize thread    TSan build of the unit tests in build-tsan/
#   tools/setup.sh --fuzz               clang ASan+UBSan build of the libFuzzer targets in build-fuzz/
#                                       (tools/fuzz.sh)
# Compiles go through ccache: a machine that built before rebuilds only what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

sanitize=""
targets=(--target dp_cli dp_engine_core)
case "${1:-}" in
  --sanitize) sanitize="${2:?--sanitize needs address or thread}" ;;
  --tests) targets=() ;;
  --fuzz) sanitize="fuzz" ;;
  "") ;;
  *) echo "setup: takes --tests, --sanitize address|thread or --fuzz, not '$1'" >&2; exit 2 ;;
esac

packages=(build-essential cmake ninja-build pkg-config ccache doctest-dev libcli11-dev nlohmann-json3-dev libopenblas-dev zlib1g-dev
          libturbojpeg0-dev libpng-dev python3 openmpi-bin libopenmpi-dev)
# The Python package (python/): pybind11 and Python's headers to build it, NumPy to hand it arrays.
[[ -z "$sanitize" ]] && packages+=(pybind11-dev python3-dev python3-numpy)
# PyTorch: the exporter's (tools/export_model.py) and the cross-checks'; dp itself runs without it.
# The Python package's tests: pytest, its progress bar and tables, and its notebook run by nbclient.
[[ "${1:-}" == "--tests" ]] && packages+=(python3-torch python3-torchvision python3-pytest python3-tqdm python3-pandas
                                         python3-nbclient python3-ipykernel)
# libFuzzer: clang's, with its runtime.
[[ "$sanitize" == "fuzz" ]] && packages+=(clang libclang-rt-14-dev)
sudo=""
[[ $(id -u) -eq 0 ]] || sudo="sudo"
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

jobs=$(nproc)
# The CUDA kernels are half the first build on 2 cores: dp alone gets them where a GPU can run
# them; the tests' build always compiles them (the suite checks they build, and runs them on a GPU).
cuda=ON
if [[ -z "$sanitize" && "${1:-}" != "--tests" ]] && ! [[ -e /dev/nvidiactl ]] && ! nvidia-smi -L >/dev/null 2>&1; then
  cuda=OFF
  echo "setup: no NVIDIA GPU here: building dp without the CUDA backend (tools/setup.sh --tests builds it too)"
fi
# Ninja: a library's sources compile while the library below it is still compiling, where make
# builds one target at a time and leaves a core idle. A tree another generator made starts afresh.
# A tree configured for another compiler starts afresh too.
configure() {  # DIR COMPILER CMAKE-ARGS...
  local dir=$1 cxx=$2
  shift 2
  if [[ -f "$dir/CMakeCache.txt" ]] && ! { grep -qx 'CMAKE_GENERATOR:INTERNAL=Ninja' "$dir/CMakeCache.txt" &&
    grep -q "^CMAKE_CXX_COMPILER:[A-Z]*=.*$cxx\$" "$dir/CMakeCache.txt"; }; then
    rm -rf "$dir/CMakeCache.txt" "$dir/CMakeFiles"
  fi
  CXX=$cxx cmake -G Ninja -S . -B "$dir" "$@" >/dev/null
}
case "$sanitize" in
  "")
    configure build c++ -DCMAKE_BUILD_TYPE=Release -DDP_CUDA="$cuda"
    cmake --build build -j"$jobs" "${targets[@]}"
    # `import dp_engine` for Debian's python3: a .pth file in its site folder names build/python.
    site=$(/usr/bin/python3 -c 'import site; print(site.getsitepackages()[0])')
    if [[ "$(cat "$site/dp_engine.pth" 2>/dev/null)" != "$PWD/build/python" ]]; then
      $sudo mkdir -p "$site"
      echo "$PWD/build/python" | $sudo tee "$site/dp_engine.pth" >/dev/null
      echo "setup: /usr/bin/python3 imports dp_engine from $PWD/build/python ($site/dp_engine.pth)"
    fi
    ;;
  address | thread)
    dir="build-${sanitize/address/asan}"
    dir="${dir/thread/tsan}"
    # CPU-only: the sanitizers watch the host backend's threads and queues, through the unit tests
    # (what tools/test.sh --sanitize runs), unity builds at -O1 with line tables (CMakeLists.txt);
    # and the CUDA kernels emulated on the CPU (tests/emulated: TSan watches their shared memory).
    configure "$dir" c++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDP_CUDA=OFF -DDP_SANITIZE="$sanitize"
    cmake --build "$dir" -j"$jobs" --target dp_tests dp_emulated_tests dp_fuzz_replay
    ;;
  fuzz)
    # The library with libFuzzer's coverage, ASan and UBSan (a unity build at -O1, as above), and one
    # fuzz_<format> a format (tests/fuzz/).
    configure build-fuzz clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDP_CUDA=OFF -DDP_MPI=OFF -DDP_SANITIZE=address -DDP_FUZZ=ON
    cmake --build build-fuzz -j"$jobs" --target $(cd tests/fuzz && ls fuzz_*.cpp | sed 's/\.cpp$//')
    ;;
  *)
    echo "setup: --sanitize takes address or thread, not '$sanitize'" >&2
    exit 2
    ;;
esac
