// MNIST's IDX format: big-endian magic (0x00000803 images, 0x00000801 labels), big-endian
// dimension sizes, then uint8 data. zlib's gz* functions read gzip and raw files alike.
#include <zlib.h>

#include <cctype>
#include <filesystem>
#include <memory>

#include "core/error.hpp"
#include "data/dataset.hpp"
#include "core/setting_name.hpp"

namespace dp {

namespace {

struct GzFile {
  gzFile f;
  std::string path;
  GzFile(const std::string& p, const char* mode) : f(gzopen(p.c_str(), mode)), path(p) {
    if (!f) throw RuntimeError("cannot open " + p);
  }
  ~GzFile() {
    if (f) gzclose(f);
  }
  // Reads up to n bytes; fewer only at the end of the file. A gzip error is a corrupt file.
  size_t read_some(void* dst, size_t n, const std::string& what) {
    size_t got = 0;
    while (got < n) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
      const int r = gzread(f, static_cast<char*>(dst) + got, chunk);
      if (r < 0) {
        int err;
        const char* msg = gzerror(f, &err);
        throw RuntimeError(path + ": corrupt file while reading " + what + " (" + msg + ")");
      }
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }
  void read(void* dst, size_t n, const std::string& what) {
    if (const size_t got = read_some(dst, n, what); got != n)
      throw RuntimeError(path + ": truncated: " + what + " needs " + std::to_string(n) + " bytes, the file holds " +
                         std::to_string(got));
  }
  // Reads n bytes in slices, so a header that claims far more than the file holds fails on the
  // short read instead of first allocating what it claims.
  std::vector<uint8_t> read_vector(size_t n, const std::string& what) {
    std::vector<uint8_t> out;
    constexpr size_t kSlice = size_t{1} << 24;
    while (out.size() < n) {
      const size_t begin = out.size(), len = std::min(kSlice, n - begin);
      out.resize(begin + len);
      if (const size_t got = read_some(out.data() + begin, len, what); got != len)
        throw RuntimeError(path + ": truncated: " + what + " need " + std::to_string(n) + " bytes, the file holds " +
                           std::to_string(begin + got));
    }
    return out;
  }
  // Nothing may follow the data the header announces: torchvision's reader refuses such a file too
  // (its view to the header's shape fails). With gzip, the bytes a further member holds count.
  void expect_end(const std::string& what) {
    char extra = 0;
    if (read_some(&extra, 1, "the end of the file") != 0)
      throw RuntimeError(path + ": bytes after the " + what + " its header announces (an IDX file ends with its data)");
  }
  uint32_t read_be32(const std::string& what) {
    unsigned char b[4];
    read(b, 4, what);
    return uint32_t{b[0]} << 24 | uint32_t{b[1]} << 16 | uint32_t{b[2]} << 8 | b[3];
  }
};

constexpr uint32_t kImagesMagic = 0x00000803, kLabelsMagic = 0x00000801;
constexpr int64_t kMaxPixels = int64_t{1} << 34;  // 16 GiB of pixels: anything larger is corrupt

std::string hex(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

}  // namespace

Dataset read_idx_pair(const std::string& images_path, const std::string& labels_path) {
  Dataset d;
  d.source = images_path;
  {
    GzFile f(images_path, "rb");
    uint32_t magic = f.read_be32("the magic number");
    if (magic != kImagesMagic)
      throw RuntimeError(images_path + ": bad magic " + hex(magic) + " (an IDX image file starts with 0x00000803)");
    d.count = f.read_be32("the image count");
    d.rows = f.read_be32("the row count");
    d.cols = f.read_be32("the column count");
    if (d.rows == 0 || d.cols == 0 || d.rows > 4096 || d.cols > 4096)
      throw RuntimeError(images_path + ": implausible image size " + std::to_string(d.rows) + "x" + std::to_string(d.cols));
    if (d.count * d.rows * d.cols > kMaxPixels)
      throw RuntimeError(images_path + ": header claims " + std::to_string(d.count) + " images, more than any file holds");
    d.images = f.read_vector(static_cast<size_t>(d.count * d.rows * d.cols), std::to_string(d.count) + " images");
    f.expect_end(std::to_string(d.count) + " images");
  }
  {
    GzFile f(labels_path, "rb");
    uint32_t magic = f.read_be32("the magic number");
    if (magic != kLabelsMagic)
      throw RuntimeError(labels_path + ": bad magic " + hex(magic) + " (an IDX label file starts with 0x00000801)");
    int64_t n = f.read_be32("the label count");
    if (n != d.count)
      throw RuntimeError(labels_path + ": " + std::to_string(n) + " labels for " + std::to_string(d.count) +
                         " images in " + images_path);
    const std::vector<uint8_t> bytes = f.read_vector(static_cast<size_t>(n), std::to_string(n) + " labels");
    f.expect_end(std::to_string(n) + " labels");
    d.labels.assign(bytes.begin(), bytes.end());
  }
  for (size_t i = 0; i < d.labels.size(); ++i)
    if (d.labels[i] > 9)
      throw RuntimeError(labels_path + ": label " + std::to_string(d.labels[i]) + " of sample " + std::to_string(i) +
                         " is not a digit 0..9");
  return d;
}

TrainTest load_mnist_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(dir)) throw RuntimeError(setting("data") + " " + dir + ": not a directory");
  auto find = [&](const std::string& base) {
    for (const std::string& name : {base + ".gz", base})
      if (fs::exists(fs::path(dir) / name)) return (fs::path(dir) / name).string();
    throw RuntimeError(setting("data") + " " + dir + ": missing " + base + "(.gz)");
  };
  TrainTest tt;
  tt.train = read_idx_pair(find("train-images-idx3-ubyte"), find("train-labels-idx1-ubyte"));
  tt.test = read_idx_pair(find("t10k-images-idx3-ubyte"), find("t10k-labels-idx1-ubyte"));
  if (tt.train.rows != tt.test.rows || tt.train.cols != tt.test.cols)
    throw RuntimeError(setting("data") + " " + dir + ": train and test images differ in size");
  std::string lower = dir;
  for (auto& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower.find("fashion") != std::string::npos) {
    use_fashion_mnist_statistics(tt.train);
    use_fashion_mnist_statistics(tt.test);
    tt.description = "Fashion-MNIST from " + dir;
  } else {
    tt.description = "MNIST from " + dir;
  }
  return tt;
}

void write_idx_pair(const Dataset& d, const std::string& images_path, const std::string& labels_path) {
  auto be32 = [](uint32_t v) {
    std::string s(4, '\0');
    for (int i = 0; i < 4; ++i) s[static_cast<size_t>(i)] = static_cast<char>(v >> (24 - 8 * i));
    return s;
  };
  auto put = [](const std::string& path, const std::string& head, const std::vector<uint8_t>& body) {
    const bool gz = path.size() > 3 && path.substr(path.size() - 3) == ".gz";
    GzFile f(path, gz ? "wb" : "wbT");
    if (gzwrite(f.f, head.data(), static_cast<unsigned>(head.size())) != static_cast<int>(head.size()) ||
        (!body.empty() && gzwrite(f.f, body.data(), static_cast<unsigned>(body.size())) != static_cast<int>(body.size())))
      throw RuntimeError("cannot write " + path);
  };
  put(images_path,
      be32(kImagesMagic) + be32(static_cast<uint32_t>(d.count)) + be32(static_cast<uint32_t>(d.rows)) +
          be32(static_cast<uint32_t>(d.cols)),
      d.images);
  put(labels_path, be32(kLabelsMagic) + be32(static_cast<uint32_t>(d.count)),
      std::vector<uint8_t>(d.labels.begin(), d.labels.end()));
}

}  // namespace dp
