// What `dp --version` prints, and what the Python package's __version__ is made from: the commit
// and the backend. A target including it has the build's generated/ folder (dp_version.hpp:
// DP_COMMIT) on its include path, and DP_BUILD_CUDA defined when CUDA was built.
#pragma once
#include <string>

#include "dp_version.hpp"

namespace dp::cli {

inline std::string version_text() {
#ifdef DP_BUILD_CUDA
  const std::string backend = std::string("with CUDA ") + DP_BUILD_CUDA;
#else
  const std::string backend = "without CUDA (host and meta devices only)";
#endif
  return std::string("dp-engine, commit ") + DP_COMMIT + ", built " + backend;
}

inline std::string commit() { return DP_COMMIT; }

}  // namespace dp::cli
