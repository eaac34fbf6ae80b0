// The vectorised exp and erf of kernels/cpu/fast_math.hpp against libm, over their whole range.
#include <doctest/doctest.h>

#include <cmath>

#include "kernels/cpu/fast_math.hpp"

namespace test_fast_math {  // one namespace a file: unity builds compile several files as one

using namespace dp::cpu;

TEST_CASE("fast_exp is within 2 ulp of exp from -87 to 88") {
  double worst = 0;
  for (double x = -87.0; x <= 88.0; x += 0.0137) {
    const double want = std::exp(static_cast<double>(static_cast<float>(x)));
    const double got = fast_exp(static_cast<float>(x));
    worst = std::max(worst, std::abs(got - want) / want);
  }
  CHECK(worst < 2.5e-7);  // 2 ulp of float32 is 2.4e-7 relative
  CHECK(fast_exp(0.f) == 1.f);
  CHECK(fast_exp(-1000.f) < 1e-37f);  // clamped: as good as zero beside any sum it joins
  CHECK(fast_exp(-1000.f) >= 0.f);
}

TEST_CASE("fast_erf is within 4e-7 of erf (A&S 7.1.26's 1.5e-7, evaluated in float32, as PyTorch's vectorised erf)") {
  double worst = 0;
  for (double x = -8.0; x <= 8.0; x += 0.001) {
    const float xf = static_cast<float>(x);
    worst = std::max(worst, std::abs(static_cast<double>(fast_erf(xf)) - std::erf(static_cast<double>(xf))));
  }
  CHECK(worst < 4e-7);
  CHECK(fast_erf(0.f) == doctest::Approx(0.0).epsilon(1e-7));
  CHECK(fast_erf(-3.f) == -fast_erf(3.f));
}

}  // namespace test_fast_math
