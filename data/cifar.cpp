// CIFAR-10's binary version: records of one label byte and 3072 pixel bytes (R, G, B planes of
// 32x32), read as stored (the planes are already the CHW layout the models take).
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "data/dataset.hpp"
#include "core/setting_name.hpp"
#include "data/tensor_files.hpp"

namespace dp {

namespace {

constexpr int64_t kSide = 32, kPixels = 3 * kSide * kSide, kRecord = kPixels + 1;

void append_file(Dataset& d, const std::string& path) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) throw RuntimeError(path + ": cannot open: " + std::strerror(errno));
  const auto size = static_cast<int64_t>(f.tellg());
  if (size == 0 || size % kRecord != 0)
    throw RuntimeError(path + ": " + std::to_string(size) + " bytes is not a whole number of CIFAR-10 records (" +
                       std::to_string(kRecord) + " bytes each: a label byte and 3x32x32 pixels)");
  const int64_t n = size / kRecord;
  std::string raw(static_cast<size_t>(size), '\0');
  f.seekg(0);
  if (!f.read(raw.data(), size)) throw RuntimeError(path + ": read failed");
  const size_t old = static_cast<size_t>(d.count);
  d.labels.resize(old + static_cast<size_t>(n));
  d.images.resize((old + static_cast<size_t>(n)) * kPixels);
  for (int64_t i = 0; i < n; ++i) {
    const auto* rec = reinterpret_cast<const uint8_t*>(raw.data()) + i * kRecord;
    if (rec[0] > 9)
      throw RuntimeError(path + ": record " + std::to_string(i) + " has label " + std::to_string(rec[0]) +
                         " (CIFAR-10 labels are 0..9)");
    d.labels[old + static_cast<size_t>(i)] = rec[0];
    std::memcpy(d.images.data() + (old + static_cast<size_t>(i)) * kPixels, rec + 1, kPixels);
  }
  d.count += n;
  d.source += (d.source.empty() ? "" : ", ") + path;
}

Dataset empty_cifar() {
  Dataset d;
  d.channels = 3;
  d.rows = d.cols = kSide;
  use_cifar10_statistics(d);
  return d;
}

}  // namespace

TrainTest load_cifar10_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw RuntimeError(setting("data") + " " + dir + ": not a directory");
  if (holds_tensor_files(dir)) return load_tensor_dir(dir);
  TrainTest tt{empty_cifar(), empty_cifar(), ""};
  int files = 0;
  for (int k = 1; fs::exists(fs::path(dir) / ("data_batch_" + std::to_string(k) + ".bin")); ++k, ++files)
    append_file(tt.train, (fs::path(dir) / ("data_batch_" + std::to_string(k) + ".bin")).string());
  if (files == 0) throw RuntimeError(setting("data") + " " + dir +
                                     ": missing data_batch_1.bin (CIFAR-10 training records)");
  const fs::path test = fs::path(dir) / "test_batch.bin";
  if (!fs::exists(test)) throw RuntimeError(setting("data") + " " + dir +
                                            ": missing test_batch.bin (CIFAR-10 test records)");
  append_file(tt.test, test.string());
  tt.description = "CIFAR-10 from " + dir + " (" + std::to_string(files) + " training file" + (files > 1 ? "s" : "") +
                   ")";
  return tt;
}

TrainTest load_data_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw RuntimeError(setting("data") + " " + dir + ": not a directory");
  if (holds_tensor_files(dir)) return load_tensor_dir(dir);
  for (const char* name : {"data_batch_1.bin", "test_batch.bin"})
    if (fs::exists(fs::path(dir) / name)) return load_cifar10_dir(dir);
  return load_mnist_dir(dir);
}

void use_mnist_statistics(Dataset& d) { d.mean = {0.1307f}, d.std = {0.3081f}; }
void use_fashion_mnist_statistics(Dataset& d) { d.mean = {0.2860f}, d.std = {0.3530f}; }
void use_default_statistics(Dataset& d) {
  if (d.channels == 3) d.mean = {0.485f, 0.456f, 0.406f}, d.std = {0.229f, 0.224f, 0.225f};
  else if (d.channels == 1) use_mnist_statistics(d);
  else d.mean.assign(static_cast<size_t>(d.channels), 0.5f), d.std = d.mean;
}

void use_cifar10_statistics(Dataset& d) {
  d.mean = {0.4914f, 0.4822f, 0.4465f};
  d.std = {0.2470f, 0.2435f, 0.2616f};
}

}  // namespace dp
