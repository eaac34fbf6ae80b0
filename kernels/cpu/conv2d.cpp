// Conv2d as im2col + one GEMM per sample (Caffe's approach): out_n[K, OH·OW] = W[K, C·kh·kw] · col_n.
// Samples are split across the device's threads, each thread with its own column buffer (and,
// in backward, its own weight-gradient accumulator, summed at the end).
#include <cblas.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "kernels/ops/conv2d.hpp"
#include "core/thread_pool.hpp"

namespace dp::cpu {

namespace {

// Output columns [lo, hi) of a kernel tap read inside the input row (the rest is padding).
struct ValidRange {
  int64_t lo, hi;
};
ValidRange valid_columns(int64_t kj, const ConvShape& s) {
  const int64_t a = s.pw() - kj * s.dilation;            // ow·stride >= a
  const int64_t b = s.W - 1 + s.pw() - kj * s.dilation;  // ow·stride <= b
  if (b < 0) return {0, 0};
  const int64_t hi = std::min(s.OW(), b / s.stride + 1);
  const int64_t lo = a <= 0 ? 0 : (a + s.stride - 1) / s.stride;
  return {std::min(lo, hi), hi};
}

// col[(c,ki,kj), (oh,ow)] = in[c, oh*stride-ph+ki*dilation, ow*stride-pw+kj*dilation], zero
// outside the image (rows for every channel: group g's are its channels' rows, contiguous).
// The valid column range of each tap is computed once, so the inner loop is a plain
// (vectorisable) copy for stride 1.
void im2col(const float* in, float* col, const ConvShape& s) {
  const int64_t OH = s.OH(), OW = s.OW();
  std::vector<ValidRange> valid(static_cast<size_t>(s.kw));
  for (int64_t kj = 0; kj < s.kw; ++kj) valid[static_cast<size_t>(kj)] = valid_columns(kj, s);
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t ki = 0; ki < s.kh; ++ki)
      for (int64_t kj = 0; kj < s.kw; ++kj) {
        float* row = col + ((c * s.kh + ki) * s.kw + kj) * OH * OW;
        const float* plane = in + c * s.H * s.W;
        const ValidRange v = valid[static_cast<size_t>(kj)];
        for (int64_t oh = 0; oh < OH; ++oh) {
          const int64_t ih = oh * s.stride - s.ph() + ki * s.dilation;
          float* __restrict r = row + oh * OW;
          if (ih < 0 || ih >= s.H) {
            for (int64_t ow = 0; ow < OW; ++ow) r[ow] = 0.f;
            continue;
          }
          const float* __restrict src = plane + ih * s.W;
          const int64_t shift = kj * s.dilation - s.pw();  // iw = ow·stride + shift
          // Rows are short (OW is 14 for MNIST's second conv): plain loops, no library calls.
          for (int64_t ow = 0; ow < v.lo; ++ow) r[ow] = 0.f;
          if (s.stride == 1)
            for (int64_t ow = v.lo; ow < v.hi; ++ow) r[ow] = src[ow + shift];
          else
            for (int64_t ow = v.lo; ow < v.hi; ++ow) r[ow] = src[ow * s.stride + shift];
          for (int64_t ow = v.hi; ow < OW; ++ow) r[ow] = 0.f;
        }
      }
}

// The adjoint of im2col: every column entry added back to the input pixel it was read from.
void col2im(const float* col, float* in, const ConvShape& s) {
  const int64_t OH = s.OH(), OW = s.OW();
  std::vector<ValidRange> valid(static_cast<size_t>(s.kw));
  for (int64_t kj = 0; kj < s.kw; ++kj) valid[static_cast<size_t>(kj)] = valid_columns(kj, s);
  std::fill(in, in + s.C * s.H * s.W, 0.f);
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t ki = 0; ki < s.kh; ++ki)
      for (int64_t kj = 0; kj < s.kw; ++kj) {
        const float* row = col + ((c * s.kh + ki) * s.kw + kj) * OH * OW;
        float* plane = in + c * s.H * s.W;
        const ValidRange v = valid[static_cast<size_t>(kj)];
        for (int64_t oh = 0; oh < OH; ++oh) {
          const int64_t ih = oh * s.stride - s.ph() + ki * s.dilation;
          if (ih < 0 || ih >= s.H) continue;
          float* __restrict dst = plane + ih * s.W;
          const float* __restrict r = row + oh * OW;
          const int64_t shift = kj * s.dilation - s.pw();
          if (s.stride == 1)
            for (int64_t ow = v.lo; ow < v.hi; ++ow) dst[ow + shift] += r[ow];
          else
            for (int64_t ow = v.lo; ow < v.hi; ++ow) dst[ow * s.stride + shift] += r[ow];
        }
      }
}

// Stride 1 (every conv of the named models): pad the input once into a scratch plane, then every
// column row is a plain fixed-length copy with no bounds tests, and the adjoint a plain add.
int64_t padded_floats(const ConvShape& s) { return s.C * (s.H + 2 * s.ph()) * (s.W + 2 * s.pw()); }

void pad_input(const float* in, float* padded, const ConvShape& s) {
  const int64_t PH = s.H + 2 * s.ph(), PW = s.W + 2 * s.pw();
  for (int64_t c = 0; c < s.C; ++c) {
    float* plane = padded + c * PH * PW;
    std::fill(plane, plane + s.ph() * PW, 0.f);                     // top border
    std::fill(plane + (s.ph() + s.H) * PW, plane + PH * PW, 0.f);  // bottom border
    for (int64_t h = 0; h < s.H; ++h) {
      float* row = plane + (h + s.ph()) * PW;
      std::fill(row, row + s.pw(), 0.f);
      std::copy(in + (c * s.H + h) * s.W, in + (c * s.H + h + 1) * s.W, row + s.pw());
      std::fill(row + s.pw() + s.W, row + PW, 0.f);
    }
  }
}

void im2col_stride1(const float* in, float* col, float* padded, const ConvShape& s) {
  const int64_t PH = s.H + 2 * s.ph(), PW = s.W + 2 * s.pw(), OH = s.OH(), OW = s.OW();
  pad_input(in, padded, s);
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t ki = 0; ki < s.kh; ++ki)
      for (int64_t kj = 0; kj < s.kw; ++kj) {
        float* __restrict row = col + ((c * s.kh + ki) * s.kw + kj) * OH * OW;
        const float* __restrict src = padded + (c * PH + ki * s.dilation) * PW + kj * s.dilation;
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) row[oh * OW + ow] = src[oh * PW + ow];
      }
}

void col2im_stride1(const float* col, float* in, float* padded, const ConvShape& s) {
  const int64_t PH = s.H + 2 * s.ph(), PW = s.W + 2 * s.pw(), OH = s.OH(), OW = s.OW();
  std::fill(padded, padded + s.C * PH * PW, 0.f);
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t ki = 0; ki < s.kh; ++ki)
      for (int64_t kj = 0; kj < s.kw; ++kj) {
        const float* __restrict row = col + ((c * s.kh + ki) * s.kw + kj) * OH * OW;
        float* __restrict dst = padded + (c * PH + ki * s.dilation) * PW + kj * s.dilation;
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) dst[oh * PW + ow] += row[oh * OW + ow];
      }
  for (int64_t c = 0; c < s.C; ++c)
    for (int64_t h = 0; h < s.H; ++h) {
      const float* src = padded + (c * PH + h + s.ph()) * PW + s.pw();
      std::copy(src, src + s.W, in + (c * s.H + h) * s.W);
    }
}

// Columns of one sample, the fast path where it applies.
void to_columns(const float* in, float* col, float* padded, const ConvShape& s) {
  if (s.stride == 1) im2col_stride1(in, col, padded, s);
  else im2col(in, col, s);
}
void from_columns(const float* col, float* in, float* padded, const ConvShape& s) {
  if (s.stride == 1) col2im_stride1(col, in, padded, s);
  else col2im(col, in, s);
}

int parts_for(ThreadPool& pool, int64_t n) { return static_cast<int>(std::min<int64_t>(pool.size(), std::max<int64_t>(n, 1))); }

}  // namespace

int64_t conv2d_workspace_floats(const ConvShape& s, int threads, bool backward) {
  int64_t col = s.all_col_rows() * s.col_cols() + padded_floats(s);  // columns and the padded input
  int64_t dw = s.K * s.col_rows() + s.K;  // per-thread weight and bias gradient partials
  return threads * (col + (backward ? dw : 0));
}

void conv2d_forward(ThreadPool& pool, float* out, const float* in, const float* w, const float* b,
                    const ConvShape& s, float* workspace) {
  // rows: one group's column rows; each group's output channels are its weight rows times its rows.
  const int64_t rows = s.col_rows(), cols = s.col_cols(), Kg = s.K / s.groups;
  const int parts = parts_for(pool, s.N);
  pool.parallel_for(parts, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      float* col = workspace + p * (s.all_col_rows() * cols + padded_floats(s));
      float* padded = col + s.all_col_rows() * cols;
      for (int64_t n = s.N * p / parts; n < s.N * (p + 1) / parts; ++n) {
        float* o = out + n * s.K * cols;
        to_columns(in + n * s.C * s.H * s.W, col, padded, s);
        for (int64_t k = 0; k < s.K; ++k) std::fill(o + k * cols, o + (k + 1) * cols, b ? b[k] : 0.f);
        for (int64_t g = 0; g < s.groups; ++g)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(Kg), static_cast<int>(cols),
                      static_cast<int>(rows), 1.f, w + g * Kg * rows, static_cast<int>(rows), col + g * rows * cols,
                      static_cast<int>(cols), 1.f, o + g * Kg * cols, static_cast<int>(cols));
      }
    }
  });
}

void conv2d_backward(ThreadPool& pool, float* din, float* dw, float* db, const float* dout, const float* in,
                     const float* w, const ConvShape& s, float* workspace) {
  const int64_t rows = s.col_rows(), cols = s.col_cols(), Kg = s.K / s.groups;
  const int parts = parts_for(pool, s.N);
  const int64_t col_floats = s.all_col_rows() * cols + padded_floats(s), dw_floats = s.K * rows + s.K;
  float* partials = workspace + static_cast<int64_t>(pool.size()) * col_floats;
  pool.parallel_for(parts, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      float* col = workspace + p * col_floats;
      float* padded = col + s.all_col_rows() * cols;
      float* pdw = p == 0 ? dw : partials + p * dw_floats;  // part 0 writes straight to dw
      float* pdb = p == 0 ? db : partials + p * dw_floats + s.K * rows;
      std::fill(pdw, pdw + s.K * rows, 0.f);
      if (pdb) std::fill(pdb, pdb + s.K, 0.f);
      for (int64_t n = s.N * p / parts; n < s.N * (p + 1) / parts; ++n) {
        const float* dy = dout + n * s.K * cols;
        to_columns(in + n * s.C * s.H * s.W, col, padded, s);
        // dW_g += dY_n,g[Kg, cols] · col_g^T[cols, rows], group by group
        for (int64_t g = 0; g < s.groups; ++g)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(Kg), static_cast<int>(rows),
                      static_cast<int>(cols), 1.f, dy + g * Kg * cols, static_cast<int>(cols), col + g * rows * cols,
                      static_cast<int>(cols), 1.f, pdw + g * Kg * rows, static_cast<int>(rows));
        if (pdb)
          for (int64_t k = 0; k < s.K; ++k) {
            const float* __restrict row = dy + k * cols;
            float acc = 0.f;
#pragma omp simd reduction(+ : acc)
            for (int64_t j = 0; j < cols; ++j) acc += row[j];
            pdb[k] += acc;
          }
        if (din) {
          // dcol_g[rows, cols] = W_g^T[rows, Kg] · dY_n,g[Kg, cols], then scatter back to the input.
          for (int64_t g = 0; g < s.groups; ++g)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(cols),
                        static_cast<int>(Kg), 1.f, w + g * Kg * rows, static_cast<int>(rows), dy + g * Kg * cols,
                        static_cast<int>(cols), 0.f, col + g * rows * cols, static_cast<int>(cols));
          from_columns(col, din + n * s.C * s.H * s.W, padded, s);
        }
      }
    }
  });
  for (int p = 1; p < parts; ++p) {
    const float* pdw = partials + p * dw_floats;
    for (int64_t i = 0; i < s.K * rows; ++i) dw[i] += pdw[i];
    if (db)
      for (int64_t k = 0; k < s.K; ++k) db[k] += pdw[s.K * rows + k];
  }
}

}  // namespace dp::cpu
