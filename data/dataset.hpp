// Image classification data as stored: uint8 pixels [count, channels, rows, cols] (planes, as
// CIFAR-10 stores them) with the per-channel statistics the loader normalises with, or float32
// samples taken as they are; and a label per sample. Sources: MNIST-style IDX files (gzip or raw),
// CIFAR-10's binary files, tensor files (.npy, safetensors: data/tensor_files.hpp), and generated
// defaults.
#pragma once
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace dp {

// Samples made as each batch is (an image folder's, data/image_folder.hpp): decoded and transformed
// to the data set's size in the loader's threads, so memory does not grow with the data set.
class SampleDecoder {
 public:
  virtual ~SampleDecoder() = default;
  // Sample i as uint8 planes [channels, rows, cols]: the training transform drawn from `rng`, or
  // the evaluation transform when it is null. RuntimeError naming the file when it cannot be read.
  virtual void decode(int64_t i, std::mt19937_64* rng, uint8_t* out) const = 0;
};

struct Dataset {
  int64_t count = 0, channels = 1, rows = 0, cols = 0;
  std::vector<uint8_t> images;  // count * channels * rows * cols (uint8 sources)
  // A float32 source (a tensor file): the samples as given are the model's input exactly — not
  // normalised, not augmented, never sent to the devices as pixels.
  bool float_samples = false;
  std::vector<float> values;    // count * channels * rows * cols (float32 sources)
  std::shared_ptr<const SampleDecoder> decoder;  // set: images stays empty, samples are decoded
  // Samples held elsewhere, read where they are (the Python package's arrays, kept alive by `owner`
  // as long as a copy of this data set is): set, images and values stay empty.
  std::shared_ptr<const void> owner;
  const uint8_t* held_images = nullptr;
  const float* held_values = nullptr;
  const uint8_t* pixel_data() const { return held_images ? held_images : images.data(); }
  const float* value_data() const { return held_values ? held_values : values.data(); }
  std::vector<int32_t> labels;  // count, each >= 0
  int64_t classes = 0;          // the classes the source names (an image folder's), 0: not named
  // Normalisation per channel: (x/255 − mean) / std. MNIST's by default.
  std::vector<float> mean{0.1307f}, std{0.3081f};
  std::string source;  // the file(s) it came from, for messages
  int64_t sample_pixels() const { return channels * rows * cols; }
};

// Per-channel statistics of the known datasets (torchvision's usual values).
void use_mnist_statistics(Dataset& d);          // 0.1307, 0.3081
void use_fashion_mnist_statistics(Dataset& d);  // 0.2860, 0.3530
void use_cifar10_statistics(Dataset& d);        // (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
// A source that names none: ImageNet's (0.485, 0.456, 0.406), (0.229, 0.224, 0.225) for 3
// channels, MNIST's for 1, 0.5 and 0.5 otherwise.
void use_default_statistics(Dataset& d);

struct TrainTest {
  Dataset train, test;
  std::string description;
  std::vector<std::string> skipped;  // files a source left out, each "path: why" (--skip-bad-images)
};

// IDX pair (images 0x00000803, labels 0x00000801), gzip or raw; RuntimeError naming the file and
// the problem for bad magic, counts the file cannot hold, count mismatch, labels above 9.
Dataset read_idx_pair(const std::string& images_path, const std::string& labels_path);
// The four standard MNIST file names in dir (with or without .gz): MNIST, or Fashion-MNIST (same
// names and format) when the directory's path says "fashion", normalised with its own statistics.
TrainTest load_mnist_dir(const std::string& dir);

// CIFAR-10's binary version: data_batch_1.bin, data_batch_2.bin, ... (consecutive from 1, any
// number of records each) for training and test_batch.bin; each record is one label byte, then
// the R, G and B planes of 32x32. RuntimeError naming the file for a size that is not a multiple
// of 3073, a label above 9, or a missing file.
TrainTest load_cifar10_dir(const std::string& dir);

// --data DIR: the directory's content decides the format (tensor files, CIFAR-10 binary or IDX).
TrainTest load_data_dir(const std::string& dir);

// A deterministic, learnable stand-in for MNIST: 28x28 strokes of ten shape classes, jittered
// and noised, so `dp train` runs out of the box with no files.
TrainTest generate_dataset(int64_t train_count, int64_t test_count, uint64_t seed);
// A CIFAR-style stand-in (3x32x32, ten classes): coloured shapes on textured backgrounds.
TrainTest generate_cifar_like(int64_t train_count, int64_t test_count, uint64_t seed);

// Samples of any C x H x W for `classes` classes (labels below min(classes, 10)): the two above for
// their shapes, otherwise the CIFAR-style shapes drawn at that size. What a model file trains on
// without --data. drawn = false: that many samples of that shape and no bytes (a plan on meta
// devices reads no pixel: its batches come from a ShapeLoader).
TrainTest generate_images(const std::vector<int64_t>& sample, int64_t classes, int64_t train_count, int64_t test_count,
                          uint64_t seed, bool drawn = true);

// Write an IDX pair, gzip-compressed when the name ends in .gz (tests and tools use it).
void write_idx_pair(const Dataset& d, const std::string& images_path, const std::string& labels_path);

}  // namespace dp
