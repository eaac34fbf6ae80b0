// The 16-bit explicit attention's softmax kernels (kernels/cuda/attention_rows_kernels.cuh) run on
// the CPU through warp_emulation.hpp, launched as attention_16bit.cu launches them, against a
// softmax in double: causal or not, with a bias of several blocks (a −inf among it, as Swin's mask
// has), every storage type; and its backward, d = att ⊙ (d − Σ d⊙att), with the kept copy.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "emulated_values.hpp"
#include "warp_emulation.hpp"
#include "kernels/cuda/attention_rows_kernels.cuh"

namespace test_attention_rows_emulated {

using namespace dp;
using namespace dp::cuda::attention_rows_kernels;
using namespace dp::emulated;

template <typename T>
void check(bool causal, bool biased, double tol) {
  CAPTURE(causal);
  CAPTURE(biased);
  const int64_t B = 2, H = 3, seq = 37, blocks = 2, rows = B * H * seq, n = rows * seq;
  const auto scores = rounded<T>(random_values(static_cast<size_t>(n), 21, -3.f, 3.f));
  auto bias_values = random_values(static_cast<size_t>(blocks * H * seq * seq), 22, -1.f, 1.f);
  for (size_t i = 5; i < bias_values.size(); i += 7) bias_values[i] = -INFINITY;  // masked, never a whole row
  for (int64_t r = 0; r < blocks * H * seq; ++r) bias_values[static_cast<size_t>(r * seq)] = 0.f;  // key 0 stays
  const auto bias = rounded<T>(bias_values);
  const auto ws = widened(scores), wb = widened(bias);

  std::vector<float> want(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t last = causal ? r % seq : seq - 1, hrows = H * seq;
    const float* brow = biased ? wb.data() + ((r / hrows % blocks) * hrows + r % hrows) * seq : nullptr;
    std::vector<double> v(static_cast<size_t>(last + 1));
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j <= last; ++j) {
      v[static_cast<size_t>(j)] = double(ws[static_cast<size_t>(r * seq + j)]) + (brow ? brow[j] : 0.0);
      mx = std::max(mx, v[static_cast<size_t>(j)]);
    }
    for (double x : v) sum += x == -INFINITY ? 0.0 : std::exp(x - mx);
    for (int64_t j = 0; j < seq; ++j)
      want[static_cast<size_t>(r * seq + j)] =
          j <= last && v[static_cast<size_t>(j)] != -INFINITY ? static_cast<float>(std::exp(v[static_cast<size_t>(j)] - mx) / sum) : 0.f;
  }
  auto att = scores;
  emu::launch(dim3(static_cast<unsigned>((rows + 7) / 8)), dim3(32, 8), 0, [&] {
    softmax_rows<T>(att.data(), biased ? bias.data() : nullptr, rows, seq, H * seq, blocks, causal);
  });
  CHECK(rel_error(widened(att), want) < tol);

  // backward over the probabilities as stored
  const auto d0 = rounded<T>(random_values(static_cast<size_t>(n), 23, -1.f, 1.f));
  const auto wa = widened(att), wd = widened(d0);
  std::vector<float> grad(static_cast<size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t last = causal ? r % seq : seq - 1;
    double dot = 0;
    for (int64_t j = 0; j <= last; ++j) dot += double(wd[static_cast<size_t>(r * seq + j)]) * wa[static_cast<size_t>(r * seq + j)];
    for (int64_t j = 0; j < seq; ++j) {
      const size_t i = static_cast<size_t>(r * seq + j);
      grad[i] = j <= last ? static_cast<float>(wa[i] * (wd[i] - dot)) : 0.f;
    }
  }
  auto d = d0;
  auto kept = unwritten<T>(static_cast<size_t>(n));
  emu::launch(dim3(static_cast<unsigned>((rows + 7) / 8)), dim3(32, 8), 0, [&] {
    softmax_rows_backward<T>(d.data(), kept.data(), att.data(), rows, seq, causal);
  });
  CHECK(rel_error(widened(d), grad) < tol);
  CHECK(rel_error(widened(kept), grad) < tol);
}

TEST_CASE("the 16-bit attention's softmax kernels, emulated on the CPU: a softmax in double, and its backward") {
  for (const bool causal : {true, false})
    for (const bool biased : {false, true}) {
      check<emu::bfloat16>(causal, biased, 8e-3);  // a probability rounded to 8 bits: 2^-8 of 1, and the sum's
      check<emu::float16>(causal, biased, 1e-3);
      check<float>(causal, biased, 1e-5);
    }
}

}  // namespace test_attention_rows_emulated
