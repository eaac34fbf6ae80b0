// Data and checkpoint I/O: IDX (gzip and raw) and its corruptions, safetensors and its
// corruptions, atomic writes, the batch loader's order.
#include <doctest/doctest.h>

#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <csignal>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <set>
#include <thread>
#include <zlib.h>

#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "core/bounded_json.hpp"
#include "io/checkpoint.hpp"
#include "io/protected_inputs.hpp"
#include "data/dataset.hpp"
#include "data/loader.hpp"
#include "data/tensor_files.hpp"
#include "models/graph/model_file.hpp"
#include "io/read_file.hpp"
#include "io/safetensors.hpp"
#include "helpers.hpp"

namespace test_io {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {

Dataset small_dataset(int64_t n) {
  Dataset d;
  d.count = n;
  d.rows = d.cols = 28;
  d.images.resize(static_cast<size_t>(n * 784));
  for (size_t i = 0; i < d.images.size(); ++i) d.images[i] = static_cast<uint8_t>(i * 31 % 256);
  for (int64_t i = 0; i < n; ++i) d.labels.push_back(static_cast<uint8_t>(i % 10));
  return d;
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

}  // namespace

TEST_CASE("IDX pairs round-trip, gzip-compressed and raw") {
  TempDir dir;
  Dataset d = small_dataset(13);
  for (const char* ext : {".gz", ""}) {
    write_idx_pair(d, dir.file(std::string("img") + ext), dir.file(std::string("lbl") + ext));
    Dataset back = read_idx_pair(dir.file(std::string("img") + ext), dir.file(std::string("lbl") + ext));
    CHECK(back.count == 13);
    CHECK(back.rows == 28);
    CHECK(back.images == d.images);
    CHECK(back.labels == d.labels);
  }
}

TEST_CASE("the MNIST directory loader finds the four standard names") {
  TempDir dir;
  Dataset d = small_dataset(5);
  write_idx_pair(d, dir.file("train-images-idx3-ubyte.gz"), dir.file("train-labels-idx1-ubyte.gz"));
  write_idx_pair(d, dir.file("t10k-images-idx3-ubyte"), dir.file("t10k-labels-idx1-ubyte"));
  TrainTest tt = load_mnist_dir(dir.path.string());
  CHECK(tt.train.count == 5);
  CHECK(tt.test.count == 5);
  std::filesystem::remove(dir.file("t10k-labels-idx1-ubyte"));
  CHECK_THROWS_WITH_AS(load_mnist_dir(dir.path.string()), doctest::Contains("missing t10k-labels-idx1-ubyte"),
                       RuntimeError);
  CHECK_THROWS_WITH_AS(load_mnist_dir(dir.file("nope")), doctest::Contains("not a directory"), RuntimeError);
}

TEST_CASE("Fashion-MNIST (same files as MNIST) is named and normalised as itself") {
  TempDir dir;
  const std::string fashion = dir.file("fashion-mnist");
  std::filesystem::create_directories(fashion);
  Dataset d = small_dataset(5);
  write_idx_pair(d, fashion + "/train-images-idx3-ubyte.gz", fashion + "/train-labels-idx1-ubyte.gz");
  write_idx_pair(d, fashion + "/t10k-images-idx3-ubyte.gz", fashion + "/t10k-labels-idx1-ubyte.gz");
  const TrainTest tt = load_data_dir(fashion);
  CHECK(tt.description.rfind("Fashion-MNIST from", 0) == 0);
  CHECK(tt.train.mean == std::vector<float>{0.2860f});
  CHECK(tt.test.std == std::vector<float>{0.3530f});
  const TrainTest plain = load_data_dir(dir.path.string() + "/../" + dir.path.filename().string() + "/fashion-mnist");
  CHECK(plain.train.count == 5);
}

TEST_CASE("corrupt IDX files are rejected with a message naming the problem") {
  TempDir dir;
  Dataset d = small_dataset(4);
  write_idx_pair(d, dir.file("img"), dir.file("lbl"));
  const std::string img = read_bytes(dir.file("img")), lbl = read_bytes(dir.file("lbl"));
  auto expect = [&](const std::string& img_bytes, const std::string& lbl_bytes, const char* needle) {
    write_bytes(dir.file("i2"), img_bytes);
    write_bytes(dir.file("l2"), lbl_bytes);
    INFO(needle);
    CHECK_THROWS_WITH_AS(read_idx_pair(dir.file("i2"), dir.file("l2")), doctest::Contains(needle), RuntimeError);
  };
  expect(be32(0x00000804) + img.substr(4), lbl, "bad magic 0x00000804");
  expect(img, be32(0x00000803) + lbl.substr(4), "bad magic 0x00000803");
  expect(img.substr(0, img.size() - 100), lbl, "truncated");
  expect(img.substr(0, 10), lbl, "truncated");
  expect("", lbl, "truncated");
  expect(img, lbl.substr(0, lbl.size() - 1), "truncated");
  expect(img, be32(0x801) + be32(5) + lbl.substr(8) + "x", "5 labels for 4 images");
  std::string bad_label = lbl;
  bad_label[10] = 10;
  expect(img, bad_label, "label 10 of sample 2 is not a digit");
  // A header claiming far more images than the file holds fails fast, without allocating them.
  expect(be32(0x803) + be32(2000000000) + be32(28) + be32(28) + img.substr(16), lbl, "more than any file holds");
  expect(be32(0x803) + be32(100000) + be32(28) + be32(28) + img.substr(16), lbl, "truncated");
  expect(be32(0x803) + be32(4) + be32(0) + be32(28) + img.substr(16), lbl, "implausible image size");
  CHECK_THROWS_WITH_AS(read_idx_pair(dir.file("missing"), dir.file("lbl")), doctest::Contains("cannot open"),
                       RuntimeError);
  // Bytes after the data the header announces (torchvision's reader refuses them: its view fails).
  expect(img + std::string(7, '\0'), lbl, "bytes after the 4 images its header announces");
  expect(img, lbl + "x", "bytes after the 4 labels its header announces");
  {
    // ... also as a second gzip member, which zlib reads on as one stream.
    write_idx_pair(d, dir.file("img.gz"), dir.file("lbl.gz"));
    gzFile extra = gzopen(dir.file("extra.gz").c_str(), "wb");
    REQUIRE(extra);
    const std::string zeros(4096, '\0');
    REQUIRE(gzwrite(extra, zeros.data(), static_cast<unsigned>(zeros.size())) == static_cast<int>(zeros.size()));
    REQUIRE(gzclose(extra) == Z_OK);
    write_bytes(dir.file("two.gz"), read_bytes(dir.file("img.gz")) + read_bytes(dir.file("extra.gz")));
    CHECK_THROWS_WITH_AS(read_idx_pair(dir.file("two.gz"), dir.file("lbl.gz")),
                         doctest::Contains("bytes after the 4 images its header announces"), RuntimeError);
  }
  // A damaged gzip stream is reported as corrupt, not as short.
  write_idx_pair(d, dir.file("img.gz"), dir.file("lbl.gz"));
  std::string gz = read_bytes(dir.file("img.gz"));
  for (size_t i = 20; i < gz.size() - 8; ++i) gz[i] = static_cast<char>(gz[i] ^ 0x5a);
  write_bytes(dir.file("bad.gz"), gz);
  CHECK_THROWS_WITH_AS(read_idx_pair(dir.file("bad.gz"), dir.file("lbl.gz")), doctest::Contains("corrupt file"),
                       RuntimeError);
}

TEST_CASE("read_file: a whole file at its size, an empty one, a pipe, and a clear error for what cannot be read") {
  TempDir dir;
  std::string bytes(3 << 20, '\0');  // larger than any stream buffer, every byte value, a zero inside
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 251);
  write_bytes(dir.file("big"), bytes);
  CHECK(read_file(dir.file("big")) == bytes);
  write_bytes(dir.file("empty"), "");
  CHECK(read_file(dir.file("empty")).empty());
  // A pipe has no size: read to its end.
  REQUIRE(mkfifo(dir.file("fifo").c_str(), 0600) == 0);
  const auto old_sigpipe = std::signal(SIGPIPE, SIG_IGN);  // a reader that gives up must not kill the writer
  std::thread writer([&] { write_bytes(dir.file("fifo"), bytes.substr(0, 100000)); });
  std::string piped, error;
  try {
    piped = read_file(dir.file("fifo"));
  } catch (const std::exception& e) {
    error = e.what();
  }
  writer.join();
  std::signal(SIGPIPE, old_sigpipe);
  CHECK(error == "");
  CHECK(piped == bytes.substr(0, 100000));
  const std::string missing = "cannot open " + dir.file("none") + ": No such file";
  CHECK_THROWS_WITH_AS(read_file(dir.file("none")), doctest::Contains(missing.c_str()), RuntimeError);
  const std::string not_a_file = "cannot read " + dir.path.string() + ": it is a directory";
  CHECK_THROWS_WITH_AS(read_file(dir.path.string()), doctest::Contains(not_a_file.c_str()), RuntimeError);
}

TEST_CASE("safetensors round-trip with PyTorch's state-dict names, int64 num_batches_tracked") {
  TempDir dir;
  const ModelLayout layout = ModelLayout::of(find_model("convnet"));
  ModelState state;
  state.params.assign(static_cast<size_t>(layout.parameter_count), 0.f);  // alignment gaps stay zero
  state.buffers.assign(static_cast<size_t>(layout.buffer_count), 0.f);
  uint64_t seed = 1;
  for (const auto& e : layout.entries) {
    auto& dst = e.buffer() ? state.buffers : state.params;
    const auto v = random_vector(static_cast<size_t>(numel(e.shape)), ++seed);
    std::copy(v.begin(), v.end(), dst.begin() + e.offset);
    if (e.decl.integer) dst[static_cast<size_t>(e.offset)] = 17;
  }
  save_safetensors(dir.file("m.safetensors"), layout, state);
  ModelState back = load_safetensors(dir.file("m.safetensors"), layout);
  CHECK(back.params == state.params);
  CHECK(back.buffers == state.buffers);
  const std::string bytes = read_bytes(dir.file("m.safetensors"));
  CHECK(bytes.find("\"1.num_batches_tracked\":{\"dtype\":\"I64\",\"shape\":[]") != std::string::npos);
  CHECK(bytes.find("\"0.weight\":{\"dtype\":\"F32\",\"shape\":[16,1,5,5]") != std::string::npos);
  CHECK(bytes.find("\"9.weight\":{\"dtype\":\"F32\",\"shape\":[10,1568]") != std::string::npos);
}

TEST_CASE("corrupt safetensors files are rejected with a message naming the problem") {
  TempDir dir;
  const ModelLayout mlp = ModelLayout::of(find_model("mlp"));
  ModelState state{random_vector(static_cast<size_t>(mlp.parameter_count), 1), {}};
  const std::string good = encode_safetensors(mlp, state);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = header_len << 8 | static_cast<unsigned char>(good[i]);
  const std::string header = good.substr(8, header_len), body = good.substr(8 + header_len);
  auto with_header = [&](std::string h, const std::string& b) {
    std::string len(8, '\0');
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((h.size() >> (8 * i)) & 0xff);
    return len + h + b;
  };
  auto expect = [&](const std::string& bytes, const char* needle) {
    write_bytes(dir.file("x.safetensors"), bytes);
    INFO(needle);
    CHECK_THROWS_WITH_AS(load_safetensors(dir.file("x.safetensors"), mlp), doctest::Contains(needle), RuntimeError);
  };
  expect("", "too short");
  expect(std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8) + "{}", "exceeds the file");
  // torch.save's zip archive (PyTorch >= 1.6) and its older bare pickle (protocol 2): named, with the way out.
  expect(std::string("PK\x03\x04") + std::string(4, '\0') + "archive/data.pkl", "a PyTorch pickle (torch.save)");
  expect(std::string("\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8", 12), "safetensors.torch.save_file");
  {
    // A real header whose length begins like a pickle's magic (0x380 = 896 bytes: 80 03 ...) is read as safetensors.
    auto h = nlohmann::json::parse(header);
    h["__metadata__"] = {{"pad", ""}};
    std::string text = h.dump();
    h["__metadata__"]["pad"] = std::string(0x380 - text.size(), 'x');
    text = h.dump();
    REQUIRE(text.size() == 0x380);
    write_bytes(dir.file("x.safetensors"), with_header(text, body));
    write_bytes(dir.file("good.safetensors"), good);
    CHECK(load_safetensors(dir.file("x.safetensors"), mlp).params ==
          load_safetensors(dir.file("good.safetensors"), mlp).params);
  }
  expect(with_header("this is not json", body), "not JSON");
  expect(with_header("[1,2,3]", body), "not a JSON object");
  expect(good.substr(0, good.size() - 4), "outside the file");
  std::string renamed = header;
  renamed.replace(renamed.find("\"1.weight\""), 10, "\"7.weight\"");
  expect(with_header(renamed, body), "unexpected tensor '7.weight'");
  std::string reshaped = header;
  reshaped.replace(reshaped.find("[512,784]"), 9, "[784,512]");
  expect(with_header(reshaped, body), "has shape [784, 512], the model needs [512, 784]");
  std::string redtyped = header;
  redtyped.replace(redtyped.find("F32"), 3, "F16");
  expect(with_header(redtyped, body), "has dtype F16");
  {
    auto h = nlohmann::json::parse(header);  // a tensor the model has, left out (the last, with its bytes)
    h.erase("5.bias");
    expect(with_header(h.dump(), body.substr(0, body.size() - 40)), "missing tensor '5.bias'");
    h = nlohmann::json::parse(header);
    h["1.bias"]["data_offsets"] = "everywhere";
    expect(with_header(h.dump(), body), "tensor '1.bias' has no data_offsets [begin, end]");
    h = nlohmann::json::parse(header);
    h["1.bias"]["dtype"] = 7;
    expect(with_header(h.dump(), body), "entry '1.bias' is malformed");
    // The last tensor 4 bytes short, and the file with it: the data tiles, the count is wrong.
    h = nlohmann::json::parse(header);
    std::string last;
    for (auto it = h.begin(); it != h.end(); ++it)
      if (it.key() != "__metadata__" && (last.empty() || it.value()["data_offsets"][1] > h[last]["data_offsets"][1]))
        last = it.key();
    h[last]["data_offsets"][1] = h[last]["data_offsets"][1].get<uint64_t>() - 4;
    const int64_t elements = h[last]["shape"].size() == 1 ? h[last]["shape"][0].get<int64_t>() : -1;
    expect(with_header(h.dump(), body.substr(0, body.size() - 4)),
           ("tensor '" + last + "' has " + std::to_string(elements * 4 - 4) + " bytes for " + std::to_string(elements) +
            " elements of F32").c_str());
  }
  // The tensors must tile the data from its first byte to the file's last, as safetensors' own reader
  // requires (MetadataIncompleteBuffer, InvalidOffset): bytes after them, a hole, an overlap.
  expect(good + "tail", "not a valid safetensors file: 4 bytes after the last tensor's data");
  {
    auto h = nlohmann::json::parse(header);
    const uint64_t end = h["1.bias"]["data_offsets"][1].get<uint64_t>();
    h["1.bias"]["data_offsets"][1] = end - 4;
    h["1.bias"]["data_offsets"][0] = h["1.bias"]["data_offsets"][0].get<uint64_t>() - 4;  // overlaps 1.weight
    expect(with_header(h.dump(), body), "tensor '1.bias' begins at byte");
    expect(with_header(h.dump(), body), "without holes or overlaps");
    h = nlohmann::json::parse(header);
    h["1.bias"]["data_offsets"][1] = end - 4;  // a 4-byte hole before the next tensor
    expect(with_header(h.dump(), body), ("where the tensor before it ends (" + std::to_string(end - 4) + ")").c_str());
    h = nlohmann::json::parse(header);
    h[std::string(5000, 'n')] = {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {body.size(), body.size()}}};
    write_bytes(dir.file("x.safetensors"), with_header(h.dump(), body));
    try {
      load_safetensors(dir.file("x.safetensors"), mlp);
      FAIL("a file with a tensor the model lacks loaded");
    } catch (const RuntimeError& e) {
      CHECK(std::string(e.what()).size() < 400);  // the name is cut, the message one short line
      CHECK(std::string(e.what()).find("nnn...") != std::string::npos);
    }
  }
  // A file for another model: names missing.
  const ModelLayout convnet = ModelLayout::of(find_model("convnet"));
  write_bytes(dir.file("c.safetensors"), good);
  CHECK_THROWS_WITH_AS(load_safetensors(dir.file("c.safetensors"), convnet), doctest::Contains("unexpected tensor"),
                       RuntimeError);
  CHECK_THROWS_WITH_AS(load_safetensors(dir.file("none.safetensors"), mlp), doctest::Contains("cannot open"),
                       RuntimeError);
}

TEST_CASE("tied names: saved as copies of their parameter, loaded from whichever name a file has, refused when "
          "they differ") {
  TempDir dir;
  // wte.weight [3, 2] and ln.weight [2]; head.weight is wte.weight.
  ModelLayout layout;
  layout.entries.push_back({"wte.weight", {3, 2}, {"weight", {3, 2}}, 0, 0});
  layout.entries.push_back({"ln.weight", {2}, {"weight", {2}}, 1, 16});
  layout.tied.push_back({"head.weight", 0});
  layout.parameter_count = 32;
  ModelState state{std::vector<float>(32, 0.f), {}};
  for (int i = 0; i < 6; ++i) state.params[static_cast<size_t>(i)] = 0.5f * static_cast<float>(i + 1);
  state.params[16] = 7.f, state.params[17] = 8.f;
  save_safetensors(dir.file("t.safetensors"), layout, state);
  const std::string bytes = read_bytes(dir.file("t.safetensors"));
  CHECK(bytes.find("\"head.weight\":{\"dtype\":\"F32\",\"shape\":[3,2]") != std::string::npos);
  CHECK(load_safetensors(dir.file("t.safetensors"), layout).params == state.params);
  // safetensors' save_model keeps one name of a tied group: either one gives the parameter.
  ModelLayout untied = layout;
  untied.tied.clear();
  ModelLayout head_only = layout;
  head_only.entries[0].name = "head.weight";
  head_only.tied.clear();
  save_safetensors(dir.file("head.safetensors"), head_only, state);
  CHECK(load_safetensors(dir.file("head.safetensors"), layout).params == state.params);
  save_safetensors(dir.file("wte.safetensors"), untied, state);
  CHECK(load_safetensors(dir.file("wte.safetensors"), layout).params == state.params);
  // Both names with other values: the file is of an untied model.
  std::string other = bytes;
  const size_t tail = other.size() - 24;  // head.weight's copy is the last tensor
  other[tail] = static_cast<char>(other[tail] ^ 0x40);
  write_bytes(dir.file("differ.safetensors"), other);
  CHECK_THROWS_WITH_AS(load_safetensors(dir.file("differ.safetensors"), layout),
                       doctest::Contains("are one tied parameter in this model, but the file's values differ"),
                       RuntimeError);
  // Neither name: missing.
  ModelLayout ln_only = untied;
  ln_only.entries.erase(ln_only.entries.begin());
  save_safetensors(dir.file("ln.safetensors"), ln_only, state);
  CHECK_THROWS_WITH_AS(load_safetensors(dir.file("ln.safetensors"), layout), doctest::Contains("missing tensor 'wte.weight'"),
                       RuntimeError);
}

TEST_CASE("JSON nested 100,000 deep in any file dp reads is refused by name, never a stack overflow") {
  TempDir dir;
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  const std::string shallow = std::string(kMaxJsonDepth, '[') + std::string(kMaxJsonDepth, ']');
  CHECK(parse_bounded_json(shallow).is_array());  // as deep as allowed parses
  CHECK_THROWS_AS(parse_bounded_json(std::string(kMaxJsonDepth + 2, '[') + std::string(kMaxJsonDepth + 2, ']')),
                  JsonTooDeep);
  // a model file whose "format" is the deep value
  write_bytes(dir.file("deep.json"), "{\"format\": " + deep + "}");
  CHECK_THROWS_WITH_AS(read_model_file(dir.file("deep.json")), doctest::Contains("nested deeper than 128 levels"),
                       UsageError);
  // a safetensors header, and a tensor file's
  std::string len(8, '\0');
  const std::string header = "{\"a\": " + deep + "}";
  for (int i = 0; i < 8; ++i) len[static_cast<size_t>(i)] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
  write_bytes(dir.file("deep.safetensors"), len + header);
  const ModelLayout mlp = ModelLayout::of(find_model("mlp"));
  CHECK_THROWS_WITH_AS(load_safetensors(dir.file("deep.safetensors"), mlp), doctest::Contains("nested deeper"),
                       RuntimeError);
  CHECK_THROWS_WITH_AS(read_safetensors_samples(dir.file("deep.safetensors")), doctest::Contains("nested deeper"),
                       RuntimeError);
  // a checkpoint's state.json
  std::filesystem::create_directories(dir.file("ck"));
  write_bytes(dir.file("ck") + "/state.json", "{\"format\": 1, \"split\": " + deep + "}");
  CHECK_THROWS_WITH(load_checkpoint(dir.file("ck"), mlp, nlohmann::json::object()), doctest::Contains("nested deeper"));
}

TEST_CASE("atomic writes replace the file whole, and a failed write leaves the old one") {
  TempDir dir;
  const std::string path = dir.file("ckpt");
  write_file_atomically(path, "first");
  write_file_atomically(path, "second");
  CHECK(read_bytes(path) == "second");
  CHECK_THROWS_AS(write_file_atomically(dir.file("no/such/dir/ckpt"), "x"), RuntimeError);
  CHECK_THROWS_WITH_AS(check_writable(dir.file("no/such/dir/ckpt"), "--save"), doctest::Contains("cannot write there"),
                       UsageError);
  CHECK_THROWS_WITH_AS(check_writable(dir.path.string(), "--save"), doctest::Contains("is a directory"), UsageError);
  check_writable(path, "--save");
  CHECK(read_bytes(path) == "second");  // checking never touches the file
  size_t files = 0;
  for ([[maybe_unused]] auto& e : std::filesystem::directory_iterator(dir.path)) ++files;
  CHECK(files == 1);  // no temporaries left behind
}

TEST_CASE("the loader: file order without shuffling, a short last batch, per-epoch shuffles") {
  Dataset d = small_dataset(10);
  SUBCASE("no shuffle: step i takes samples i*B .. (i+1)*B-1") {
    BatchLoader loader(d, 4, false, 0, 2, 0);
    CHECK(loader.total_steps() == 6);
    std::vector<int64_t> sizes;
    std::vector<int32_t> labels;
    while (auto b = loader.next()) {
      sizes.push_back(b->size);
      labels.insert(labels.end(), b->labels.begin(), b->labels.end());
    }
    CHECK(sizes == std::vector<int64_t>{4, 4, 2, 4, 4, 2});
    CHECK(labels == std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  }
  SUBCASE("normalised like MNIST") {
    BatchLoader loader(d, 10, false, 0, 1, 0);
    auto b = loader.next();
    REQUIRE(b);
    CHECK(b->images[1] == doctest::Approx((31 / 255.0 - 0.1307) / 0.3081));
  }
  SUBCASE("shuffles are permutations, differ between epochs, repeat for a seed") {
    auto epochs = [&](uint64_t seed) {
      BatchLoader loader(d, 10, true, seed, 2, 0);
      std::vector<std::vector<int32_t>> out;
      while (auto b = loader.next()) out.push_back(b->labels);
      return out;
    };
    auto a = epochs(5), again = epochs(5), other = epochs(6);
    REQUIRE(a.size() == 2);
    CHECK(std::set<int32_t>(a[0].begin(), a[0].end()).size() == 10);
    CHECK(a[0] != a[1]);
    CHECK(a == again);
    CHECK(a != other);
  }
  SUBCASE("max steps stops early") {
    BatchLoader loader(d, 3, true, 1, 5, 4);
    int n = 0;
    while (loader.next()) ++n;
    CHECK(n == 4);
  }
}

TEST_CASE("under mpirun's shards, process r's sample j is sample j*stride + offset of one process's batch (placement)") {
  Dataset d = small_dataset(24);
  for (size_t i = 0; i < d.labels.size(); ++i) d.labels[i] = static_cast<uint8_t>(i);  // naming each sample
  for (bool shuffle : {false, true}) {
    CAPTURE(shuffle);
    BatchLoader whole(d, 12, shuffle, 7, 1, 0);  // one process, 2 steps of 12
    CHECK(whole.placement().stride == 1);
    CHECK(whole.placement().offset == 0);
    std::vector<std::vector<int32_t>> one;
    while (auto b = whole.next()) one.push_back(b->labels);
    for (int rank = 0; rank < 3; ++rank) {
      BatchLoader mine(d, 4, shuffle, 7, 1, 0, false, 0, Shard{rank, 3});  // 3 processes of 4
      const SamplePlacement at = mine.placement();
      for (size_t step = 0; step < one.size(); ++step) {
        const auto b = mine.next();
        REQUIRE(b);
        for (int64_t j = 0; j < b->size; ++j)
          CHECK(b->labels[static_cast<size_t>(j)] == one[step][static_cast<size_t>(j * at.stride + at.offset)]);
      }
    }
  }
}

TEST_CASE("the generated dataset is deterministic and covers every class") {
  TrainTest a = generate_dataset(200, 50, 1234), b = generate_dataset(200, 50, 1234);
  CHECK(a.train.images == b.train.images);
  CHECK(a.test.labels == b.test.labels);
  CHECK(std::set<uint8_t>(a.train.labels.begin(), a.train.labels.end()).size() == 10);
}

TEST_CASE("device specs") {
  CHECK(parse_device_spec("host:4").host_count == 4);
  CHECK(parse_device_spec("auto").kind == DeviceSpec::Kind::Auto);
  CHECK(parse_device_spec("cuda").all_gpus);
  CHECK(parse_device_spec("cuda:0,1").cuda_gpus == std::vector<int>{0, 1});
  CHECK(parse_device_spec("cuda:0x4").cuda_gpus == std::vector<int>{0, 0, 0, 0});
  CHECK(parse_device_spec("cuda:0x2,1x2").cuda_gpus == std::vector<int>{0, 0, 1, 1});
  for (const char* bad : {"host:0", "host:-1", "host:x", "host:", "cuda:", "cuda:a", "cuda:0x0", "cuda:-1", "tpu",
                          "host:65", "cuda:0,", ""}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_device_spec(bad), UsageError);
  }
}

TEST_CASE("atomic writes follow symlinks, keep modes, refuse special files, same files are caught") {
  namespace fs = std::filesystem;
  TempDir dir;
  const std::string target = dir.file("target"), link = dir.file("link");
  write_file_atomically(target, "one");
  fs::permissions(target, fs::perms::owner_read | fs::perms::owner_write);
  fs::create_symlink("target", link);
  write_file_atomically(link, "two");
  CHECK(fs::is_symlink(link));
  CHECK(read_bytes(target) == "two");
  CHECK((fs::status(target).permissions() & fs::perms::all) == (fs::perms::owner_read | fs::perms::owner_write));
  CHECK(resolve_output(link, "--x") == dir.file("target"));
  // A private null device and a pipe (never the system's /dev/null: a regression would replace it).
  if (::mknod(dir.file("null").c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) {
    CHECK_THROWS_WITH_AS(check_writable(dir.file("null"), "--save"), doctest::Contains("is a character device"),
                         UsageError);
    CHECK_THROWS_AS(write_file_atomically(dir.file("null"), "x"), RuntimeError);
    CHECK(fs::is_character_file(dir.file("null")));
  }
  REQUIRE(::mkfifo(dir.file("pipe").c_str(), 0600) == 0);
  CHECK_THROWS_WITH_AS(check_writable(dir.file("pipe"), "--save"), doctest::Contains("is a named pipe"), UsageError);
  CHECK_THROWS_WITH_AS(check_writable(dir.path.string(), "--save"), doctest::Contains("is a directory"), UsageError);
  CHECK_THROWS_WITH_AS(check_writable("", "--save"), doctest::Contains("empty path"), UsageError);
  fs::create_hard_link(target, dir.file("hard"));
  CHECK_THROWS_WITH_AS(check_distinct_files({{"--save", dir.file("hard")}}, {{"--init", link}}),
                       doctest::Contains("same file as --init"), UsageError);
  CHECK_THROWS_WITH_AS(check_distinct_files({{"--json", dir.file("new")}, {"--svg", dir.file("./new")}}, {}),
                       doctest::Contains("--json and --svg name the same file"), UsageError);
  CHECK_NOTHROW(check_distinct_files({{"--json", dir.file("a")}, {"--svg", dir.file("b")}}, {{"--init", target}}));
  for (const auto& e : fs::directory_iterator(dir.path))
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);  // no temporaries left
}

TEST_CASE("an output onto a file an input folder reads through a link is refused, a new file in it is not") {
  namespace fs = std::filesystem;
  TempDir dir;
  const fs::path outside = dir.path / "photos", data = dir.path / "data";
  fs::create_directories(outside / "cats");
  fs::create_directories(data / "train");
  write_file_atomically((outside / "cats" / "1.jpg").string(), "jpeg");
  fs::create_symlink(outside / "cats" / "1.jpg", data / "train" / "1.jpg");  // a file linked in
  fs::create_directory_symlink(outside / "cats", data / "train" / "cats");   // a class folder linked in
  fs::create_directory_symlink(data, data / "train" / "loop");               // a cycle: walked once
  fs::create_symlink(outside / "cats" / "1.jpg", dir.path / "elsewhere.jpg");
  fs::create_hard_link(outside / "cats" / "1.jpg", dir.path / "hard.jpg");
  const std::vector<NamedPath> folders{{"--data", data.string()}};
  const std::string refused = "in --data " + data.string() + ": writing it would destroy an input";
  for (const auto& out : {data / "train" / "1.jpg", data / "train" / "cats" / "1.jpg", dir.path / "elsewhere.jpg",
                          dir.path / "hard.jpg"})
    CHECK_THROWS_WITH_AS(check_outside_folders({{"--html", out.string()}}, folders), doctest::Contains(refused.c_str()),
                         UsageError);
  CHECK_THROWS_WITH_AS(check_outside_folders({{"--html", (dir.path / "hard.jpg").string()}}, folders),
                       doctest::Contains("is train/"), UsageError);  // names the file in the folder
  CHECK_NOTHROW(check_outside_folders({{"--html", (data / "new.html").string()}}, folders));
  write_file_atomically((dir.path / "other.html").string(), "mine");
  CHECK_NOTHROW(check_outside_folders({{"--html", (dir.path / "other.html").string()}}, folders));
  CHECK(read_bytes((outside / "cats" / "1.jpg").string()) == "jpeg");
}

}  // namespace test_io
