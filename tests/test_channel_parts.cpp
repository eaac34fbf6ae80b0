// The index arithmetic of the CUDA per-channel sums (kernels/channel_parts.hpp), checked on the
// host: every value of every channel is read exactly once, by the part that owns it, at its place
// in the [N, C, HW] tensor — the same walk the kernel takes, block by block and thread by thread.
// And LayerNorm's and Linear's bias gradient's parts of the rows (kernels/layernorm_parts.hpp,
// kernels/column_parts.hpp): each row in one part.
#include <doctest/doctest.h>

#include <algorithm>
#include <tuple>
#include <vector>

#include "kernels/channel_parts.hpp"
#include "kernels/column_parts.hpp"
#include "kernels/layernorm_parts.hpp"
#include "kernels/row_parts.hpp"

namespace test_channel_parts {  // one namespace a file: unity builds compile several files as one

using namespace dp;

namespace {
constexpr int64_t kThreads = 256;  // the kernel's block (kernels/cuda/launch.cuh)
}

TEST_CASE("the per-channel sums' parts and walks read every value of a channel once, where it is") {
  // One part; several (a part ending inside a plane); planes smaller than a block, of one value,
  // of exactly a block and one more; one sample; the most parts.
  for (auto [N, C, HW] : {std::tuple<int64_t, int64_t, int64_t>{6, 5, 49}, {64, 3, 1000}, {3000, 2, 3}, {1, 2, 70001},
                          {5, 2, 1}, {40, 1, 256}, {33, 2, 257}, {1, 1, 1}, {1024, 1, 8200}}) {
    CAPTURE(N);
    CAPTURE(C);
    CAPTURE(HW);
    const int64_t M = N * HW, S = channel_parts::parts_for(N, HW);
    CHECK(S >= 1);
    CHECK(S <= channel_parts::kMaxParts);
    CHECK((S == channel_parts::kMaxParts || M <= S * channel_parts::kValuesPerPart));
    std::vector<int> reads(static_cast<size_t>(N * C * HW), 0);
    bool placed = true;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t s = 0; s < S; ++s) {
        const int64_t end = channel_parts::part_begin(M, s + 1, S);
        for (int64_t t = 0; t < kThreads; ++t)
          for (channel_parts::Walk w(channel_parts::part_begin(M, s, S) + t, kThreads, HW); w.i < end; w.advance()) {
            const int64_t j = w.offset(C, c);
            placed = placed && w.hw < HW && j == (w.i / HW * C + c) * HW + w.i % HW;
            ++reads[static_cast<size_t>(j)];
          }
      }
    CHECK(placed);
    CHECK(std::all_of(reads.begin(), reads.end(), [](int r) { return r == 1; }));
  }
  CHECK(channel_parts::parts_for(0, 7) == 1);  // no values: one part, which reads nothing
  CHECK(channel_parts::parts_for(4096, 4096) == channel_parts::kMaxParts);
}

namespace {
// P parts of `rows` (row_parts.hpp) within their limits, each row in exactly one, in order, each
// part near its share.
void check_row_parts(int64_t rows, int64_t P, int64_t rows_per_part, int64_t max_parts) {
  CAPTURE(rows);
  CHECK(P >= 1);
  CHECK(P <= max_parts);
  CHECK((P == max_parts || rows <= P * rows_per_part));
  CHECK(row_parts::part_begin(rows, 0, P) == 0);
  CHECK(row_parts::part_begin(rows, P, P) == rows);
  int64_t covered = 0;
  for (int64_t p = 0; p < P; ++p) {
    const int64_t begin = row_parts::part_begin(rows, p, P), end = row_parts::part_begin(rows, p + 1, P);
    CHECK(begin == covered);
    CHECK(end - begin >= rows / P);
    CHECK(end - begin <= rows / P + 1);
    covered = end;
  }
  CHECK(covered == rows);
}
}  // namespace

TEST_CASE("LayerNorm's parts of the rows cover every row once, in order, each part near its share") {
  for (int64_t rows : {int64_t{1}, int64_t{63}, int64_t{64}, int64_t{65}, int64_t{8192}, int64_t{16383}, int64_t{1} << 20}) {
    const int64_t P = layernorm_parts::parts_for(rows);
    check_row_parts(rows, P, layernorm_parts::kRowsPerPart, layernorm_parts::kMaxParts);
    CHECK(layernorm_parts::scratch_bytes(rows, 768) == static_cast<size_t>(2 * P * 768 * 8));
  }
}

TEST_CASE("Linear's bias gradient: parts of the rows cover every row once, in order, one part and no scratch for few rows") {
  for (int64_t rows : {int64_t{0}, int64_t{1}, int64_t{1024}, int64_t{1025}, int64_t{8192}, int64_t{33000}, int64_t{1} << 20}) {
    const int64_t P = column_parts::parts_for(rows);
    check_row_parts(rows, P, column_parts::kRowsPerPart, column_parts::kMaxParts);
    CHECK(column_parts::scratch_bytes(rows, 768) == (P > 1 ? static_cast<size_t>(P * 768 * 8) : size_t{0}));
  }
  CHECK(column_parts::parts_for(1024) == 1);  // a classifier's batch: the one-part kernel, as before
  CHECK(column_parts::parts_for(8192) == 8);  // GPT-2 small's step at batch 8 (8192 rows): 8 parts x 24 column blocks
}

}  // namespace test_channel_parts
