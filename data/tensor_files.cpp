#include "data/tensor_files.hpp"

#include <charconv>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.hpp"
#include "core/bounded_json.hpp"
#include "io/read_file.hpp"
#include "io/safetensors_tiling.hpp"

namespace dp {

namespace {

namespace fs = std::filesystem;

using Kind = TensorKind;

size_t kind_size(Kind k) { return k == Kind::U8 ? 1 : k == Kind::I64 ? 8 : 4; }

using Found = TensorView;  // one tensor found in a file

int64_t count_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The bytes a shape of this kind holds, or -1 where that passes `limit` (the file's size): a header
// may claim dimensions whose product overflows 64 bits, which must not wrap to a small size.
int64_t bytes_within(const std::vector<int64_t>& shape, size_t element, size_t limit) {
  uint64_t n = element;
  for (int64_t d : shape)
    if (d < 0 || __builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) || n > limit) return -1;
  return static_cast<int64_t>(n);
}

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// The samples and labels of one split, checked against each other.
// `owner` set: the samples are read where they are, kept alive by it; else copied.
Dataset make_dataset(const Found& images, const Found& labels, const std::string& source,
                     std::shared_ptr<const void> owner = nullptr) {
  if (images.kind != Kind::U8 && images.kind != Kind::F32)
    throw RuntimeError(images.where + ": images must be uint8 or float32");
  if (images.shape.size() != 3 && images.shape.size() != 4)
    throw RuntimeError(images.where + ": images must be [N, C, H, W] or [N, H, W], not " + shape_text(images.shape));
  if (labels.shape.size() != 1)
    throw RuntimeError(labels.where + ": labels must be [N], not " + shape_text(labels.shape));
  if (labels.kind == Kind::F32) throw RuntimeError(labels.where + ": labels must be integers (int64, int32 or uint8)");
  Dataset d;
  d.source = source;
  d.count = images.shape[0];
  const bool planes = images.shape.size() == 4;
  d.channels = planes ? images.shape[1] : 1;
  d.rows = images.shape[planes ? 2 : 1];
  d.cols = images.shape[planes ? 3 : 2];
  if (d.channels < 1 || d.rows < 1 || d.cols < 1)
    throw RuntimeError(images.where + ": every sample dimension must be at least 1, not " + shape_text(images.shape));
  if (labels.shape[0] != d.count)
    throw RuntimeError(labels.where + ": " + std::to_string(labels.shape[0]) + " labels for " +
                       std::to_string(d.count) + " images");
  const size_t n = static_cast<size_t>(count_of(images.shape));
  d.float_samples = images.kind == Kind::F32;
  if (!d.float_samples) use_default_statistics(d);
  if (owner) {  // read where they are
    d.owner = std::move(owner);
    if (d.float_samples) d.held_values = reinterpret_cast<const float*>(images.data);
    else d.held_images = reinterpret_cast<const uint8_t*>(images.data);
  } else if (!d.float_samples) {
    d.images.assign(reinterpret_cast<const uint8_t*>(images.data), reinterpret_cast<const uint8_t*>(images.data) + n);
  } else {
    d.values.resize(n);
    std::memcpy(d.values.data(), images.data, n * sizeof(float));
  }
  d.labels.resize(static_cast<size_t>(d.count));
  for (int64_t i = 0; i < d.count; ++i) {
    int64_t v = 0;
    const char* at = labels.data + static_cast<size_t>(i) * kind_size(labels.kind);
    if (labels.kind == Kind::U8) v = static_cast<uint8_t>(*at);
    if (labels.kind == Kind::I32) {
      int32_t x;
      std::memcpy(&x, at, 4);
      v = x;
    }
    if (labels.kind == Kind::I64) std::memcpy(&v, at, 8);
    if (v < 0 || v > std::numeric_limits<int32_t>::max())
      throw RuntimeError(labels.where + ": label " + std::to_string(v) + " of sample " + std::to_string(i) +
                         " is not a class index (>= 0)");
    d.labels[static_cast<size_t>(i)] = static_cast<int32_t>(v);
  }
  return d;
}

// --- safetensors ---

Kind safetensors_kind(const std::string& dtype, const std::string& where) {
  if (dtype == "U8") return Kind::U8;
  if (dtype == "I32") return Kind::I32;
  if (dtype == "I64") return Kind::I64;
  if (dtype == "F32") return Kind::F32;
  throw RuntimeError(where + ": dtype " + dtype + " (a tensor file holds U8 or F32 images and I64, I32 or U8 labels)");
}

Found safetensors_tensor(const std::string& bytes, const nlohmann::json& header, size_t data_start,
                         const std::string& path, const char* name) {
  const std::string where = path + "'s " + name;
  if (!header.contains(name)) throw RuntimeError(path + ": no tensor named '" + std::string(name) + "'");
  const auto& t = header.at(name);
  Found f;
  f.where = where;
  try {
    f.kind = safetensors_kind(t.at("dtype").get<std::string>(), where);
    f.shape = t.at("shape").get<std::vector<int64_t>>();
    const auto offsets = t.at("data_offsets").get<std::vector<uint64_t>>();
    if (offsets.size() != 2 || offsets[0] > offsets[1] || data_start + offsets[1] > bytes.size())
      throw RuntimeError(where + ": its bytes lie outside the file (is it truncated?)");
    for (int64_t d : f.shape)
      if (d < 0) throw RuntimeError(where + ": a negative dimension in " + shape_text(f.shape));
    if (static_cast<int64_t>(offsets[1] - offsets[0]) != bytes_within(f.shape, kind_size(f.kind), bytes.size()))
      throw RuntimeError(where + ": " + std::to_string(offsets[1] - offsets[0]) + " bytes for shape " +
                         shape_text(f.shape));
    f.data = bytes.data() + data_start + offsets[0];
  } catch (const nlohmann::json::exception& e) {
    throw RuntimeError(where + ": a malformed header entry (" + e.what() + ")");
  }
  return f;
}

// --- .npy ---

// NumPy's format: magic, version, a little-endian header length, a Python dict literal
// {'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }, then the data in C order.
Found npy_tensor(const std::string& bytes, const std::string& path) {
  static const char magic[] = "\x93NUMPY";
  if (bytes.size() < 10 || std::memcmp(bytes.data(), magic, 6) != 0)
    throw RuntimeError(path + ": not a .npy file (no \\x93NUMPY magic)");
  const int major = static_cast<uint8_t>(bytes[6]);
  size_t header_len = 0, start = 0;
  if (major == 1) {
    header_len = static_cast<uint8_t>(bytes[8]) | static_cast<size_t>(static_cast<uint8_t>(bytes[9])) << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) throw RuntimeError(path + ": a truncated .npy header");
    for (int i = 0; i < 4; ++i) header_len |= static_cast<size_t>(static_cast<uint8_t>(bytes[8 + i])) << (8 * i);
    start = 12;
  } else {
    throw RuntimeError(path + ": .npy version " + std::to_string(major) + " (1 to 3 are read)");
  }
  if (start + header_len > bytes.size()) throw RuntimeError(path + ": a truncated .npy header");
  const std::string header = bytes.substr(start, header_len);
  std::smatch m;
  Found f;
  f.where = path;
  if (!std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')")))
    throw RuntimeError(path + ": no 'descr' in the .npy header");
  const std::string descr = m[1];
  if (descr == "|u1" || descr == "<u1")
    f.kind = Kind::U8;
  else if (descr == "<i4")
    f.kind = Kind::I32;
  else if (descr == "<i8")
    f.kind = Kind::I64;
  else if (descr == "<f4")
    f.kind = Kind::F32;
  else
    throw RuntimeError(
        path + ": dtype '" + descr +
        "' (a tensor file holds uint8 or little-endian float32 images and int64, int32 or uint8 labels)");
  if (std::regex_search(header, m, std::regex(R"('fortran_order'\s*:\s*True)")))
    throw RuntimeError(path + ": Fortran order (save a C-contiguous array: np.ascontiguousarray)");
  if (!std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")))
    throw RuntimeError(path + ": no 'shape' in the .npy header");
  const std::string dims = m[1];
  static const std::regex number(R"(\d+)");
  for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it) {
    const std::string text = it->str();
    int64_t d = 0;
    const auto [at, error] = std::from_chars(text.data(), text.data() + text.size(), d);
    if (error != std::errc() || at != text.data() + text.size())
      throw RuntimeError(path + ": the .npy header's shape (" + dims.substr(0, 80) + ") has a dimension past 2^63");
    f.shape.push_back(d);
  }
  const int64_t claimed = bytes_within(f.shape, kind_size(f.kind), bytes.size());
  const size_t data_bytes = claimed < 0 ? bytes.size() + 1 : static_cast<size_t>(claimed);
  if (start + header_len + data_bytes > bytes.size())
    throw RuntimeError(path + ": " + std::to_string(bytes.size() - start - header_len) + " bytes of data for shape " +
                       shape_text(f.shape) + " (is it truncated?)");
  f.data = bytes.data() + start + header_len;
  return f;
}

}  // namespace

Dataset read_safetensors_samples(const std::string& path) {
  const std::string bytes = read_file(path);
  if (bytes.size() < 8) throw RuntimeError(path + ": not a safetensors file (shorter than its header length)");
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > bytes.size() - 8)
    throw RuntimeError(path + ": not a safetensors file (its header runs past the end)");
  nlohmann::json header;
  try {
    header = parse_bounded_json(bytes.begin() + 8, bytes.begin() + 8 + static_cast<std::ptrdiff_t>(header_len));
  } catch (const std::exception& e) {
    throw RuntimeError(path + ": not a safetensors file (its header is not JSON: " + e.what() + ")");
  }
  const size_t data_start = 8 + static_cast<size_t>(header_len);
  check_safetensors_tiling(header, bytes.size() - data_start, path);
  return make_dataset(safetensors_tensor(bytes, header, data_start, path, "images"),
                      safetensors_tensor(bytes, header, data_start, path, "labels"), path);
}

Dataset read_npy_pair(const std::string& images_path, const std::string& labels_path) {
  const std::string images = read_file(images_path), labels = read_file(labels_path);
  return make_dataset(npy_tensor(images, images_path), npy_tensor(labels, labels_path),
                      images_path + " and " + labels_path);
}

bool holds_tensor_files(const std::string& dir) {
  return fs::exists(fs::path(dir) / "train.safetensors") || fs::exists(fs::path(dir) / "train_images.npy");
}

TrainTest load_tensor_dir(const std::string& dir) {
  const fs::path root(dir);
  TrainTest t;
  if (fs::exists(root / "train.safetensors")) {
    t.train = read_safetensors_samples((root / "train.safetensors").string());
    if (fs::exists(root / "val.safetensors")) t.test = read_safetensors_samples((root / "val.safetensors").string());
  } else {
    const auto pair = [&](const std::string& split) {
      const fs::path images = root / (split + "_images.npy"), labels = root / (split + "_labels.npy");
      if (!fs::exists(labels))
        throw RuntimeError(images.string() + " has no " + labels.filename().string() + " beside it");
      return read_npy_pair(images.string(), labels.string());
    };
    t.train = pair("train");
    if (fs::exists(root / "val_images.npy")) t.test = pair("val");
  }
  return train_and_validation(std::move(t.train), std::move(t.test), "tensor files in " + dir,
                              dir + " (no " + (fs::exists(root / "train.safetensors") ? "val.safetensors" : "val_images.npy") +
                                  ")");
}

Dataset dataset_from_tensors(const TensorView& images, const TensorView& labels, const std::string& source,
                             std::shared_ptr<const void> owner) {
  return make_dataset(images, labels, source, std::move(owner));
}

TrainTest train_and_validation(Dataset train, Dataset validation, const std::string& what,
                               const std::string& no_validation) {
  TrainTest t;
  t.train = std::move(train);
  t.test = std::move(validation);
  const Dataset& a = t.train;
  Dataset& b = t.test;
  if (b.count > 0 &&
      (b.channels != a.channels || b.rows != a.rows || b.cols != a.cols || b.float_samples != a.float_samples))
    throw RuntimeError(b.source + ": validation samples differ from the training samples (" + a.source +
                       ") in shape or dtype");
  if (b.count == 0) {
    b.channels = a.channels, b.rows = a.rows, b.cols = a.cols, b.float_samples = a.float_samples;
    b.source = no_validation;
  }
  b.mean = a.mean, b.std = a.std;
  t.description = what + " (" + std::to_string(a.count) + " training, " + std::to_string(b.count) +
                  " validation samples of " + std::to_string(a.channels) + "x" + std::to_string(a.rows) + "x" +
                  std::to_string(a.cols) + ", " + (a.float_samples ? "float32" : "uint8") + ")";
  return t;
}

}  // namespace dp
