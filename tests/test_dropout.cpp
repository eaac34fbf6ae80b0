// Dropout (nanoGPT's, --dropout): the masks (kernels/dropout_mask.hpp), the op and attention's
// dropout.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "engine/random.hpp"
#include "engine/host/thread_pool.hpp"
#include "helpers.hpp"
#include "kernels/ops/attention.hpp"
#include "kernels/ops/dropout.hpp"

using namespace dp;
using namespace dp::test;

namespace {

std::vector<float> dropped(const std::vector<float>& x, int64_t samples, const DropoutMask& m) {
  ThreadPool pool(2);
  std::vector<float> y(x.size());
  cpu::dropout_apply(pool, y.data(), x.data(), samples, static_cast<int64_t>(x.size()) / samples, m);
  return y;
}

}  // namespace

TEST_CASE("dropout drops a fraction p, scales what it keeps by float32's 1/(1 - p), p = 0 copies, p = 1 zeroes") {
  const int64_t samples = 10, per_sample = 100000;
  const std::vector<float> x(static_cast<size_t>(samples * per_sample), 3.f);
  for (float p : {0.f, 0.1f, 0.5f, 0.9f, 1.f}) {
    CAPTURE(p);
    const auto y = dropped(x, samples, {p, 2, 12345, nullptr, 0});
    const float kept_value = p < 1 ? 3.f * (1.f / (1.f - p)) : 0.f;
    int64_t zeros = 0;
    for (float v : y) {
      if (v == 0.f) ++zeros;
      else CHECK(v == kept_value);
    }
    const double n = static_cast<double>(y.size()), fraction = static_cast<double>(zeros) / n;
    CHECK(std::abs(fraction - p) <= 5 * std::sqrt(p * (1 - p) / n) + 1e-12);  // five standard deviations
  }
}

TEST_CASE("dropout's mask is a function of (key, site, sample, element): split anywhere, in place, key in memory") {
  const int64_t samples = 9, per_sample = 333;
  const auto x = random_vector(static_cast<size_t>(samples * per_sample), 5);
  const DropoutMask m{0.3f, 4, 0xfeedbeefcafe1234ull, nullptr, 100};
  const auto whole = dropped(x, samples, m);
  // The samples split between replicas at 4: each draws by its index in the whole batch.
  const std::vector<float> head(x.begin(), x.begin() + 4 * per_sample), tail(x.begin() + 4 * per_sample, x.end());
  DropoutMask second = m;
  second.first_sample = 104;
  auto parts = dropped(head, 4, m);
  const auto rest = dropped(tail, 5, second);
  parts.insert(parts.end(), rest.begin(), rest.end());
  CHECK(parts == whole);
  // In place, and the key read from memory when the op runs (as a step's kernels read it).
  const uint32_t key[2] = {0xcafe1234u, 0xfeedbeefu};
  DropoutMask from_memory = m;
  from_memory.key = 0, from_memory.key_at = key;
  std::vector<float> y = x;
  ThreadPool pool(3);
  cpu::dropout_apply(pool, y.data(), y.data(), samples, per_sample, from_memory);
  CHECK(y == whole);
  // Another key, site or sample: another mask (about half of a p = 0.5 mask's elements agree).
  auto agreement = [&](DropoutMask other) {
    const DropoutMask half{0.5f, m.site, m.key, nullptr, m.first_sample};
    other.p = 0.5f;
    const auto a = dropped(x, samples, half), b = dropped(x, samples, other);
    int64_t same = 0;
    for (size_t i = 0; i < a.size(); ++i) same += (a[i] == 0) == (b[i] == 0);
    return static_cast<double>(same) / static_cast<double>(a.size());
  };
  DropoutMask key2 = m, site2 = m, sample2 = m;
  key2.key ^= 1, site2.site = 5, sample2.first_sample = 101;
  for (const DropoutMask& other : {key2, site2, sample2}) CHECK(std::abs(agreement(other) - 0.5) < 0.03);
  CHECK(agreement(m) == 1.0);
}

TEST_CASE("dropout's draws are splitmix64's, as the PyTorch reference draws them (tests/torch/hash_dropout.py)") {
  // Values printed by hash_dropout.py: dropout_key(0, 3, 1, 0), dropout_key(11, 0, 0, 2), and the
  // mask of p = 0.5 at site 5 over sample 7's first 32 elements under the first key.
  CHECK(dropout_key(0, 3, 1, 0) == 0x37f3d44206abcaffull);
  CHECK(dropout_key(11, 0, 0, 2) == 0xb18a12fc35a9a756ull);
  const auto y = dropped(std::vector<float>(32, 1.f), 1, {0.5f, 5, 0x37f3d44206abcaffull, nullptr, 7});
  std::string kept;
  for (float v : y) kept += v != 0.f ? '1' : '0';
  CHECK(kept == "10011100110000110001011110110011");
}

TEST_CASE("attention's dropout drops the probabilities it multiplies v by, and backward takes the same mask") {
  ThreadPool pool(1);
  const AttentionShape s{2, 5, 8, 2};
  const auto qkv = random_vector(static_cast<size_t>(3 * s.B * s.T * s.C), 30);
  const int64_t att_n = s.B * s.H * s.T * s.T;
  std::vector<float> y0(static_cast<size_t>(s.B * s.T * s.C)), y1(y0.size()), att0(static_cast<size_t>(att_n)),
      att1(att0.size());
  cpu::attention_forward(pool, y0.data(), att0.data(), qkv.data(), s, {});
  const DropoutMask m{0.5f, 3, 77, nullptr, 2};
  cpu::attention_forward(pool, y1.data(), att1.data(), qkv.data(), s, m);
  CHECK(att1 == att0);  // att keeps the probabilities themselves (softmax's backward needs them)
  CHECK(y1 != y0);
  // y = (att ⊙ f)·v, f the mask's factors over each sample's [H, T, T] probabilities.
  std::vector<float> f(static_cast<size_t>(att_n));
  cpu::dropout_apply(pool, f.data(), att0.data(), s.B, s.H * s.T * s.T, m);
  const int64_t hs = s.hs(), C = s.C, T = s.T;
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.H; ++h)
      for (int64_t t = 0; t < T; ++t)
        for (int64_t d = 0; d < hs; ++d) {
          double want = 0;
          for (int64_t j = 0; j < T; ++j)
            want += double(f[static_cast<size_t>(((b * s.H + h) * T + t) * T + j)]) *
                    qkv[static_cast<size_t>((b * T + j) * 3 * C + 2 * C + h * hs + d)];
          CHECK(y1[static_cast<size_t>((b * T + t) * C + h * hs + d)] == doctest::Approx(want).epsilon(1e-5));
        }
}
