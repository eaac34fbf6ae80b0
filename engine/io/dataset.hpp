// Image classification data as stored: uint8 pixels [count, rows, cols] and uint8 labels.
// Sources: MNIST IDX files (gzip or raw) and the generated default dataset.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dp {

struct Dataset {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<uint8_t> images;  // count * rows * cols
  std::vector<uint8_t> labels;  // count
  int64_t sample_pixels() const { return rows * cols; }
};

struct TrainTest {
  Dataset train, test;
  std::string description;
};

// IDX pair (images 0x00000803, labels 0x00000801), gzip or raw; RuntimeError naming the file and
// the problem for bad magic, counts the file cannot hold, count mismatch, labels above 9.
Dataset read_idx_pair(const std::string& images_path, const std::string& labels_path);
// The four standard MNIST file names in dir (with or without .gz).
TrainTest load_mnist_dir(const std::string& dir);

// A deterministic, learnable stand-in for MNIST: 28x28 strokes of ten shape classes, jittered
// and noised, so `dp train` runs out of the box with no files.
TrainTest generate_dataset(int64_t train_count, int64_t test_count, uint64_t seed);

// Write an IDX pair, gzip-compressed when the name ends in .gz (tests and tools use it).
void write_idx_pair(const Dataset& d, const std::string& images_path, const std::string& labels_path);

}  // namespace dp
