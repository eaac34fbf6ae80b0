#!/usr/bin/env bash
# One hash of every file the binaries are compiled from (C++, CUDA, CMake, and what the build embeds:
# the run page), in a fixed order: the GPU machine compares it with the one tools/gpu/prebuild.sh
# recorded, so binaries built here run there only if they were built from exactly this tree (no
# git there: the working tree travels bare). Given paths, the hash of those alone (verify.py's
# sanitizer records: the sources one run checks); a path that is not there counts as empty.
set -euo pipefail
cd "$(dirname "$0")/../.."
(($#)) || set -- CMakeLists.txt core kernels runtime models data io engine plan tools/dp tools/bench tests
paths=()
for p in "$@"; do [[ -e $p ]] && paths+=("$p"); done
((${#paths[@]})) || { sha1sum </dev/null | cut -d' ' -f1; exit 0; }
find "${paths[@]}" -type f \( -name '*.cpp' -o -name '*.hpp' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
  -o -name CMakeLists.txt -o -name '*.cmake' -o -name '*.html' \) -print0 |
  LC_ALL=C sort -z | xargs -0 sha1sum | sha1sum | cut -d' ' -f1
