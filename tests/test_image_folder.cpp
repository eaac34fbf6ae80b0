// Image folders (data/image_folder.hpp): JPEG and PNG decoded through the libraries as PIL converts
// them, torchvision's transforms (the weights of its antialiased bilinear resize, the crops' boxes),
// the folder's classes and files in torchvision's order, the batches the same for any number of
// loader threads, and every bad file named. Against PIL and torchvision themselves:
// tests/torch/transform_check.py (DP_TRANSFORM_VECTORS).
#include <doctest/doctest.h>

#include <png.h>
#include <turbojpeg.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.hpp"
#include "core/thread_pool.hpp"
#include "data/image_decode.hpp"
#include "data/image_folder.hpp"
#include "data/image_transforms.hpp"
#include "data/loader.hpp"
#include "io/read_file.hpp"
#include "helpers.hpp"

namespace test_image_folder {  // one namespace a file: unity builds compile several files as one

using namespace dp;
namespace fs = std::filesystem;

namespace {

// A smooth RGB picture (HWC) that survives JPEG well.
std::vector<uint8_t> picture(int rows, int cols, int seed) {
  std::vector<uint8_t> p(static_cast<size_t>(rows * cols * 3));
  for (int y = 0; y < rows; ++y)
    for (int x = 0; x < cols; ++x)
      for (int c = 0; c < 3; ++c)
        p[static_cast<size_t>((y * cols + x) * 3 + c)] =
            static_cast<uint8_t>((x * (3 + c) + y * (5 - c) + seed * 40) % 256);
  return p;
}

void write_bytes(const fs::path& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f << bytes;
}

std::string png_bytes(const std::vector<uint8_t>& pixels, int rows, int cols, png_uint_32 format) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(cols), image.height = static_cast<png_uint_32>(rows);
  image.format = format;
  png_alloc_size_t size = 0;
  REQUIRE(png_image_write_get_memory_size(image, size, 0, pixels.data(), 0, nullptr));
  std::string out(size, '\0');
  REQUIRE(png_image_write_to_memory(&image, out.data(), &size, 0, pixels.data(), 0, nullptr));
  out.resize(size);
  return out;
}

std::string jpeg_bytes(const std::vector<uint8_t>& rgb, int rows, int cols) {
  tjhandle tj = tjInitCompress();
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  REQUIRE(tjCompress2(tj, rgb.data(), cols, 0, rows, TJPF_RGB, &buf, &size, TJSAMP_420, 95, 0) == 0);
  std::string out(reinterpret_cast<char*>(buf), size);
  tjFree(buf);
  tjDestroy(tj);
  return out;
}


}  // namespace

TEST_CASE(
    "images: PNG decodes exactly as PIL converts it (RGB, gray replicated, alpha dropped), JPEG through TurboJPEG") {
  const auto rgb = picture(5, 7, 1);
  DecodedImage d = decode_image(png_bytes(rgb, 5, 7, PNG_FORMAT_RGB), "a.png", 3);
  CHECK(d.rows == 5);
  CHECK(d.cols == 7);
  CHECK(d.pixels == rgb);
  std::vector<uint8_t> rgba;
  for (size_t i = 0; i < rgb.size(); i += 3)
    rgba.insert(rgba.end(), {rgb[i], rgb[i + 1], rgb[i + 2], uint8_t(i % 251)});
  CHECK(decode_image(png_bytes(rgba, 5, 7, PNG_FORMAT_RGBA), "a.png", 3).pixels == rgb);
  const std::vector<uint8_t> gray{0, 50, 100, 150, 200, 250};
  d = decode_image(png_bytes(gray, 2, 3, PNG_FORMAT_GRAY), "g.png", 3);
  CHECK(d.pixels[3 * 4 + 0] == 200);
  CHECK(d.pixels[3 * 4 + 2] == 200);
  CHECK(decode_image(png_bytes(gray, 2, 3, PNG_FORMAT_GRAY), "g.png", 1).pixels == gray);  // luma of gray is gray
  // PIL's luma: (r·19595 + g·38470 + b·7471 + 2^15) >> 16.
  const std::vector<uint8_t> one{10, 200, 30};
  CHECK(decode_image(png_bytes(one, 1, 1, PNG_FORMAT_RGB), "1.png", 1).pixels[0] ==
        (10 * 19595 + 200 * 38470 + 30 * 7471 + 32768) >> 16);
  const auto smooth = picture(16, 24, 2);
  d = decode_image(jpeg_bytes(smooth, 16, 24), "a.jpg", 3);
  CHECK(d.rows == 16);
  CHECK(d.cols == 24);
  int worst = 0;
  for (size_t i = 0; i < smooth.size(); ++i) worst = std::max(worst, std::abs(int(d.pixels[i]) - int(smooth[i])));
  CHECK(worst < 40);  // lossy, and close
}

TEST_CASE("images: a corrupt, truncated, empty or foreign file is an error naming it") {
  const std::string jpeg = jpeg_bytes(picture(32, 32, 3), 32, 32);
  CHECK_THROWS_WITH_AS(decode_image(jpeg.substr(0, jpeg.size() / 2), "half.jpg", 3),
                       doctest::Contains("half.jpg: a corrupt or truncated JPEG"), RuntimeError);
  // The thread's decoder after a failure: the same file fails the same way, a good one decodes.
  CHECK_THROWS_WITH_AS(decode_image(jpeg.substr(0, jpeg.size() / 3), "third.jpg", 3),
                       doctest::Contains("third.jpg: a corrupt or truncated JPEG"), RuntimeError);
  CHECK_THROWS_WITH_AS(decode_image(jpeg.substr(0, jpeg.size() / 3), "third.jpg", 3),
                       doctest::Contains("third.jpg: a corrupt or truncated JPEG"), RuntimeError);
  CHECK(decode_image(jpeg, "whole.jpg", 3).rows == 32);
  const std::string png = png_bytes(picture(32, 32, 3), 32, 32, PNG_FORMAT_RGB);
  CHECK_THROWS_WITH_AS(decode_image(png.substr(0, png.size() - 20), "cut.png", 3),
                       doctest::Contains("cut.png: a corrupt or truncated PNG"), RuntimeError);
  CHECK_THROWS_WITH_AS(decode_image("", "empty.jpg", 3), doctest::Contains("empty.jpg: not a JPEG or PNG image"),
                       RuntimeError);
  CHECK_THROWS_WITH_AS(decode_image("GIF89a....", "a.gif", 3), doctest::Contains("not a JPEG or PNG"), RuntimeError);
  std::string header = png.substr(0, 33);  // a PNG header that claims 2^31 - 1 squared pixels
  header[16] = header[20] = 0x7f,
  header[17] = header[18] = header[19] = header[21] = header[22] = header[23] = char(0xff);
  CHECK_THROWS_AS(read_image_header(header, "huge.png"), RuntimeError);
}

TEST_CASE("transforms: torchvision's boxes and sizes, an identity resize, weights that sum to one") {
  int64_t r = 0, c = 0;
  resized_size(480, 640, 256, r, c);
  CHECK(r == 256);
  CHECK(c == 341);  // int(256 · 640 / 480), truncated as torchvision
  resized_size(500, 333, 256, r, c);
  CHECK(c == 256);
  CHECK(r == 384);
  const CropBox centre = center_crop_box(256, 341, 224, 224);
  CHECK(centre.top == 16);
  CHECK(centre.left == 58);  // round(58.5) to even, as Python's round
  // Resizing a box to its own size gives its pixels back; a flip mirrors them.
  DecodedImage img;
  img.rows = 3, img.cols = 4, img.channels = 1, img.pixels = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  std::vector<uint8_t> out(12), flipped(12);
  resize_box(img, {0, 0, 3, 4}, 3, 4, false, out.data());
  CHECK(out == img.pixels);
  resize_box(img, {0, 0, 3, 4}, 3, 4, true, flipped.data());
  CHECK(flipped == std::vector<uint8_t>{4, 3, 2, 1, 8, 7, 6, 5, 12, 11, 10, 9});
  // A flat image stays flat at any size (the weights sum to one), downscaled or up.
  img.rows = 37, img.cols = 53, img.pixels.assign(37 * 53, 77);
  for (auto [h, w] : {std::pair{5, 9}, std::pair{100, 61}, std::pair{1, 1}}) {
    std::vector<uint8_t> flat(static_cast<size_t>(h * w));
    resize_box(img, {3, 4, 20, 30}, h, w, false, flat.data());
    CHECK(std::all_of(flat.begin(), flat.end(), [](uint8_t v) { return v == 77; }));
  }
  // RandomResizedCrop's boxes lie inside the image, within the scale and ratio asked for or the
  // central fallback, and repeat for a seed.
  std::mt19937_64 a(5), b(5);
  for (int k = 0; k < 200; ++k) {
    const CropBox box = random_resized_crop_box(120, 80, RandomCrop{}, a);
    CHECK(box.top >= 0);
    CHECK(box.left >= 0);
    CHECK(box.top + box.height <= 120);
    CHECK(box.left + box.width <= 80);
    const CropBox again = random_resized_crop_box(120, 80, RandomCrop{}, b);
    CHECK(again.top == box.top);
    CHECK(again.width == box.width);
  }
  std::mt19937_64 one(1);
  const CropBox tiny = random_resized_crop_box(1, 1, RandomCrop{}, one);
  CHECK((tiny.height == 1 && tiny.width == 1));
}

TEST_CASE("image folders: classes in sorted order, files as os.walk sorts them, both layouts, every bad file named") {
  const test::TempDir tmp;
  const fs::path& dir = tmp.path;
  const auto pic = [&](const fs::path& p, int seed) {
    fs::create_directories(p.parent_path());
    write_bytes(p, p.extension() == ".png" ? png_bytes(picture(20 + seed, 30, seed), 20 + seed, 30, PNG_FORMAT_RGB)
                                           : jpeg_bytes(picture(20 + seed, 30, seed), 20 + seed, 30));
  };
  pic(dir / "zebra" / "b.jpg", 1);
  pic(dir / "zebra" / "a.PNG", 2);
  pic(dir / "ant" / "deep" / "x.jpeg", 3);
  pic(dir / "ant" / "c.png", 4);
  write_bytes(dir / "ant" / "notes.txt", "ignored, as torchvision ignores it");
  ImageFolderOptions o;
  o.channels = 3, o.rows = 16, o.cols = 12;
  CHECK(holds_image_folder(dir.string()));
  TrainTest t = load_image_folder(dir.string(), o);
  CHECK(t.train.count == 4);
  CHECK(t.train.classes == 2);
  CHECK(t.train.labels == std::vector<int32_t>{0, 0, 1, 1});  // ant: c.png, deep/x.jpeg; zebra: a.PNG, b.jpg
  CHECK(t.test.count == 0);
  CHECK(t.train.mean == std::vector<float>{0.485f, 0.456f, 0.406f});
  // The batches: evaluation's transform without augmentation, the training one drawn from the
  // sample's stream with it; the same for one thread or four.
  const std::vector<int64_t> order{3, 0, 2, 1};
  const Batch plain = make_batch(t.train, order.data(), 4);
  ThreadPool pool(4);
  const AugmentStreams streams{9, 1, 0};
  const Batch drawn = make_batch(t.train, order.data(), 4, &streams),
              drawn4 = make_batch(t.train, order.data(), 4, &streams, &pool);
  CHECK(plain.images.size() == 4 * 3 * 16 * 12);
  CHECK(drawn.images == drawn4.images);
  CHECK(drawn.images != plain.images);
  CHECK(drawn.labels == std::vector<int32_t>{1, 0, 1, 0});
  const Batch pixels = make_batch(t.train, order.data(), 4, nullptr, nullptr, BatchForm::Pixels);
  CHECK(pixels.pixels.size() == 4 * 3 * 16 * 12);
  // The ImageNet layout: train/ and val/ with the same classes.
  const test::TempDir split_tmp;
  const fs::path& split = split_tmp.path;
  pic(split / "train" / "cat" / "1.jpg", 1);
  pic(split / "train" / "dog" / "2.jpg", 2);
  pic(split / "val" / "cat" / "3.png", 3);
  pic(split / "val" / "dog" / "4.png", 4);
  t = load_image_folder(split.string(), o);
  CHECK(t.train.count == 2);
  CHECK(t.test.count == 2);
  CHECK(t.description.find("2 training, 2 validation images in 2 classes, at 3x16x12") != std::string::npos);
  pic(split / "val" / "emu" / "5.png", 5);
  CHECK_THROWS_WITH_AS(load_image_folder(split.string(), o),
                       doctest::Contains("its classes differ from train/'s (classes train/ lacks: emu)"), UsageError);
  fs::remove_all(split / "val" / "emu");
  fs::remove_all(split / "val" / "dog");
  CHECK_THROWS_WITH_AS(load_image_folder(split.string(), o),
                       doctest::Contains("its classes differ from train/'s (no folder for train/'s dog)"), UsageError);
  // Bad folders and files.
  fs::create_directories(dir / "empty");
  CHECK_THROWS_WITH_AS(load_image_folder(dir.string(), o), doctest::Contains("empty: an empty class folder"),
                       UsageError);
  fs::remove(dir / "empty");
  write_bytes(dir / "ant" / "fake.jpg", "not really");
  CHECK_THROWS_WITH_AS(load_image_folder(dir.string(), o), doctest::Contains("fake.jpg: not a JPEG or PNG image"),
                       UsageError);
  write_bytes(dir / "ant" / "fake.jpg", "");
  CHECK_THROWS_WITH_AS(load_image_folder(dir.string(), o), doctest::Contains("(an empty file)"), UsageError);
  fs::remove(dir / "ant" / "fake.jpg");
  write_bytes(dir / "ant" / "old.bmp", "BM");
  CHECK_THROWS_WITH_AS(load_image_folder(dir.string(), o), doctest::Contains("old.bmp: dp decodes JPEG and PNG"),
                       UsageError);
  fs::remove(dir / "ant" / "old.bmp");
  // A file that decodes badly only when its batch is made: the batch names it.
  const std::string jpeg = jpeg_bytes(picture(40, 40, 7), 40, 40);
  write_bytes(dir / "ant" / "c.png", jpeg.substr(0, jpeg.size() / 3));  // a JPEG's start, cut: the magic passes
  t = load_image_folder(dir.string(), o);
  const std::vector<int64_t> first{0};
  CHECK_THROWS_WITH_AS(make_batch(t.train, first.data(), 1), doctest::Contains("c.png: a corrupt or truncated JPEG"),
                       RuntimeError);
  // With loader threads: the error reaches the caller once every thread's images are done (it used
  // to end the process from the worker, or unwind the batch under a thread still writing it).
  ThreadPool three(3);
  const std::vector<int64_t> all{0, 1, 2, 3, 0, 1, 2, 3, 0};
  for (int k = 0; k < 10; ++k)
    CHECK_THROWS_WITH_AS(make_batch(t.train, all.data(), static_cast<int64_t>(all.size()), nullptr, &three),
                         doctest::Contains("c.png: a corrupt or truncated JPEG"), RuntimeError);
  const test::TempDir none_tmp;
  const fs::path& none = none_tmp.path;
  CHECK_FALSE(holds_image_folder(none.string()));
  CHECK_THROWS_WITH_AS(load_image_folder(none.string(), o), doctest::Contains("no class folders"), UsageError);
}

TEST_CASE(
    "images and transforms match PIL and torchvision on their own outputs (DP_TRANSFORM_VECTORS, "
    "tests/torch/transform_check.py)") {
  const char* path = std::getenv("DP_TRANSFORM_VECTORS");
  if (!path) {
    MESSAGE("DP_TRANSFORM_VECTORS not set: run tests/torch/transform_check.py for the comparison");
    return;
  }
  // Each line: kind (decode, crop, eval), the image file, channels, then for crop: top left height
  // width out_rows out_cols; for eval: short_side out_rows out_cols; then the expected planes' file.
  std::ifstream manifest(path);
  REQUIRE(manifest);
  std::string line;
  int64_t cases = 0, pixels = 0, off_by_one = 0, worse = 0, decode_differs = 0, worst_shown = 0;
  while (std::getline(manifest, line)) {
    std::istringstream in(line);
    std::string kind, file, expected_file;
    int64_t channels = 0;
    in >> kind >> file >> channels;
    const DecodedImage img = decode_image(read_file(file), file, channels);
    std::vector<uint8_t> got;
    if (kind == "decode") {
      in >> expected_file;
      got.resize(img.pixels.size());
      for (int64_t c = 0; c < channels; ++c)
        for (int64_t i = 0; i < img.rows * img.cols; ++i)
          got[static_cast<size_t>(c * img.rows * img.cols + i)] = img.pixels[static_cast<size_t>(i * channels + c)];
    } else if (kind == "crop") {
      CropBox box;
      int64_t rows = 0, cols = 0;
      in >> box.top >> box.left >> box.height >> box.width >> rows >> cols >> expected_file;
      got.resize(static_cast<size_t>(channels * rows * cols));
      resize_box(img, box, rows, cols, false, got.data());
    } else {
      int64_t short_side = 0, rows = 0, cols = 0;
      in >> short_side >> rows >> cols >> expected_file;
      got.resize(static_cast<size_t>(channels * rows * cols));
      eval_transform(img, short_side, rows, cols, got.data());
    }
    const std::string expected = read_file(expected_file);
    REQUIRE(expected.size() == got.size());
    ++cases;
    for (size_t i = 0; i < got.size(); ++i) {
      const int d = std::abs(int(got[i]) - int(static_cast<uint8_t>(expected[i])));
      if (kind == "decode") {
        decode_differs += d != 0;
        continue;
      }
      ++pixels;
      off_by_one += d == 1;
      worse += d > 1;
      if (d > 1 && worst_shown < 5) {
        ++worst_shown;
        MESSAGE("differs by " << d << " at " << i << ": " << line);
      }
    }
  }
  MESSAGE(cases << " cases; transforms: " << pixels << " pixels, " << off_by_one << " one level off, " << worse
                << " more; decoded pixels differing from PIL's: " << decode_differs);
  CHECK(cases > 0);
  CHECK(decode_differs == 0);
  CHECK(worse == 0);
  CHECK(static_cast<double>(off_by_one) <= 0.001 * static_cast<double>(pixels));
}

TEST_CASE("decode budget: a hold waits for room, gives it back on every exit, and never holds more than the budget") {
  DecodeBudget budget(100);
  std::atomic<bool> second_held{false};
  std::thread other;
  {
    DecodeBudget::Hold first(budget, 80);
    other = std::thread([&] {
      DecodeBudget::Hold second(budget, 50);  // waits: 80 + 50 > 100
      second_held = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK_FALSE(second_held.load());
    CHECK(budget.in_use() == 80);
  }
  other.join();
  CHECK(second_held.load());
  CHECK(budget.in_use() == 0);
  CHECK(budget.peak() == 80);
  try {
    DecodeBudget::Hold held(budget, 60);
    throw std::runtime_error("a decode failed");
  } catch (const std::runtime_error&) {
  }
  CHECK(budget.in_use() == 0);  // an exception gives the room back too
}

TEST_CASE("image folders: large images decode in the shared budget, one at a time when only one fits, to the same "
          "pixels") {
  const test::TempDir tmp;
  const fs::path& dir = tmp.path;
  for (int k = 0; k < 6; ++k) {
    fs::create_directories(dir / (k % 2 ? "b" : "a"));
    write_bytes(dir / (k % 2 ? "b" : "a") / (std::to_string(k) + (k % 3 ? ".png" : ".jpg")),
                k % 3 ? png_bytes(picture(60 + k, 50, k), 60 + k, 50, PNG_FORMAT_RGB)
                      : jpeg_bytes(picture(60 + k, 50, k), 60 + k, 50));
  }
  ImageFolderOptions o;
  o.channels = 3, o.rows = 24, o.cols = 20;
  const TrainTest usual = load_image_folder(dir.string(), o);
  const int64_t one = transform_working_set(65, 50, 3, 20, 27);  // the largest image's (short side 24·256/224)
  DecodeBudget room_for_one(one);
  o.decode_alone_bytes = 0;  // every image is "large" here
  o.decode_budget = &room_for_one;
  const TrainTest budgeted = load_image_folder(dir.string(), o);
  const std::vector<int64_t> order{0, 1, 2, 3, 4, 5};
  ThreadPool pool(3);
  const AugmentStreams streams{4, 0, 0};
  for (const AugmentStreams* augment : {static_cast<const AugmentStreams*>(nullptr), &streams}) {
    const Batch a = make_batch(usual.train, order.data(), 6, augment, &pool);
    const Batch b = make_batch(budgeted.train, order.data(), 6, augment, &pool);
    CHECK(a.images == b.images);
  }
  CHECK(room_for_one.in_use() == 0);
  CHECK(room_for_one.peak() <= one);  // three threads, one image at a time
  CHECK(room_for_one.peak() > 0);
  // An image that cannot fit the whole budget is named, not decoded.
  DecodeBudget tiny(1000);
  o.decode_budget = &tiny;
  const TrainTest refused = load_image_folder(dir.string(), o);
  CHECK_THROWS_WITH_AS(make_batch(refused.train, order.data(), 1, nullptr, &pool),
                       doctest::Contains("MiB the image decoders may hold"), RuntimeError);
}

}  // namespace test_image_folder
