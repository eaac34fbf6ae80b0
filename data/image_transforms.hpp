// torchvision's image transforms on decoded pixels, with the random draws from dp's per-sample
// stream (so a resumed run and any device count see the same pixels):
//   training:   RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip(0.5)
//   evaluation: Resize(short side) + CenterCrop(size)
// Resizing is bilinear with antialiasing, computed in float32 and rounded, as torchvision's
// F.resize(antialias=True) on a uint8 tensor: the same weights (a triangle widened by the
// downscale factor), so the pixels agree within one level for the same boxes.
#pragma once
#include <cstdint>
#include <random>

#include "data/image_decode.hpp"

namespace dp {

struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
};

// RandomResizedCrop's parameters (torchvision's get_params: ten tries of an area in `scale` and a
// log-uniform aspect ratio in `ratio`, then the central crop clamped to the ratio).
struct RandomCrop {
  double scale_low = 0.08, scale_high = 1.0;
  double ratio_low = 3.0 / 4.0, ratio_high = 4.0 / 3.0;
};
CropBox random_resized_crop_box(int64_t rows, int64_t cols, const RandomCrop& crop, std::mt19937_64& rng);
// Resize's output for a short side of `short_side` (the long side scaled and truncated, as torchvision).
void resized_size(int64_t rows, int64_t cols, int64_t short_side, int64_t& out_rows, int64_t& out_cols);
// CenterCrop's box (torchvision rounds the offsets; a crop larger than the image reaches outside it:
// zeros there).
CropBox center_crop_box(int64_t rows, int64_t cols, int64_t out_rows, int64_t out_cols);

// The box of `img` (inside it) resized to out_rows x out_cols, mirrored left-right when `flip`,
// written as uint8 planes [channels, out_rows, out_cols].
void resize_box(const DecodedImage& img, const CropBox& box, int64_t out_rows, int64_t out_cols, bool flip,
                uint8_t* out);

// The most bytes decoding a rows x cols image and either pipeline to an output size_cols wide hold:
// its RGB pixels and the resize's scratch (the image's rows times the output's columns in floats).
int64_t transform_working_set(int64_t rows, int64_t cols, int64_t channels, int64_t size_cols, int64_t short_side);
// The transforms keep their scratch per thread, image after image; after a large one, give it back.
void release_transform_scratch();

// The two pipelines, into planes [channels, size_rows, size_cols].
void train_transform(const DecodedImage& img, int64_t size_rows, int64_t size_cols, const RandomCrop& crop,
                     std::mt19937_64& rng, uint8_t* out);
void eval_transform(const DecodedImage& img, int64_t short_side, int64_t size_rows, int64_t size_cols, uint8_t* out);

}  // namespace dp
