// Tensor files as a data set (data/tensor_files.hpp): .npy pairs and safetensors, uint8 and float32
// images of any size, int64/int32/uint8 labels, read exactly; the loader takes float32 samples as
// they are; every malformed file is an error naming it and what is wrong.
#include <doctest/doctest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "data/loader.hpp"
#include "data/memory_data.hpp"
#include "data/tensor_files.hpp"
#include "helpers.hpp"

namespace test_tensor_files {  // one namespace a file: unity builds compile several files as one

using namespace dp;
namespace fs = std::filesystem;

namespace {

std::string shape_tuple(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (int64_t d : shape) s += std::to_string(d) + ", ";
  return s + ")";
}

// NumPy's v1 format, as np.save writes it (header padded to a multiple of 64 with a newline).
void write_npy_header(const fs::path& path, std::string header, const void* data, size_t bytes) {
  while ((10 + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::ofstream f(path, std::ios::binary);
  f.write("\x93NUMPY\x01\x00", 8);
  const uint16_t len = static_cast<uint16_t>(header.size());
  f.put(static_cast<char>(len & 0xff)).put(static_cast<char>(len >> 8));
  f << header;
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(bytes));
}

void write_npy(const fs::path& path, const std::string& descr, const std::vector<int64_t>& shape, const void* data,
               size_t bytes, bool fortran = false) {
  write_npy_header(path, "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                             ", 'shape': " + shape_tuple(shape) + ", }",
                   data, bytes);
}

struct Tensor_ {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

void write_safetensors(const fs::path& path, const std::vector<Tensor_>& tensors) {
  std::string header = "{", data;
  for (const auto& t : tensors) {
    std::string shape;
    for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? "," : "") + std::to_string(t.shape[i]);
    header += (header.size() > 1 ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"" + t.dtype +
              "\",\"shape\":[" + shape + "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
              std::to_string(data.size() + t.bytes.size()) + "]}";
    data += t.bytes;
  }
  header += "}";
  std::ofstream f(path, std::ios::binary);
  const uint64_t len = header.size();
  f.write(reinterpret_cast<const char*>(&len), 8);
  f << header << data;
}

template <typename T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}


}  // namespace

TEST_CASE("tensor files: a .npy pair and a safetensors file read exactly, float32 and uint8, any size") {
  const int64_t n = 5, c = 3, h = 7, w = 9;
  const auto values = test::random_vector(static_cast<size_t>(n * c * h * w), 4);
  std::vector<uint8_t> pixels(values.size());
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 37 % 256);
  const std::vector<int64_t> labels{3, 999, 0, 7, 1};
  SUBCASE("npy, float32 images and int64 labels; no val files: an empty test set") {
    const test::TempDir tmp;
  const fs::path& dir = tmp.path;
    write_npy(dir / "train_images.npy", "<f4", {n, c, h, w}, values.data(), values.size() * 4);
    write_npy(dir / "train_labels.npy", "<i8", {n}, labels.data(), labels.size() * 8);
    const TrainTest t = load_data_dir(dir.string());
    CHECK(t.train.float_samples);
    CHECK(t.train.count == n);
    CHECK(t.train.channels == c);
    CHECK(t.train.rows == h);
    CHECK(t.train.cols == w);
    CHECK(t.train.values == values);
    CHECK(t.train.labels == std::vector<int32_t>{3, 999, 0, 7, 1});
    CHECK(t.test.count == 0);
    CHECK(t.description.find("5 training, 0 validation samples of 3x7x9, float32") != std::string::npos);
    // The loader hands the samples over as they are, in the order asked for.
    const std::vector<int64_t> order{4, 1};
    const Batch b = make_batch(t.train, order.data(), 2, nullptr, nullptr, BatchForm::Images);
    const int64_t px = c * h * w;
    CHECK(std::equal(b.images.begin(), b.images.begin() + px, values.begin() + 4 * px));
    CHECK(std::equal(b.images.begin() + px, b.images.end(), values.begin() + px));
    CHECK(b.labels == std::vector<int32_t>{1, 999});
  }
  SUBCASE("safetensors, uint8 images and int32 labels, with a validation file: ImageNet's statistics") {
    const test::TempDir tmp;
  const fs::path& dir = tmp.path;
    const std::vector<int32_t> small{3, 9, 0, 7, 1};
    write_safetensors(dir / "train.safetensors",
                      {{"labels", "I32", {n}, bytes_of(small)}, {"images", "U8", {n, c, h, w}, bytes_of(pixels)}});
    write_safetensors(dir / "val.safetensors", {{"images", "U8", {1, c, h, w}, std::string(c * h * w, '\x07')},
                                                {"labels", "U8", {1}, std::string(1, '\x02')}});
    const TrainTest t = load_data_dir(dir.string());
    CHECK_FALSE(t.train.float_samples);
    CHECK(t.train.images == pixels);
    CHECK(t.train.labels == small);
    CHECK(t.train.mean == std::vector<float>{0.485f, 0.456f, 0.406f});
    CHECK(t.test.count == 1);
    CHECK(t.test.labels == std::vector<int32_t>{2});
    CHECK(t.test.std == t.train.std);
  }
}

TEST_CASE("tensor files: what a file cannot hold is an error naming the file and what is wrong") {
  const test::TempDir tmp;
  const fs::path& dir = tmp.path;
  const std::vector<float> four(4 * 2 * 2, 0.5f);
  const std::vector<int64_t> labels{0, 1, 2, 3};
  const auto fails = [&](const char* says) {
    CHECK_THROWS_WITH_AS(load_data_dir(dir.string()), doctest::Contains(says), RuntimeError);
  };
  write_npy(dir / "train_images.npy", "<f4", {4, 2, 2}, four.data(), four.size() * 4);
  fails("train_images.npy has no train_labels.npy beside it");
  write_npy(dir / "train_labels.npy", "<i8", {3}, labels.data(), 3 * 8);
  fails("train_labels.npy: 3 labels for 4 images");
  const std::vector<int64_t> negative{0, -1, 2, 3};
  write_npy(dir / "train_labels.npy", "<i8", {4}, negative.data(), 4 * 8);
  fails("label -1 of sample 1 is not a class index");
  write_npy(dir / "train_labels.npy", "<f8", {4}, negative.data(), 4 * 8);
  fails("train_labels.npy: dtype '<f8'");
  write_npy(dir / "train_labels.npy", "<i8", {4}, labels.data(), 4 * 8);
  write_npy(dir / "train_images.npy", "<f4", {4, 2, 2}, four.data(), four.size() * 4 - 3);
  fails("train_images.npy: 61 bytes of data for shape [4, 2, 2] (is it truncated?)");
  write_npy(dir / "train_images.npy", "<f4", {4, 2, 2}, four.data(), four.size() * 4, true);
  fails("Fortran order");
  write_npy(dir / "train_images.npy", "<f4", {4, 1, 1, 2, 2}, four.data(), four.size() * 4);
  fails("images must be [N, C, H, W] or [N, H, W], not [4, 1, 1, 2, 2]");
  // A dimension past 2^63 is named (it was "error: stoll"); dimensions whose product wraps past 2^64
  // to nothing are refused, not read as an empty array.
  write_npy_header(dir / "train_images.npy",
                   "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999, 2, 2), }", four.data(),
                   four.size() * 4);
  fails("train_images.npy: the .npy header's shape (99999999999999999999, 2, 2) has a dimension past 2^63");
  write_npy(dir / "train_images.npy", "<f4", {4294967296, 4294967296, 4, 1}, four.data(), four.size() * 4);
  fails("bytes of data for shape [4294967296, 4294967296, 4, 1] (is it truncated?)");
  {
    std::ofstream f(dir / "train_images.npy");
    f << "not numpy";
  }
  fails("train_images.npy: not a .npy file");
  fs::remove_all(dir);
  fs::create_directories(dir);
  write_safetensors(dir / "train.safetensors",
                    {{"images", "F16", {1, 1, 1}, "ab"}, {"labels", "I64", {1}, std::string(8, '\0')}});
  fails("train.safetensors's images: dtype F16");
  write_safetensors(dir / "train.safetensors",
                    {{"pictures", "U8", {1, 1, 1}, "a"}, {"labels", "I64", {1}, std::string(8, '\0')}});
  fails("train.safetensors: no tensor named 'images'");
  write_safetensors(dir / "train.safetensors",
                    {{"images", "U8", {2, 1, 1}, "a"}, {"labels", "I64", {1}, std::string(8, '\0')}});
  fails("train.safetensors's images: 1 bytes for shape [2, 1, 1]");
  write_safetensors(dir / "train.safetensors", {{"images", "U8", {4294967296, 4294967296, 1, 1}, ""},
                                                {"labels", "I64", {1}, std::string(8, '\0')}});
  fails("train.safetensors's images: 0 bytes for shape [4294967296, 4294967296, 1, 1]");
  // The tensors must tile the data to the file's end, as safetensors' own reader requires: bytes after
  // the last tensor, or a hole between two, are refused (a second file could hide there).
  write_safetensors(dir / "train.safetensors", {{"images", "U8", {1, 1, 1}, "a"}, {"labels", "I64", {1}, std::string(8, '\0')}});
  {
    std::ofstream f(dir / "train.safetensors", std::ios::binary | std::ios::app);
    f << "tail";
  }
  fails("train.safetensors: not a valid safetensors file: 4 bytes after the last tensor's data");
}

TEST_CASE("tensors in memory: the samples read where they are give the batches a copy gives, kept alive by the data set") {
  std::vector<uint8_t> pixels(6 * 2 * 3 * 3);
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<uint8_t>(i * 7);
  std::vector<float> values(6 * 2 * 3 * 3);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25f * static_cast<float>(i);
  const std::vector<int64_t> labels{0, 1, 2, 0, 1, 2};
  const TensorView y{reinterpret_cast<const char*>(labels.data()), TensorKind::I64, {6}, "labels"};
  for (const bool floats : {false, true}) {
    const TensorView x{floats ? reinterpret_cast<const char*>(values.data()) : reinterpret_cast<const char*>(pixels.data()),
                       floats ? TensorKind::F32 : TensorKind::U8, {6, 2, 3, 3}, "images"};
    auto owner = std::make_shared<int>(1);
    std::weak_ptr<int> alive = owner;
    const Dataset copied = dataset_from_tensors(x, y, "copied");
    Dataset held = dataset_from_tensors(x, y, "held", std::move(owner));
    CHECK(held.images.empty());
    CHECK(held.values.empty());
    CHECK((floats ? static_cast<const void*>(held.value_data()) : static_cast<const void*>(held.pixel_data())) ==
          static_cast<const void*>(x.data));
    CHECK(held.mean == copied.mean);
    CHECK(held.float_samples == floats);
    BatchLoader a(copied, 4, true, 3, 2, 0), b(held, 4, true, 3, 2, 0);
    for (auto p = a.next(), q = b.next(); p || q; p = a.next(), q = b.next()) {
      REQUIRE((p && q));
      CHECK(p->images == q->images);
      CHECK(p->labels == q->labels);
    }
    {
      const Dataset another = held;  // a copy keeps the memory's owner too
      held = Dataset{};
      CHECK_FALSE(alive.expired());
    }
    CHECK(alive.expired());
  }
}

TEST_CASE("data in memory: --data memory:NAME finds what was put under NAME until it is dropped") {
  auto data = std::make_shared<MemoryData>();
  data->language = true;
  put_memory_data("t1", data);
  CHECK(is_memory_data("memory:t1"));
  CHECK_FALSE(is_memory_data("data/memory:t1"));
  CHECK(memory_data("memory:t1") == data);
  drop_memory_data("t1");
  CHECK_THROWS_WITH_AS(memory_data("memory:t1"), doctest::Contains("no data set was handed over in memory under the name 't1'"),
                       UsageError);
}

}  // namespace test_tensor_files
