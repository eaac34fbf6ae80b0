#!/usr/bin/env bash
# One hash of every file the binaries are compiled from (C++, CUDA, CMake), in a fixed order: the
# GPU machine compares it with the one tools/gpu/prebuild.sh recorded, so binaries built here run
# there only if they were built from exactly this tree (no git there: the working tree travels bare).
set -euo pipefail
cd "$(dirname "$0")/../.."
find CMakeLists.txt engine kernels models tools/dp tools/bench tests -type f \
  \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' -o -name CMakeLists.txt \) -print0 |
  LC_ALL=C sort -z | xargs -0 sha1sum | sha1sum | cut -d' ' -f1
