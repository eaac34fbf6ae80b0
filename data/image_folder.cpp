#include "data/image_folder.hpp"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "data/decode_budget.hpp"
#include "data/image_decode.hpp"
#include "io/read_file.hpp"

namespace dp {

namespace {

namespace fs = std::filesystem;

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool decodable_name(const std::string& name) {
  const std::string l = lower(name);
  return ends_with(l, ".jpg") || ends_with(l, ".jpeg") || ends_with(l, ".png");
}

// torchvision's other image extensions: a folder holding them is not silently thinned out.
bool other_image_name(const std::string& name) {
  const std::string l = lower(name);
  for (const char* ext : {".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"})
    if (ends_with(l, ext)) return true;
  return false;
}

std::vector<fs::path> sorted_entries(const fs::path& dir, bool directories) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec) == directories && (directories || e.is_regular_file(ec))) out.push_back(e.path());
  if (ec) throw UsageError(dir.string() + ": cannot list it (" + ec.message() + ")");
  std::sort(out.begin(), out.end());
  return out;
}

// A class folder's images, as sorted(os.walk(...)) and sorted(fnames) visit them.
void collect(const fs::path& dir, std::vector<std::string>& files) {
  for (const auto& f : sorted_entries(dir, false)) {
    const std::string name = f.filename().string();
    if (decodable_name(name))
      files.push_back(f.string());
    else if (other_image_name(name))
      throw UsageError(f.string() +
                       ": dp decodes JPEG and PNG images; convert this one (or move it out of the folder)");
  }
  for (const auto& d : sorted_entries(dir, true)) collect(d, files);
}

// The first bytes say JPEG or PNG; a file that cannot be opened says why.
void check_magic(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw UsageError(path + ": cannot be read (" + std::strerror(errno) + ")");
  unsigned char b[8] = {};
  f.read(reinterpret_cast<char*>(b), sizeof b);
  const auto got = f.gcount();
  const bool jpeg = got >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF;
  const bool png = got == 8 && std::memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0;
  if (!jpeg && !png) throw UsageError(path + ": not a JPEG or PNG image" + (got == 0 ? " (an empty file)" : ""));
}

class ImageFolderDecoder final : public SampleDecoder {
 public:
  ImageFolderDecoder(std::vector<std::string> files, ImageFolderOptions options)
      : files_(std::move(files)), o_(options) {}
  void decode(int64_t i, std::mt19937_64* rng, uint8_t* out) const override {
    const std::string& path = files_.at(static_cast<size_t>(i));
    const std::string bytes = read_file(path);
    const ImageHeader h = read_image_header(bytes, path);
    const int64_t need = transform_working_set(h.rows, h.cols, o_.channels, o_.cols, o_.short_side);
    auto transform = [&](const DecodedImage& img) {
      if (rng)
        train_transform(img, o_.rows, o_.cols, o_.crop, *rng, out);
      else
        eval_transform(img, o_.short_side, o_.rows, o_.cols, out);
    };
    if (need <= o_.decode_alone_bytes) {
      thread_local DecodedImage img;  // its buffer reused image after image
      decode_image_into(bytes, path, o_.channels, img);
      transform(img);
      return;
    }
    // A large image: in the loaders' shared budget, its buffers given back after.
    DecodeBudget& budget = *o_.decode_budget;
    if (!budget.fits(need)) {
      char text[160];
      std::snprintf(text, sizeof text, "%.1f MiB to decode and resize to %lld columns, more than the %.1f MiB",
                    static_cast<double>(need) / (1 << 20), static_cast<long long>(o_.cols),
                    static_cast<double>(budget.bytes()) / (1 << 20));
      throw RuntimeError(path + ": " + std::to_string(h.cols) + "x" + std::to_string(h.rows) + " pixels need " + text +
                         " the image decoders may hold");
    }
    DecodeBudget::Hold hold(budget, need);
    struct Release {  // on every exit, an exception's too
      ~Release() { release_transform_scratch(); }
    } release;
    DecodedImage img;
    decode_image_into(bytes, path, o_.channels, img);
    transform(img);
  }

 private:
  std::vector<std::string> files_;
  ImageFolderOptions o_;
};

// --skip-bad-images: each file decoded in full once; the ones that fail, with why ("" for the good).
std::vector<std::string> verify(const std::vector<std::string>& files, const ImageFolderOptions& options) {
  std::vector<std::string> why(files.size());
  ThreadPool pool(std::max(options.threads, 1));
  pool.parallel_for(static_cast<int64_t>(files.size()), [&](int64_t begin, int64_t end) {
    DecodedImage img;  // reused for the images its thread may hold alone
    for (int64_t i = begin; i < end; ++i) {
      const std::string& file = files[static_cast<size_t>(i)];
      try {
        check_magic(file);
        const std::string bytes = read_file(file);
        const ImageHeader h = read_image_header(bytes, file);
        const int64_t need = 3 * h.rows * h.cols;
        if (need <= options.decode_alone_bytes) {
          decode_image_into(bytes, file, options.channels, img);
        } else {  // a large one in the shared budget, its buffer given back after
          DecodeBudget::Hold hold(*options.decode_budget, need);
          DecodedImage large;
          decode_image_into(bytes, file, options.channels, large);
        }
      } catch (const std::exception& e) {
        why[static_cast<size_t>(i)] = e.what();
      }
    }
  });
  return why;
}

Dataset scan(const fs::path& dir, const ImageFolderOptions& options, std::vector<std::string>& classes,
             std::vector<std::string>& skipped) {
  classes.clear();
  for (const auto& d : sorted_entries(dir, true)) classes.push_back(d.filename().string());
  if (classes.empty()) throw UsageError(dir.string() + ": no class folders in it (an image folder has one per class)");
  std::vector<std::string> files;
  Dataset d;
  for (size_t c = 0; c < classes.size(); ++c) {
    const size_t before = files.size();
    collect(dir / classes[c], files);
    if (files.size() == before)
      throw UsageError((dir / classes[c]).string() + ": an empty class folder (no .jpg, .jpeg or .png in it)");
    d.labels.resize(files.size(), static_cast<int32_t>(c));
  }
  if (options.skip_bad) {
    const std::vector<std::string> why = verify(files, options);
    std::vector<std::string> kept;
    std::vector<int32_t> labels;
    for (size_t i = 0; i < files.size(); ++i) {
      if (why[i].empty()) {
        kept.push_back(files[i]);
        labels.push_back(d.labels[i]);
      } else {
        skipped.push_back(why[i]);
      }
    }
    for (size_t c = 0; c < classes.size(); ++c)
      if (std::find(labels.begin(), labels.end(), static_cast<int32_t>(c)) == labels.end())
        throw UsageError((dir / classes[c]).string() + ": no image in this class folder decodes");
    files = std::move(kept);
    d.labels = std::move(labels);
  } else {
    for (const auto& f : files) check_magic(f);
  }
  d.count = static_cast<int64_t>(files.size());
  d.channels = options.channels, d.rows = options.rows, d.cols = options.cols;
  d.classes = static_cast<int64_t>(classes.size());
  d.source = dir.string();
  use_default_statistics(d);
  d.decoder = std::make_shared<ImageFolderDecoder>(std::move(files), options);
  return d;
}

}  // namespace

bool holds_image_folder(const std::string& dir) {
  std::error_code ec;
  const fs::path root(dir);
  const fs::path classes_in = fs::is_directory(root / "train", ec) ? root / "train" : root;
  for (const auto& c : fs::directory_iterator(classes_in, ec)) {
    if (!c.is_directory(ec)) continue;
    for (const auto& f : fs::recursive_directory_iterator(c.path(), ec))
      if (f.is_regular_file(ec) && decodable_name(f.path().filename().string())) return true;
  }
  return false;
}

TrainTest load_image_folder(const std::string& dir, const ImageFolderOptions& given) {
  ImageFolderOptions options = given;
  if (options.short_side == 0)
    options.short_side =
        static_cast<int64_t>(std::nearbyint(static_cast<double>(std::max(options.rows, options.cols)) * 256 / 224));
  const fs::path root(dir);
  std::error_code ec;
  const bool split = fs::is_directory(root / "train", ec) && fs::is_directory(root / "val", ec);
  TrainTest t;
  std::vector<std::string> classes, val_classes;
  t.train = scan(split ? root / "train" : root, options, classes, t.skipped);
  if (split) {
    t.test = scan(root / "val", options, val_classes, t.skipped);
    if (val_classes != classes) {
      // Name the difference: the classes val/ lacks and those train/ lacks (sorted lists, both).
      auto listed = [](const std::vector<std::string>& names) {
        std::string text;
        for (size_t i = 0; i < names.size() && i < 5; ++i) text += (i ? ", " : "") + names[i];
        return names.size() > 5 ? text + " and " + std::to_string(names.size() - 5) + " more" : text;
      };
      std::vector<std::string> missing, extra;
      std::set_difference(classes.begin(), classes.end(), val_classes.begin(), val_classes.end(),
                          std::back_inserter(missing));
      std::set_difference(val_classes.begin(), val_classes.end(), classes.begin(), classes.end(),
                          std::back_inserter(extra));
      std::string why;
      if (!missing.empty()) why += "no folder for train/'s " + listed(missing);
      if (!extra.empty()) why += (why.empty() ? "" : "; ") + std::string("classes train/ lacks: ") + listed(extra);
      throw UsageError((root / "val").string() + ": its classes differ from train/'s (" + why +
                       "); both must name the same class folders");
    }
  } else {
    t.test.channels = options.channels, t.test.rows = options.rows, t.test.cols = options.cols;
    t.test.source = dir + " (no val/ beside a train/ folder)";
    t.test.mean = t.train.mean, t.test.std = t.train.std;
  }
  t.description = "image folder " + dir + " (" + std::to_string(t.train.count) + " training" +
                  (split ? ", " + std::to_string(t.test.count) + " validation" : std::string()) + " images in " +
                  std::to_string(classes.size()) + " classes, at " + std::to_string(options.channels) + "x" +
                  std::to_string(options.rows) + "x" + std::to_string(options.cols) +
                  (t.skipped.empty() ? ""
                                     : "; " + std::to_string(t.skipped.size()) + " bad image" +
                                           (t.skipped.size() == 1 ? "" : "s") + " skipped") +
                  ")";
  return t;
}

}  // namespace dp
