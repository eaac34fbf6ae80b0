// Finite-difference gradient checks for every layer and the loss (Caffe's GradientChecker
// idea): with L = Σ out·R for a random R, backward(R) must match (L(θ+ε) − L(θ−ε)) / 2ε for
// inputs and parameters, evaluated in double.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>
#include <string>

#include "core/error.hpp"
#include "engine/data_parallel.hpp"
#include "core/thread_pool.hpp"
#include "helpers.hpp"
#include "kernels/ops/cosine_attention.hpp"
#include "kernels/ops/dropout.hpp"
#include "kernels/ops/linear.hpp"
#include "kernels/ops/loss.hpp"
#include "kernels/ops/relative_position.hpp"
#include "kernels/ops/sgd.hpp"
#include "kernels/ops/window_partition.hpp"
#include "models/graph/attention_layout.hpp"
#include "models/graph/graph_module.hpp"
#include "models/graph/model_file.hpp"
#include "models/graph/graph_ops.hpp"
#include "models/graph/tensor_ops.hpp"
#include "models/model.hpp"

namespace test_layers {  // one namespace a file: unity builds compile several files as one

using namespace dp;
using namespace dp::test;

namespace {

// Flat storage for a module's whole subtree, laid out as a model's (aligned entries, dotted
// names), with random values: what a replica binds.
struct Bound {
  ModelLayout layout;
  Tensor params, grads, buffers;
};

Bound bind_random(Module& m, Device& dev, uint64_t seed) {
  Bound b{ModelLayout::of(m), {}, {}, {}};
  std::vector<float> p(static_cast<size_t>(b.layout.parameter_count), 0.f);
  std::vector<float> buf(static_cast<size_t>(b.layout.buffer_count), 0.f);
  for (const auto& e : b.layout.entries) {
    auto v = random_vector(static_cast<size_t>(numel(e.shape)), ++seed, -0.5f, 0.5f);
    const std::string suffix = e.name.substr(e.name.rfind('.') + 1);
    if (suffix == "weight" && e.decl.init == ParamDecl::Init::Ones)  // BN gamma: keep it away from 0
      for (auto& x : v) x += 1.f;
    if (suffix == "running_var")
      for (auto& x : v) x = std::abs(x) + 0.5f;
    std::copy(v.begin(), v.end(), (e.buffer() ? buf : p).begin() + e.offset);
  }
  b.params = tensor_from(dev, {b.layout.parameter_count}, p, MemCategory::Parameters);
  b.grads = Tensor::zeros(dev, {b.layout.parameter_count}, MemCategory::Gradients);
  b.buffers = tensor_from(dev, {b.layout.buffer_count}, buf, MemCategory::Parameters);
  const auto leaves = param_modules(m);
  std::vector<std::vector<Tensor>> values(leaves.size()), grads(leaves.size());
  for (const auto& e : b.layout.entries) {
    values[e.leaf].push_back((e.buffer() ? b.buffers : b.params).slice_flat(e.offset, e.shape));
    grads[e.leaf].push_back(e.buffer() ? Tensor() : b.grads.slice_flat(e.offset, e.shape));
  }
  for (size_t i = 0; i < leaves.size(); ++i) leaves[i]->bind(values[i], grads[i]);
  return b;
}

double weighted_sum(const Tensor& out, const std::vector<float>& r) {
  double s = 0;
  for (int64_t i = 0; i < out.numel(); ++i) s += static_cast<double>(out.data()[i]) * r[static_cast<size_t>(i)];
  return s;
}

// Perturbs up to `samples` entries of `x` and compares with the analytic gradient `g`.
void check_entries(const std::string& what, float* x, const float* g, int64_t n, const std::function<double()>& loss,
                   float eps, double tol) {
  const int64_t step = std::max<int64_t>(1, n / 40);
  for (int64_t i = 0; i < n; i += step) {
    const float saved = x[i];
    x[i] = saved + eps;
    const double up = loss();
    x[i] = saved - eps;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2.0 * eps);
    INFO(what << "[" << i << "]: analytic " << g[i] << ", numeric " << numeric);
    CHECK(std::abs(numeric - g[i]) <= tol * std::max(1.0, std::abs(numeric)));
  }
}

// With L = Σ out·R for a random R, backward(R) must match (L(θ+ε) − L(θ−ε)) / 2ε for the input
// and every parameter entry of the module's subtree, a leaf or a container alike.
void gradcheck(Module& layer, Shape in_shape, std::vector<float> input, bool check_input = true, float eps = 1e-2f,
               double tol = 1e-2) {
  auto devs = host_devices(1);
  Device& dev = devs[0];
  Bound b = bind_random(layer, dev, 42);
  Tensor in = tensor_from(dev, in_shape, input);
  Tensor out = layer.forward(dev, in, true);
  Shape per_sample(in_shape.begin() + 1, in_shape.end()), out_per_sample(out.shape().begin() + 1, out.shape().end());
  CHECK(layer.output_shape(per_sample) == out_per_sample);
  auto r = random_vector(static_cast<size_t>(out.numel()), 7);
  Tensor dout = tensor_from(dev, out.shape(), r);
  Tensor din = layer.backward(dev, dout, check_input);
  auto loss = [&] {
    Tensor o = layer.forward(dev, in, true);
    layer.clear_cache();
    return weighted_sum(o, r);
  };
  if (check_input) {
    REQUIRE(din.defined());
    CHECK(din.shape() == in.shape());
    std::vector<float> g = to_vector(din);
    check_entries("input", in.data(), g.data(), in.numel(), loss, eps, tol);
  } else {
    CHECK(!din.defined());
  }
  const std::vector<float> grads = to_vector(b.grads);
  for (const auto& e : b.layout.entries) {
    if (e.buffer()) continue;
    check_entries(e.name, b.params.data() + e.offset, grads.data() + e.offset, numel(e.shape), loss, eps, tol);
  }
  layer.clear_cache();
  for (Module* m : param_modules(layer)) m->bind({}, {});  // the module outlives this function's devices
}

// Three samples of four token ids (repeats, every position) for a token model's checks.
Tensor token_ids(Device& dev, std::vector<int32_t> values = {1, 5, 5, 0, 10, 2, 1, 1, 3, 4, 0, 6}) {
  Tensor ids = Tensor::empty(dev, {3, 4}, MemCategory::Inputs, DType::I32);
  std::copy(values.begin(), values.end(), ids.data<int32_t>());
  return ids;
}

// A token model's parameter gradients (m bound as b) against finite differences of a random
// weighting of its output on `ids`; returns that output (a training forward).
Tensor check_token_gradients(Module& m, Device& dev, const Bound& b, const Tensor& ids, uint64_t seed) {
  Tensor out = m.forward(dev, ids, true);
  const auto r = random_vector(static_cast<size_t>(out.numel()), seed);
  CHECK_FALSE(m.backward(dev, tensor_from(dev, out.shape(), r), false).defined());
  auto loss = [&] {
    Tensor o = m.forward(dev, ids, true);
    m.clear_cache();
    return weighted_sum(o, r);
  };
  const std::vector<float> grads = to_vector(b.grads);
  for (const auto& e : b.layout.entries)
    if (!e.buffer())
      check_entries(e.name, b.params.data() + e.offset, grads.data() + e.offset, numel(e.shape), loss, 1e-3f, 1e-2);
  return out;
}

// A hand-made model file's graph ("test.json", input "x" of this per-sample shape), and its nodes.
std::shared_ptr<GraphSpec> graph_spec(Shape input) {
  auto spec = std::make_shared<GraphSpec>();
  spec->path = "test.json", spec->name = "test", spec->input_name = "x", spec->input_shape = std::move(input);
  return spec;
}
int add_node(GraphSpec& spec, std::string name, std::string op, std::string module, std::vector<int> in,
             nlohmann::json attrs, Shape shape) {
  spec.nodes.push_back({std::move(name), std::move(op), std::move(module), std::move(in), std::move(attrs),
                        std::move(shape), ""});
  return static_cast<int>(spec.nodes.size()) - 1;
}

}  // namespace

TEST_CASE("Linear gradients match finite differences") {
  auto layer = make_linear(7, 5);
  gradcheck(*layer, {4, 7}, random_vector(28, 1));
}

TEST_CASE("Linear with padded output rows: the plain Linear's outputs and zero columns past them, its gradients, "
          "the padding never read") {
  const int64_t B = 6, I = 7, O = 5, W = 8;
  for (const bool bias : {true, false}) {
    CAPTURE(bias);
    auto plain = make_linear(I, O, bias, 0);
    auto padded = make_linear_with_padded_rows(I, O, W, bias, 0);
    CHECK(padded->output_shape({3, I}) == Shape{3, W});
    CHECK(padded->describe() == plain->describe());  // the user's Linear: the padding is storage
    CHECK(ModelLayout::of(*padded).parameter_count == ModelLayout::of(*plain).parameter_count);
    auto devs = host_devices(1);
    Device& dev = devs[0];
    Bound bp = bind_random(*plain, dev, 5), bw = bind_random(*padded, dev, 5);  // the same values
    const Tensor in = tensor_from(dev, {B, I}, random_vector(B * I, 6));
    const auto y = to_vector(plain->forward(dev, in, true)), yw = to_vector(padded->forward(dev, in, true));
    REQUIRE(yw.size() == static_cast<size_t>(B * W));
    const auto dy = random_vector(B * O, 8);
    std::vector<float> dyw(static_cast<size_t>(B * W), NAN);  // NaN in the padding: a read of it would show
    for (int64_t r = 0; r < B; ++r)
      for (int64_t j = 0; j < W; ++j) {
        const auto at = static_cast<size_t>(r * W + j);
        if (j < O) {
          CHECK(yw[at] == y[static_cast<size_t>(r * O + j)]);
          dyw[at] = dy[static_cast<size_t>(r * O + j)];
        } else {
          CHECK(yw[at] == 0.f);
        }
      }
    const auto dx = to_vector(plain->backward(dev, tensor_from(dev, {B, O}, dy), true));
    const auto dxw = to_vector(padded->backward(dev, tensor_from(dev, {B, W}, dyw), true));
    CHECK(dxw == dx);
    CHECK(to_vector(bw.grads) == to_vector(bp.grads));
    for (Module* m : {plain.get(), padded.get()}) m->bind({}, {});
    gradcheck(*padded, {4, I}, random_vector(4 * I, 9));
  }
  CHECK_THROWS_WITH_AS(make_linear_with_padded_rows(I, O, O - 1, false, 0), doctest::Contains("cannot hold"),
                       RuntimeError);
  // The op itself: a stride under the columns refused by name before anything runs.
  auto devs = host_devices(1);
  const Tensor x = tensor_from(devs[0], {B, I}, random_vector(B * I, 10));
  const Tensor w = tensor_from(devs[0], {O, I}, random_vector(O * I, 11));
  Tensor y = Tensor::empty(devs[0], {B, W}, MemCategory::Activations);
  CHECK_THROWS_WITH_AS(linear_forward(devs[0].exec(), y.buf(), x.buf(), w.buf(), Buf{}, B, I, O, O - 1),
                       doctest::Contains("linear_forward: rows 4 apart hold no 5 columns"), RuntimeError);
}

TEST_CASE("Conv2d gradients match finite differences (padding, stride)") {
  SUBCASE("3x3, stride 1, padding 1") {
    auto layer = make_conv2d(2, 3, 3, 1, 1);
    gradcheck(*layer, {2, 2, 5, 6}, random_vector(120, 2));
  }
  SUBCASE("5x5, stride 2, padding 2") {
    auto layer = make_conv2d(3, 2, 5, 2, 2);
    gradcheck(*layer, {2, 3, 7, 7}, random_vector(294, 3));
  }
  SUBCASE("first layer: no input gradient asked for") {
    auto layer = make_conv2d(1, 2, 3, 1, 0);
    gradcheck(*layer, {3, 1, 5, 5}, random_vector(75, 4), false);
  }
  SUBCASE("groups 2, stride 1, padding 1") {
    auto layer = make_conv2d(4, 6, 3, 1, 1, true, WeightInit::PyTorchDefault, 2);
    CHECK(layer->params()[0].shape == Shape{6, 2, 3, 3});
    gradcheck(*layer, {2, 4, 5, 5}, random_vector(200, 5));
  }
  SUBCASE("depthwise (groups = channels), stride 2: MobileNetV2's") {
    auto layer = make_conv2d(3, 3, 3, 2, 1, false, WeightInit::PyTorchDefault, 3);
    gradcheck(*layer, {2, 3, 7, 6}, random_vector(252, 6));
  }
  SUBCASE("dilation 2 with groups 2, stride 2") {
    auto layer = make_conv2d(2, 4, 3, 2, 2, true, WeightInit::PyTorchDefault, 2, 2);
    CHECK(layer->output_shape({2, 9, 8}) == Shape{4, 5, 4});  // (9 + 4 - 5) / 2 + 1, (8 + 4 - 5) / 2 + 1
    gradcheck(*layer, {2, 2, 9, 8}, random_vector(288, 7));
  }
}

TEST_CASE("Conv2d with a kernel and padding of their own height and width (Inception's 1x7, 7x1): a direct sum, and finite differences") {
  auto devs = host_devices(1);
  Device& dev = devs[0];
  struct Case {
    int64_t kh, kw, stride, ph, pw;
  };
  for (const Case& k : {Case{1, 3, 1, 0, 1}, Case{3, 1, 1, 1, 0}, Case{2, 3, 2, 1, 0}, Case{1, 7, 1, 0, 3}}) {
    INFO("kernel ", k.kh, "x", k.kw, ", stride ", k.stride, ", padding ", k.ph, ",", k.pw);
    const int64_t N = 2, C = 2, H = 5, W = 8, K = 3;
    auto layer = make_conv2d(C, K, {k.kh, k.kw}, k.stride, {k.ph, k.pw});
    CHECK(layer->params()[0].shape == Shape{K, C, k.kh, k.kw});
    const int64_t OH = (H + 2 * k.ph - k.kh) / k.stride + 1, OW = (W + 2 * k.pw - k.kw) / k.stride + 1;
    REQUIRE(layer->output_shape({C, H, W}) == Shape{K, OH, OW});
    gradcheck(*layer, {N, C, H, W}, random_vector(static_cast<size_t>(N * C * H * W), 41));
    // Forward against the definition, from random weights (the flat array: the weight, then the bias).
    const Bound bound = bind_random(*layer, dev, 13);
    const auto params = to_vector(bound.params);
    const auto& entries = bound.layout.entries;
    const std::vector<float> w(params.begin() + entries[0].offset, params.begin() + entries[0].offset + K * C * k.kh * k.kw),
        b(params.begin() + entries[1].offset, params.begin() + entries[1].offset + K);
    const auto x = random_vector(static_cast<size_t>(N * C * H * W), 42);
    const auto y = to_vector(layer->forward(dev, tensor_from(dev, {N, C, H, W}, x), true));
    layer->clear_cache();
    double worst = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t o = 0; o < K; ++o)
        for (int64_t oh = 0; oh < OH; ++oh)
          for (int64_t ow = 0; ow < OW; ++ow) {
            double sum = b[static_cast<size_t>(o)];
            for (int64_t c = 0; c < C; ++c)
              for (int64_t i = 0; i < k.kh; ++i)
                for (int64_t j = 0; j < k.kw; ++j) {
                  const int64_t ih = oh * k.stride - k.ph + i, iw = ow * k.stride - k.pw + j;
                  if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                  sum += double(w[static_cast<size_t>(((o * C + c) * k.kh + i) * k.kw + j)]) *
                         x[static_cast<size_t>(((n * C + c) * H + ih) * W + iw)];
                }
            worst = std::max(worst, std::abs(sum - y[static_cast<size_t>(((n * K + o) * OH + oh) * OW + ow)]));
          }
    CHECK(worst < 1e-5);
    for (Module* m : param_modules(*layer)) m->bind({}, {});  // the module outlives the devices' tensors
  }
}

TEST_CASE("Conv2d with groups is its groups' convolutions side by side") {
  // groups = 2 against two convolutions of half the channels each on the two halves.
  auto devs = host_devices(1);
  Device& dev = devs[0];
  auto grouped = make_conv2d(4, 6, 3, 1, 1, false, WeightInit::PyTorchDefault, 2);
  auto half = make_conv2d(2, 3, 3, 1, 1, false);
  const auto w = random_vector(6 * 2 * 9, 8), x = random_vector(2 * 4 * 25, 9);
  Tensor wt = tensor_from(dev, {6, 2, 3, 3}, w), in = tensor_from(dev, {2, 4, 5, 5}, x);
  grouped->bind({wt}, {Tensor()});
  const std::vector<float> out = to_vector(grouped->forward(dev, in, false));
  for (int g = 0; g < 2; ++g) {
    std::vector<float> wg(w.begin() + g * 54, w.begin() + (g + 1) * 54), xg;
    for (int n = 0; n < 2; ++n) xg.insert(xg.end(), x.begin() + (n * 4 + 2 * g) * 25, x.begin() + (n * 4 + 2 * g + 2) * 25);
    Tensor wgt = tensor_from(dev, {3, 2, 3, 3}, wg), ing = tensor_from(dev, {2, 2, 5, 5}, xg);
    half->bind({wgt}, {Tensor()});
    const std::vector<float> part = to_vector(half->forward(dev, ing, false));
    for (int n = 0; n < 2; ++n)
      for (int i = 0; i < 75; ++i) CHECK(out[(n * 6 + 3 * g) * 25 + i] == doctest::Approx(part[n * 75 + i]).epsilon(1e-6));
    half->bind({}, {});
  }
  grouped->bind({}, {});
}

TEST_CASE("Conv2d without bias, and ResNet's strided convolutions") {
  SUBCASE("3x3, stride 2, padding 1, no bias") {
    auto layer = make_conv2d(3, 4, 3, 2, 1, false, WeightInit::KaimingNormalFanOut);
    CHECK(layer->params().size() == 1);
    gradcheck(*layer, {2, 3, 7, 6}, random_vector(252, 11));
  }
  SUBCASE("1x1, stride 2 (a downsample), no bias") {
    auto layer = make_conv2d(4, 6, 1, 2, 0, false);
    gradcheck(*layer, {3, 4, 5, 5}, random_vector(300, 12));
  }
}

TEST_CASE("AdaptiveAvgPool2d to 1x1: each channel's mean, gradient spread evenly") {
  auto layer = make_adaptive_avgpool2d_1x1();
  gradcheck(*layer, {2, 3, 4, 5}, random_vector(120, 13));
  auto devs = host_devices(1);
  Tensor in = tensor_from(devs[0], {1, 2, 1, 3}, {1.f, 2.f, 6.f, -1.f, -2.f, 0.f});
  Tensor out = layer->forward(devs[0], in, true);
  CHECK(out.shape() == Shape{1, 2, 1, 1});
  CHECK(out.data()[0] == doctest::Approx(3.f));
  CHECK(out.data()[1] == doctest::Approx(-1.f));
  Tensor g = layer->backward(devs[0], tensor_from(devs[0], {1, 2, 1, 1}, {3.f, -6.f}), true);
  CHECK(to_vector(g) == std::vector<float>{1.f, 1.f, 1.f, -2.f, -2.f, -2.f});
}

// Steps of 1e-3 and below here: with ReLUs after convolutions, a larger step moves some
// pre-activations across zero, and the difference quotient then measures the kink, not the slope.
TEST_CASE("BasicBlock gradients match finite differences, residual path included") {
  SUBCASE("with downsample (stride 2, more channels) and BatchNorm") {
    auto block = make_basic_block(2, 4, 2);
    gradcheck(*block, {3, 2, 6, 6}, random_vector(216, 14, -2.f, 2.f), true, 1e-3f, 2e-2);
  }
  SUBCASE("identity shortcut, no BatchNorm") {
    auto block = make_basic_block(3, 3, 1, false);
    gradcheck(*block, {2, 3, 5, 5}, random_vector(150, 15), true, 1e-3f);
  }
  SUBCASE("as the first module: no input gradient") {
    auto block = make_basic_block(2, 3, 1, false);
    gradcheck(*block, {2, 2, 4, 4}, random_vector(64, 16), false, 1e-3f);
  }
}

TEST_CASE("A residual network end to end: gradients of every parameter") {
  auto net = make_resnet_without_batchnorm_for_tests(5);
  gradcheck(*net, {2, 3, 8, 8}, random_vector(384, 17), true, 2e-4f, 2e-2);
}

TEST_CASE("the op table: each op once, each made by a module or an op of several inputs, all named when one is unknown") {
  std::set<std::string> names;
  for (const GraphOp& op : graph_ops()) {
    CAPTURE(op.name);
    CHECK(names.insert(op.name).second);
    CHECK((op.module != nullptr || op.multi != nullptr));
    CHECK(find_graph_op(op.name) == &op);
  }
  CHECK(find_graph_op("swish") == nullptr);
  CHECK(graph_op_names().size() == graph_ops().size());
  CHECK(graph_op_names().front() == "linear");
  CHECK(graph_op_names().back() == "arange");
  GraphNode unknown;
  unknown.name = "act", unknown.op = "swish", unknown.inputs = {-1};
  uint32_t site = 0;
  CHECK(make_node_module(unknown, site) == nullptr);  // not a module: the op of several inputs says
  std::string all;
  for (const std::string& n : graph_op_names()) all += (all.empty() ? "" : ", ") + n;
  const std::string message = "unknown op 'swish' (dp runs " + all + ")";
  CHECK_THROWS_WITH_AS(make_multi_input_op(unknown, site), doctest::Contains(message.c_str()), UsageError);
  // The two forms of embedding: of ids (a module), of a weight value (two inputs: EmbeddingOf).
  GraphNode table_of_ids;
  table_of_ids.op = "embedding", table_of_ids.inputs = {-1};
  table_of_ids.attrs = {{"num_embeddings", 10}, {"embedding_dim", 4}};
  CHECK(make_node_module(table_of_ids, site) != nullptr);
  GraphNode of_weight = table_of_ids;
  of_weight.inputs = {-1, 0};
  CHECK(make_node_module(of_weight, site) == nullptr);
  CHECK(make_multi_input_op(of_weight, site) != nullptr);
  // The dropout sites count in the file's order, whichever op holds one.
  GraphNode dropout;
  dropout.op = "dropout", dropout.inputs = {-1}, dropout.attrs = {{"p", 0.1}};
  site = 0;
  make_node_module(dropout, site);
  make_node_module(dropout, site);
  CHECK(site == 2);
}

TEST_CASE("A model file's graph: gradients through add, cat, reshape and a value read three times") {
  // r = relu(a(x)); s = r + b(r); k = cat(s, c(r)) along channels; fc(flatten(k)). r is read by
  // b, the add and c: its gradient sums three.
  auto spec = graph_spec({2, 5, 5});
  auto node = [&](std::string name, std::string op, std::string module, std::vector<int> in, nlohmann::json attrs,
                  Shape shape) { return add_node(*spec, name, op, module, in, attrs, shape); };
  auto conv = [](int64_t in, int64_t out) {
    return nlohmann::json{{"in_channels", in}, {"out_channels", out}, {"kernel_size", 3}, {"stride", 1},
                          {"padding", 1}, {"bias", true}};
  };
  const int a = node("a", "conv2d", "a", {-1}, conv(2, 3), {3, 5, 5});
  const int r = node("r", "relu", "", {a}, nlohmann::json::object(), {3, 5, 5});
  const int b = node("b", "conv2d", "blk.b", {r}, conv(3, 3), {3, 5, 5});
  const int s = node("s", "add", "", {r, b}, nlohmann::json::object(), {3, 5, 5});
  const int c = node("c", "conv2d", "blk.c", {r}, conv(3, 2), {2, 5, 5});
  const int k = node("k", "cat", "", {s, c}, {{"dim", 1}}, {5, 5, 5});
  const int f = node("f", "flatten", "", {k}, {{"start_dim", 1}}, {125});
  spec->output = node("fc", "linear", "fc", {f}, {{"in_features", 125}, {"out_features", 4}}, {4});
  for (const char* m : {"a", "blk.b", "blk.c"}) {
    const int64_t in = std::string(m) == "a" ? 2 : 3, out = std::string(m) == "blk.c" ? 2 : 3;
    spec->state.push_back({std::string(m) + ".weight", {out, in, 3, 3}, false});
    spec->state.push_back({std::string(m) + ".bias", {out}, false});
  }
  spec->state.push_back({"fc.weight", {4, 125}, false});
  spec->state.push_back({"fc.bias", {4}, false});
  auto graph = make_graph_module(spec);
  gradcheck(*graph, {3, 2, 5, 5}, random_vector(150, 21, -1.f, 1.f), false, 1e-3f, 2e-2);
}

TEST_CASE("A model file's graph: a mean over dimensions that are not the trailing ones (a transformer's tokens)") {
  // x: [B, 4, 3]; fc(mean(w(x), dim=1)); then [B, 2, 3, 5]: fc(flatten(mean(w(x), (1, 3), keepdim))). The
  // linear w before the mean makes its backward run (a graph takes no gradient to its input).
  {
    auto spec = graph_spec({4, 3});
    const int w = add_node(*spec, "w", "linear", "w", {-1}, {{"in_features", 3}, {"out_features", 3}}, {4, 3});
    const int m = add_node(*spec, "m", "mean", "", {w}, {{"dim", 1}}, {3});
    spec->output = add_node(*spec, "fc", "linear", "fc", {m}, {{"in_features", 3}, {"out_features", 2}}, {2});
    spec->state = {{"w.weight", {3, 3}, false}, {"w.bias", {3}, false}, {"fc.weight", {2, 3}, false},
                   {"fc.bias", {2}, false}};
    auto graph = make_graph_module(spec);
    gradcheck(*graph, {3, 4, 3}, random_vector(36, 31, -1.f, 1.f), false, 1e-3f, 2e-2);
  }
  auto spec = graph_spec({2, 3, 5});
  const int w = add_node(*spec, "w", "linear", "w", {-1}, {{"in_features", 5}, {"out_features", 5}}, {2, 3, 5});
  const int m = add_node(*spec, "m", "mean", "", {w}, {{"dim", {1, -1}}, {"keepdim", true}}, {1, 3, 1});
  const int f = add_node(*spec, "f", "flatten", "", {m}, {{"start_dim", 1}}, {3});
  spec->output = add_node(*spec, "fc", "linear", "fc", {f}, {{"in_features", 3}, {"out_features", 2}}, {2});
  spec->state = {{"w.weight", {5, 5}, false}, {"w.bias", {5}, false}, {"fc.weight", {2, 3}, false},
                 {"fc.bias", {2}, false}};
  auto graph = make_graph_module(spec);
  gradcheck(*graph, {2, 2, 3, 5}, random_vector(60, 32, -1.f, 1.f), false, 1e-3f, 2e-2);
  // The values themselves: the mean over channels and columns of each row.
  auto devs = host_devices(1);
  Device& dev = devs[0];
  auto mean_only = graph_spec({2, 3, 5});
  mean_only->output = add_node(*mean_only, "m", "mean", "", {-1}, {{"dim", {1, 3}}}, {3});
  auto g = make_graph_module(mean_only);
  const std::vector<float> x = random_vector(30, 33);
  const Tensor out = g->forward(dev, tensor_from(dev, {1, 2, 3, 5}, x), false);
  for (int r = 0; r < 3; ++r) {
    double want = 0;
    for (int c = 0; c < 2; ++c)
      for (int w = 0; w < 5; ++w) want += x[static_cast<size_t>((c * 3 + r) * 5 + w)];
    CHECK(out.data()[r] == doctest::Approx(want / 10).epsilon(1e-6));
  }
  g->clear_cache();
}

TEST_CASE("A model file's graph refuses an input of another shape than its export's, before any node runs") {
  // The file's sizes are fixed (a token file's length above all): a shorter sequence used to run
  // LayerNorm over the recorded rows and corrupt memory.
  auto spec = graph_spec({3, 4});
  spec->output = add_node(*spec, "w", "linear", "w", {-1}, {{"in_features", 4}, {"out_features", 2}}, {3, 2});
  spec->state = {{"w.weight", {2, 4}, false}, {"w.bias", {2}, false}};
  auto graph = make_graph_module(spec);
  auto devs = host_devices(1);
  Device& dev = devs[0];
  Bound b = bind_random(*graph, dev, 42);
  CHECK(graph->forward(dev, tensor_from(dev, {2, 3, 4}, random_vector(24, 1)), false).shape() == Shape{2, 3, 2});
  graph->clear_cache();
  for (const Shape& wrong : {Shape{2, 2, 4}, Shape{1, 3, 4, 1}, Shape{12}}) {
    const std::string message = "takes inputs of shape [batch, 3, 4], not " + shape_str(wrong);
    CHECK_THROWS_WITH_AS(graph->forward(dev, tensor_from(dev, wrong, random_vector(static_cast<size_t>(numel(wrong)), 2)),
                                        false),
                         doctest::Contains(message.c_str()), RuntimeError);
  }
  for (Module* m : param_modules(*graph)) m->bind({}, {});
}

TEST_CASE("A model file's graph: gradients through mean, a per-channel gate and a product of one shape") {
  // a = conv(x); s = a.mean((2, 3), keepdim); e = sigmoid(conv1x1(s)); m = a · e (per plane);
  // p = m · tanh(a) (one shape); fc(mean(p, (2, 3))).
  auto spec = graph_spec({2, 5, 4});
  auto node = [&](std::string name, std::string op, std::string module, std::vector<int> in, nlohmann::json attrs,
                  Shape shape) { return add_node(*spec, name, op, module, in, attrs, shape); };
  const nlohmann::json none = nlohmann::json::object();
  const int a = node("a", "conv2d", "a", {-1},
                     {{"in_channels", 2}, {"out_channels", 3}, {"kernel_size", 3}, {"padding", 1}}, {3, 5, 4});
  const int s = node("s", "mean", "", {a}, {{"dim", {2, 3}}, {"keepdim", true}}, {3, 1, 1});
  const int c = node("c", "conv2d", "c", {s}, {{"in_channels", 3}, {"out_channels", 3}, {"kernel_size", 1}}, {3, 1, 1});
  const int e = node("e", "sigmoid", "", {c}, none, {3, 1, 1});
  const int m = node("m", "mul", "", {e, a}, none, {3, 5, 4});  // the gate first: either order
  const int t = node("t", "tanh", "", {a}, none, {3, 5, 4});
  const int p = node("p", "mul", "", {m, t}, none, {3, 5, 4});
  const int q = node("q", "mean", "", {p}, {{"dim", {-2, -1}}}, {3});
  spec->output = node("fc", "linear", "fc", {q}, {{"in_features", 3}, {"out_features", 2}}, {2});
  spec->state = {{"a.weight", {3, 2, 3, 3}, false}, {"a.bias", {3}, false}, {"c.weight", {3, 3, 1, 1}, false},
                 {"c.bias", {3}, false},          {"fc.weight", {2, 3}, false}, {"fc.bias", {2}, false}};
  auto graph = make_graph_module(spec);
  gradcheck(*graph, {3, 2, 5, 4}, random_vector(120, 28, -1.f, 1.f), false, 1e-3f, 2e-2);
}

TEST_CASE("A model file's graph: zero padding (F.pad, a node per dimension) passes gradients back to what it "
          "pads") {
  // fc(mean(tanh(pad(pad(pad(w(x))))))): [2, 3, 4] -> rows 1 before -> columns 2 after -> channels 1 either side
  auto spec = graph_spec({2, 3, 4});
  const nlohmann::json none = nlohmann::json::object();
  auto node = [&](std::string name, std::string op, std::string module, std::vector<int> in, nlohmann::json attrs,
                  Shape shape) { return add_node(*spec, name, op, module, in, attrs, shape); };
  const int w = node("w", "linear", "w", {-1}, {{"in_features", 4}, {"out_features", 4}}, {2, 3, 4});
  const int rows = node("rows", "pad", "", {w}, {{"dim", 2}, {"before", 1}, {"after", 0}}, {2, 4, 4});
  const int cols = node("cols", "pad", "", {rows}, {{"dim", -1}, {"before", 0}, {"after", 2}}, {2, 4, 6});
  const int chans = node("chans", "pad", "", {cols}, {{"dim", 1}, {"before", 1}, {"after", 1}}, {4, 4, 6});
  const int t = node("t", "tanh", "", {chans}, none, {4, 4, 6});
  const int m = node("m", "mean", "", {t}, {{"dim", {2, 3}}}, {4});
  spec->output = node("fc", "linear", "fc", {m}, {{"in_features", 4}, {"out_features", 3}}, {3});
  spec->state = {{"w.weight", {4, 4}, false}, {"w.bias", {4}, false}, {"fc.weight", {3, 4}, false},
                 {"fc.bias", {3}, false}};
  auto graph = make_graph_module(spec);
  gradcheck(*graph, {2, 2, 3, 4}, random_vector(48, 95, -1.f, 1.f), false, 1e-3f, 1e-2);
  // the values: [2, 3] samples, a zero column before and two after (x[1][2] lands at [1][3])
  uint32_t no_dropout = 0;
  auto pad = make_node_module({"p", "pad", "", {-1}, {{"dim", 2}, {"before", 1}, {"after", 2}}, {2, 6}, ""}, no_dropout);
  REQUIRE(pad);
  auto devs = host_devices(1);
  const std::vector<float> x = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  const Tensor out = pad->forward(devs[0], tensor_from(devs[0], {2, 2, 3}, x), true);
  const std::vector<float> want = {0, 1, 2, 3, 0, 0, 0, 4, 5, 6, 0, 0, 0, 7, 8, 9, 0, 0, 0, 10, 11, 12, 0, 0};
  CHECK(to_vector(out) == want);
  const Tensor back = pad->backward(devs[0], out, true);  // the padded gradient's own entries, unpadded
  CHECK(to_vector(back) == x);
}

namespace {
// h = wte(x) + wpe(arange(4)); q, k, v = c_attn(h).split(8, 2) as [2 heads, 4, 4];
// y = dropout(softmax(causal(q @ kᵀ · 0.5))) @ v — from its ops, or (sdpa) as one
// scaled_dot_product_attention node — back to [4, 8] (contiguous: through an identity, as
// .contiguous() exports); log_softmax(c_proj(y)).
std::shared_ptr<GraphSpec> nanogpt_attention_graph(bool sdpa, double dropout = 0, bool contiguous = false) {
  auto spec = graph_spec({4});
  spec->tokens = true;
  const nlohmann::json none = nlohmann::json::object();
  auto node = [&](std::string name, std::string op, std::string module, std::vector<int> in, nlohmann::json attrs,
                  Shape shape) { return add_node(*spec, name, op, module, in, attrs, shape); };
  const int tok = node("tok", "embedding", "wte", {-1}, {{"num_embeddings", 11}, {"embedding_dim", 8}}, {4, 8});
  const int pos = node("pos", "arange", "", {}, {{"end", 4}}, {4});  // no batch dimension: whole shapes
  const int pe = node("pe", "embedding", "wpe", {pos}, {{"num_embeddings", 6}, {"embedding_dim", 8}}, {4, 8});
  const int h = node("h", "add", "", {pe, tok}, none, {4, 8});  // the value without the batch first: either order
  const int qkv = node("qkv", "linear", "c_attn", {h}, {{"in_features", 8}, {"out_features", 24}}, {4, 24});
  auto heads = [&](const char* name, int64_t start) {
    const int part = node(std::string(name) + "_part", "narrow", "", {qkv}, {{"dim", 2}, {"start", start}, {"length", 8}},
                          {4, 8});
    const int v = node(std::string(name) + "_view", "reshape", "", {part}, none, {4, 2, 4});
    return node(name, "permute", "", {v}, {{"dims", {0, 2, 1, 3}}}, {2, 4, 4});
  };
  const int q = heads("q", 0), k = heads("k", 8), v = heads("v", 16);
  int y = -1;
  if (sdpa) {  // F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True): one node
    y = node("y", "scaled_dot_product_attention", "", {q, k, v},
             {{"is_causal", true}, {"dropout_p", dropout}, {"scale", nullptr}}, {2, 4, 4});
  } else {
    const int kt = node("kt", "permute", "", {k}, {{"dims", {0, 1, -1, -2}}}, {2, 4, 4});
    const int s = node("s", "matmul", "", {q, kt}, none, {2, 4, 4});
    const int sc = node("sc", "scale", "", {s}, {{"factor", 0.5}}, {2, 4, 4});
    const int m = node("m", "masked_fill", "", {sc}, {{"mask", "causal"}, {"value", "-inf"}}, {2, 4, 4});
    int p = node("p", "softmax", "", {m}, {{"dim", -1}}, {2, 4, 4});
    if (dropout > 0) p = node("pd", "dropout", "", {p}, {{"p", dropout}}, {2, 4, 4});
    y = node("y", "matmul", "", {p, v}, none, {2, 4, 4});
  }
  int yt = node("yt", "permute", "", {y}, {{"dims", {0, 2, 1, 3}}}, {4, 2, 4});
  if (contiguous) yt = node("yc", "identity", "", {yt}, none, {4, 2, 4});
  const int yr = node("yr", "reshape", "", {yt}, none, {4, 8});
  const int o = node("o", "linear", "c_proj", {yr}, {{"in_features", 8}, {"out_features", 8}}, {4, 8});
  spec->output = node("ls", "log_softmax", "", {o}, {{"dim", -1}}, {4, 8});
  spec->state = {{"wte.weight", {11, 8}, false},   {"wpe.weight", {6, 8}, false},     {"c_attn.weight", {24, 8}, false},
                 {"c_attn.bias", {24}, false},     {"c_proj.weight", {8, 8}, false},  {"c_proj.bias", {8}, false}};
  return spec;
}
}  // namespace

TEST_CASE("A model file's graph: nanoGPT's attention from its ops (split, views, permute, matmul, scale, causal masked_fill, softmax), positions and log_softmax: gradients match finite differences") {
  auto spec = nanogpt_attention_graph(false);
  auto graph = make_graph_module(spec);

  auto devs = host_devices(1);
  Device& dev = devs[0];
  Bound b = bind_random(*graph, dev, 91);
  Tensor ids = token_ids(dev);
  Tensor out = check_token_gradients(*graph, dev, b, ids, 92);
  REQUIRE(out.shape() == Shape{3, 4, 8});
  for (int64_t r = 0; r < 12; ++r) {  // log-probabilities: each row's exponentials sum to 1
    double sum = 0;
    for (int64_t j = 0; j < 8; ++j) sum += std::exp(static_cast<double>(out.data()[r * 8 + j]));
    CHECK(sum == doctest::Approx(1.0).epsilon(1e-5));
  }
  // Causal: a later token never changes an earlier position's output.
  Tensor before = graph->forward(dev, ids, false);
  graph->clear_cache();
  const std::vector<float> first = to_vector(before);
  ids.data<int32_t>()[3] = 9;  // sample 0's last token
  Tensor after = graph->forward(dev, ids, false);
  graph->clear_cache();
  const std::vector<float> second = to_vector(after);
  for (int64_t i = 0; i < 3 * 8; ++i) CHECK(first[static_cast<size_t>(i)] == second[static_cast<size_t>(i)]);
  CHECK(first[3 * 8] != second[3 * 8]);
  for (Module* mod : param_modules(*graph)) mod->bind({}, {});
}

TEST_CASE("A model file's graph: F.scaled_dot_product_attention as one node gives its ops' outputs and gradients "
          "(causal, dropout's masks too), matches finite differences, and refuses what it cannot run") {
  auto devs = host_devices(1);
  Device& dev = devs[0];
  for (const double dropout : {0.0, 0.3}) {
    CAPTURE(dropout);
    auto ops = make_graph_module(nanogpt_attention_graph(false, dropout));
    auto node = make_graph_module(nanogpt_attention_graph(true, dropout));
    Bound bo = bind_random(*ops, dev, 93), bn = bind_random(*node, dev, 93);  // the same values
    const Tensor ids = token_ids(dev);
    const auto yo = to_vector(ops->forward(dev, ids, true)), yn = to_vector(node->forward(dev, ids, true));
    CHECK(test::worst_relative(yn, yo) < 1e-6);
    const auto r = random_vector(yo.size(), 94);
    ops->backward(dev, tensor_from(dev, {3, 4, 8}, r), false);
    node->backward(dev, tensor_from(dev, {3, 4, 8}, r), false);
    CHECK(test::worst_relative(to_vector(bn.grads), to_vector(bo.grads)) < 1e-5);
    if (dropout == 0) check_token_gradients(*node, dev, bn, ids, 95);
    for (Module* m : {ops.get(), node.get()}) {
      m->clear_cache();
      for (Module* leaf : param_modules(*m)) leaf->bind({}, {});
    }
  }
  auto refused = [](nlohmann::json attrs, std::vector<int> inputs_of_qkv, const char* why) {
    auto spec = graph_spec({2, 4, 4});
    const nlohmann::json none = nlohmann::json::object();
    const int x = add_node(*spec, "x", "identity", "", {-1}, none, {2, 4, 4});
    const int half = add_node(*spec, "half", "narrow", "", {-1}, {{"dim", 3}, {"start", 0}, {"length", 2}}, {2, 4, 2});
    std::vector<int> in;
    for (int i : inputs_of_qkv) in.push_back(i == 0 ? x : half);
    spec->output = add_node(*spec, "y", "scaled_dot_product_attention", "", in, attrs, {2, 4, 4});
    CHECK_THROWS_WITH_AS(make_graph_module(spec), doctest::Contains(why), UsageError);
  };
  refused({{"is_causal", true}}, {0, 0, 1}, "of one shape [heads, T, E]");
  refused({{"is_causal", true}}, {0, 0}, "reads query, key and value");
  refused({{"dropout_p", 1.5}}, {0, 0, 0}, "dropout_p must be in [0, 1)");
  refused({{"is_causal", 1}}, {0, 0, 0}, "\"is_causal\" is not true or false");
}

TEST_CASE("A model file's attention read where c_attn writes it: the folded graph gives the file's outputs and "
          "gradients (dropout's masks, the fused kernels too), and a chain that differs anywhere stays as it is") {
  auto devs = host_devices(1);
  Device& dev = devs[0];
  for (const bool contiguous : {false, true})
    for (const double dropout : {0.0, 0.3})
      for (const bool fused : {false, true}) {
        CAPTURE(contiguous);
        CAPTURE(dropout);
        CAPTURE(fused);
        auto spec = nanogpt_attention_graph(true, dropout, contiguous);
        if (fused)
          for (GraphNode& n : spec->nodes)
            if (n.op == "scaled_dot_product_attention") n.attrs["fused"] = true;
        const FoldedAttention folded = fold_attention_layout(spec);
        REQUIRE(folded.folded == 1);
        // dropped: three narrows, reshapes and permutes, y's permute, (identity,) reshape
        CHECK(folded.spec->nodes.size() == spec->nodes.size() - (contiguous ? 12 : 11));
        const GraphNode& att = *std::find_if(folded.spec->nodes.begin(), folded.spec->nodes.end(),
                                             [](const GraphNode& n) { return n.op == "scaled_dot_product_attention"; });
        CHECK(att.shape == Shape{4, 8});
        CHECK(att.attrs.at("packed_heads") == 2);
        CHECK(folded.spec->nodes[static_cast<size_t>(att.inputs.at(0))].name == "qkv");
        auto file = make_graph_module(spec), fold = make_graph_module(folded.spec);
        Bound bf = bind_random(*file, dev, 96), bo = bind_random(*fold, dev, 96);  // the same values
        const Tensor ids = token_ids(dev);
        const auto yf = to_vector(file->forward(dev, ids, true)), yo = to_vector(fold->forward(dev, ids, true));
        CHECK(yo == yf);  // the copies dropped move values, never round them
        const auto r = random_vector(yf.size(), 97);
        file->backward(dev, tensor_from(dev, {3, 4, 8}, r), false);
        fold->backward(dev, tensor_from(dev, {3, 4, 8}, r), false);
        CHECK(to_vector(bo.grads) == to_vector(bf.grads));
        if (dropout == 0 && !fused) check_token_gradients(*fold, dev, bo, ids, 98);
        for (Module* m : {file.get(), fold.get()}) {
          m->clear_cache();
          for (Module* leaf : param_modules(*m)) leaf->bind({}, {});
        }
      }
  // Not folded: the decomposed attention; k and v read from each other's columns; q read elsewhere
  // too; y reshaped to another shape than [T, C]; a folded node's attribute in the file.
  CHECK(fold_attention_layout(nanogpt_attention_graph(false)).folded == 0);
  auto changed = [](const std::function<void(GraphSpec&)>& change) {
    auto spec = nanogpt_attention_graph(true);
    change(*spec);
    const FoldedAttention f = fold_attention_layout(spec);
    CHECK(f.spec == spec);
    return f.folded;
  };
  const auto named = [](GraphSpec& s, const char* name) -> GraphNode& {
    return *std::find_if(s.nodes.begin(), s.nodes.end(), [&](const GraphNode& n) { return n.name == name; });
  };
  const auto index_of = [](GraphSpec& s, const char* name) {
    return static_cast<int>(std::find_if(s.nodes.begin(), s.nodes.end(), [&](const GraphNode& n) { return n.name == name; }) -
                            s.nodes.begin());
  };
  CHECK(changed([&](GraphSpec& s) { named(s, "k_part").attrs["start"] = 16, named(s, "v_part").attrs["start"] = 8; }) == 0);
  CHECK(changed([&](GraphSpec& s) {
          add_node(s, "again", "identity", "", {index_of(s, "q")}, nlohmann::json::object(), {2, 4, 4});
        }) == 0);
  CHECK(changed([&](GraphSpec& s) { named(s, "q").attrs["dims"] = {0, 2, 3, 1}; }) == 0);
  CHECK(changed([&](GraphSpec& s) { named(s, "yr").shape = {32}; }) == 0);
  CHECK(changed([&](GraphSpec& s) { named(s, "y").attrs["packed_heads"] = 2; }) == 0);
}

namespace {
// ids [4] → wte (V, C = 8) → lm_head (no bias): a token model file's logits
std::shared_ptr<GraphSpec> lm_head_graph(int64_t V) {
  auto spec = graph_spec({4});
  spec->tokens = true;
  const int tok = add_node(*spec, "tok", "embedding", "wte", {-1}, {{"num_embeddings", V}, {"embedding_dim", 8}}, {4, 8});
  spec->output = add_node(*spec, "lm_head", "linear", "lm_head", {tok},
                          {{"in_features", 8}, {"out_features", V}, {"bias", false}}, {4, V});
  spec->state = {{"wte.weight", {V, 8}, false}, {"lm_head.weight", {V, 8}, false}};
  return spec;
}
}  // namespace

TEST_CASE("A token model file's logits stored in rows of gpt_logits_width(V): trained, evaluated and sampled as the "
          "file's unpadded graph, bit for bit, on one device and two") {
  auto spec = lm_head_graph(190);  // rows of 192, two zero columns past the classes
  const ModelDef padded = model_def_of(spec);
  CHECK(padded.classes == 190);
  CHECK(padded.stored_classes() == 192);
  CHECK(padded.summary.find("logits stored in rows of 192 (2 zero columns past the 190 classes)") != std::string::npos);
  ModelDef plain = padded;  // the file's graph as written
  plain.output_width = 0;
  plain.make = [spec] { return make_graph_module(spec); };
  std::vector<int32_t> x(16), y(16);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = static_cast<int32_t>(i * 47 % 190), y[i] = static_cast<int32_t>((i * 89 + 189) % 190);
  for (const int devices : {1, 2}) {
    CAPTURE(devices);
    auto run = [&](const ModelDef& m) {
      auto devs = host_devices(devices);
      OptimizerConfig adamw;
      adamw.kind = OptimizerConfig::Kind::AdamW;
      DataParallel dp(devs, m, adamw, {.split = SplitPolicy{}, .seed = 5});
      std::vector<float> seen;
      for (int step = 0; step < 3; ++step) seen.push_back(dp.step(x.data(), y.data(), 4).loss);
      seen.push_back(static_cast<float>(dp.evaluate(x.data(), y.data(), 4).loss_sum));
      const auto z = dp.logits(x.data(), 3);
      CHECK(z.size() == 3 * 190);
      seen.insert(seen.end(), z.begin(), z.end());
      const auto p = dp.parameters();
      seen.insert(seen.end(), p.begin(), p.end());
      return seen;
    };
    CHECK(run(padded) == run(plain));
  }
  // a file whose vocabulary needs no padding, or whose output is not a linear, runs as written
  CHECK(model_def_of(lm_head_graph(256)).output_width == 0);
  auto narrow = lm_head_graph(190);  // a file's own stored_features narrower than its outputs
  narrow->nodes.back().attrs["stored_features"] = 100;
  narrow->nodes.back().shape = {4, 100};
  CHECK_THROWS_WITH_AS(model_def_of(narrow), doctest::Contains("cannot hold its outputs"), UsageError);
  auto softmaxed = std::make_shared<GraphSpec>(*spec);
  softmaxed->output = add_node(*softmaxed, "ls", "log_softmax", "", {softmaxed->output}, {{"dim", -1}}, {4, 190});
  CHECK(model_def_of(softmaxed).output_width == 0);
}

TEST_CASE("A model file's graph: tied weights (nanoGPT's wte and lm_head one parameter), a LayerNorm without a "
          "bias, an unread causal-mask buffer: the parameter's gradient sums its readers', by finite differences") {
  // W = wte.weight; h = ln(embedding(x, W)); logits = h · Wᵀ (lm_head.weight is W); attn.bias is
  // state no node reads.
  auto spec = graph_spec({4});
  spec->tokens = true;
  const nlohmann::json none = nlohmann::json::object();
  auto node = [&](std::string name, std::string op, std::string module, std::vector<int> in, nlohmann::json attrs,
                  Shape shape) { return add_node(*spec, name, op, module, in, attrs, shape); };
  const int w = node("W", "parameter", "wte", {}, {{"name", "weight"}}, {11, 8});
  const int tok = node("tok", "embedding", "", {-1, w}, {{"num_embeddings", 11}, {"embedding_dim", 8}}, {4, 8});
  const int ln = node("ln", "layer_norm", "ln", {tok}, {{"normalized_shape", {8}}, {"bias", false}}, {4, 8});
  spec->output = node("head", "matmul", "", {ln, w}, {{"trans_b", true}}, {4, 11});
  spec->state = {{"wte.weight", {11, 8}, false},
                 {"attn.bias", {1, 1, 4, 4}, true},
                 {"ln.weight", {8}, false},
                 {"head.weight", {11, 8}, false}};
  spec->state[1].unread = true;
  spec->state[1].init = {"bias", {1, 1, 4, 4}, ParamDecl::Kind::Buffer, ParamDecl::Init::Tril};
  spec->state[3].tied_to = "wte.weight";
  auto graph = make_graph_module(spec);
  const ModelLayout layout = ModelLayout::of(*graph);
  REQUIRE(layout.entries.size() == 3);  // the tied name is not an entry of its own
  CHECK(layout.entries[1].name == "attn.bias");
  CHECK(layout.entries[1].buffer());
  REQUIRE(layout.tied.size() == 1);
  CHECK(layout.tied[0].name == "head.weight");
  CHECK(layout.entries[layout.tied[0].target].name == "wte.weight");
  {  // the unread mask starts as the causal tril
    std::vector<float> p(static_cast<size_t>(layout.parameter_count)), buf(static_cast<size_t>(layout.buffer_count));
    init_state(layout, p.data(), buf.data(), 1);
    const std::vector<float> tril{1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1};
    CHECK(std::vector<float>(buf.begin(), buf.begin() + 16) == tril);
  }

  auto devs = host_devices(1);
  Device& dev = devs[0];
  Bound b = bind_random(*graph, dev, 95);
  CHECK(check_token_gradients(*graph, dev, b, token_ids(dev), 96).shape() == Shape{3, 4, 11});
  for (Module* mod : param_modules(*graph)) mod->bind({}, {});
}

TEST_CASE("A model file's graph: a ViT's pieces (parameters used directly, at the root too, expand, cat, a position embedding added, a layer scale, MultiheadAttention, select): gradients match finite differences") {
  // p = gamma ⊙ conv(x) per plane; t = p as [4 tokens, 8]; c = cat(class_token expanded, t);
  // h = c + pos_embedding; r = h + mha(ln(h)); head(scale ⊙ r[:, 0]).
  auto spec = graph_spec({3, 4, 4});
  const nlohmann::json none = nlohmann::json::object();
  auto node = [&](std::string name, std::string op, std::string module, std::vector<int> in, nlohmann::json attrs,
                  Shape shape) { return add_node(*spec, name, op, module, in, attrs, shape); };
  const int cls = node("cls", "parameter", "", {}, {{"name", "class_token"}}, {1, 1, 8});
  const int conv = node("conv", "conv2d", "conv_proj", {-1},
                        {{"in_channels", 3}, {"out_channels", 8}, {"kernel_size", 2}, {"stride", 2}}, {8, 2, 2});
  const int gamma = node("gamma", "parameter", "encoder", {}, {{"name", "gamma"}}, {8, 1, 1});
  const int p = node("p", "mul", "", {gamma, conv}, none, {8, 2, 2});
  const int flat = node("flat", "reshape", "", {p}, none, {8, 4});
  const int t = node("t", "permute", "", {flat}, {{"dims", {0, 2, 1}}}, {4, 8});
  const int e = node("e", "expand", "", {cls, t}, none, {1, 8});
  const int c = node("c", "cat", "", {e, t}, {{"dim", 1}}, {5, 8});
  const int pos = node("pos", "parameter", "encoder", {}, {{"name", "pos_embedding"}}, {1, 5, 8});
  const int h = node("h", "add", "", {c, pos}, none, {5, 8});
  const int ln = node("ln", "layer_norm", "encoder.ln_1", {h}, {{"normalized_shape", {8}}}, {5, 8});
  const int mha = node("mha", "multihead_attention", "encoder.attn", {ln},
                       {{"embed_dim", 8}, {"num_heads", 2}, {"batch_first", true}, {"self_attention", true}}, {5, 8});
  const int r = node("r", "add", "", {h, mha}, none, {5, 8});
  const int first = node("first", "select", "", {r}, {{"dim", 1}, {"index", 0}}, {8});
  const int scale = node("scale", "parameter", "encoder", {}, {{"name", "scale"}}, {8});
  const int m = node("m", "mul", "", {first, scale}, none, {8});
  spec->output = node("head", "linear", "head", {m}, {{"in_features", 8}, {"out_features", 3}}, {3});
  spec->state = {{"class_token", {1, 1, 8}, false},     {"conv_proj.weight", {8, 3, 2, 2}, false},
                 {"conv_proj.bias", {8}, false},         {"encoder.gamma", {8, 1, 1}, false},
                 {"encoder.pos_embedding", {1, 5, 8}, false}, {"encoder.scale", {8}, false},
                 {"encoder.ln_1.weight", {8}, false},    {"encoder.ln_1.bias", {8}, false},
                 {"encoder.attn.in_proj_weight", {24, 8}, false}, {"encoder.attn.in_proj_bias", {24}, false},
                 {"encoder.attn.out_proj.weight", {8, 8}, false}, {"encoder.attn.out_proj.bias", {8}, false},
                 {"head.weight", {3, 8}, false},         {"head.bias", {3}, false}};
  auto graph = make_graph_module(spec);
  std::vector<std::string> names;
  for (const auto& entry : ModelLayout::of(*graph).entries) names.push_back(entry.name);
  CHECK(names.front() == "class_token");  // the root's own parameter, first as in PyTorch's state dict
  CHECK(names[4] == "encoder.pos_embedding");
  CHECK(names[8] == "encoder.attn.in_proj_weight");
  CHECK(names[10] == "encoder.attn.out_proj.weight");
  gradcheck(*graph, {3, 3, 4, 4}, random_vector(144, 93, -1.f, 1.f), false, 1e-3f, 2e-2);
}

TEST_CASE("A model file's graph: matmul with its second operand read transposed (trans_b): a product of a value "
          "with itself, gradients match finite differences") {
  auto spec = graph_spec({3, 4});
  const int h = add_node(*spec, "h", "linear", "h", {-1}, {{"in_features", 4}, {"out_features", 4}}, {3, 4});
  const int hh = add_node(*spec, "hh", "matmul", "", {h, h}, {{"trans_b", true}}, {3, 3});  // h · hᵀ
  const int flat = add_node(*spec, "flat", "flatten", "", {hh}, {{"start_dim", 1}, {"end_dim", -1}}, {9});
  spec->output = add_node(*spec, "fc", "linear", "fc", {flat}, {{"in_features", 9}, {"out_features", 2}}, {2});
  spec->state = {{"h.weight", {4, 4}, false}, {"h.bias", {4}, false}, {"fc.weight", {2, 9}, false},
                 {"fc.bias", {2}, false}};
  auto g = make_graph_module(spec);
  gradcheck(*g, {2, 3, 4}, random_vector(24, 28, -1.f, 1.f), false, 1e-3f, 1e-2);
  auto bad = graph_spec({3, 4});  // [3, 4] by [3, 4]ᵀ is fine; by [3, 5]ᵀ is not
  const int other = add_node(*bad, "w", "linear", "w", {-1}, {{"in_features", 4}, {"out_features", 5}}, {3, 5});
  bad->output = add_node(*bad, "m", "matmul", "", {-1, other}, {{"trans_b", true}}, {3, 3});
  bad->state = {{"w.weight", {5, 4}, false}, {"w.bias", {5}, false}};
  CHECK_THROWS_WITH_AS(make_graph_module(bad), doctest::Contains("by [..., N, K] transposed"), UsageError);
}

TEST_CASE("A model file's tensor ops refuse what they cannot run, naming it") {
  const nlohmann::json none = nlohmann::json::object();
  auto refused = [&](std::string op, nlohmann::json attrs, Shape in, Shape out) {
    auto spec = graph_spec(in);
    spec->output = add_node(*spec, "n", op, "", {-1}, attrs, out);
    std::string message;
    try {
      make_graph_module(spec);
    } catch (const UsageError& e) {
      message = e.what();
    }
    return message;
  };
  CHECK(refused("permute", {{"dims", {1, 0, 2}}}, {3, 4}, {3, 4}).find("moves the batch's dimension 0") != std::string::npos);
  CHECK(refused("permute", {{"dims", {0, 1, 1}}}, {3, 4}, {3, 4}).find("is not an order") != std::string::npos);
  CHECK(refused("narrow", {{"dim", 1}, {"start", 2}, {"length", 2}}, {3, 4}, {2, 4}).find("reaches past the end") !=
        std::string::npos);
  CHECK(refused("narrow", {{"dim", 0}, {"start", 0}, {"length", 1}}, {3, 4}, {3, 4}).find("dimension 0 the samples") !=
        std::string::npos);
  CHECK(refused("pad", {{"dim", 1}, {"before", -1}, {"after", 2}}, {3, 4}, {4, 4}).find("a negative pad crops") !=
        std::string::npos);
  CHECK(refused("pad", {{"dim", 0}, {"before", 1}, {"after", 0}}, {3, 4}, {3, 4}).find("dimension 0 the samples") !=
        std::string::npos);
  CHECK(refused("softmax", {{"dim", 1}}, {3, 4}, {3, 4}).find("over the last dimension") != std::string::npos);
  CHECK(refused("masked_fill", {{"mask", "padding"}, {"value", 0}}, {3, 4}, {3, 4}).find("causal") != std::string::npos);
  CHECK(refused("masked_fill", {{"mask", "causal"}, {"value", "nan"}}, {3, 4}, {3, 4}).find("not a number") !=
        std::string::npos);
  CHECK(refused("scale", {{"factor", "2"}}, {3, 4}, {3, 4}).find("factor") != std::string::npos);
  // window attention: heads that do not divide, a dropout, a sample of the wrong shape
  const nlohmann::json swin = {{"dim", 8}, {"window_size", {2, 2}}, {"shift_size", {1, 1}}, {"num_heads", 3}};
  CHECK(refused("shifted_window_attention", swin, {4, 4, 8}, {4, 4, 8}).find("does not split into 3 heads") !=
        std::string::npos);
  nlohmann::json dropped = swin;
  dropped["num_heads"] = 2, dropped["dropout"] = 0.1;
  CHECK(refused("shifted_window_attention", dropped, {4, 4, 8}, {4, 4, 8}).find("dropout other than 0") !=
        std::string::npos);
  const nlohmann::json maxvit = {{"feat_dim", 8}, {"head_dim", 4}, {"max_seq_len", 4}};
  CHECK(refused("relative_position_attention", maxvit, {3, 5, 8}, {3, 5, 8}).find("takes [G, 4, 8] per sample") !=
        std::string::npos);
  nlohmann::json not_square = maxvit;
  not_square["max_seq_len"] = 6;
  CHECK(refused("relative_position_attention", not_square, {3, 6, 8}, {3, 6, 8}).find("a square") != std::string::npos);
  // a value without the batch dimension anywhere but into embedding and add
  auto spec = graph_spec({4});
  const int pos = add_node(*spec, "pos", "arange", "", {}, {{"end", 4}}, {4});
  spec->output = add_node(*spec, "r", "relu", "", {pos}, none, {4});
  CHECK_THROWS_WITH_AS(make_graph_module(spec), doctest::Contains("reads 'pos': a value that does not depend on the "
                                                                  "model's input"), UsageError);
  // expand takes the value without the batch dimension first, then the one whose batch it takes
  auto ex = graph_spec({1, 4});
  ex->output = add_node(*ex, "e", "expand", "", {-1, -1}, none, {1, 4});
  CHECK_THROWS_WITH_AS(make_graph_module(ex), doctest::Contains("and then one with it"), UsageError);
  // matmul's shapes
  auto mm = graph_spec({3, 4});  // [3, 4] @ [3, 4]: K 4 against 3
  mm->output = add_node(*mm, "m", "matmul", "", {-1, -1}, none, {3, 4});
  CHECK_THROWS_WITH_AS(make_graph_module(mm), doctest::Contains("dp multiplies [..., M, K] by [..., K, N]"), UsageError);
}

TEST_CASE("BatchNorm2d without affine or without running statistics: its state, gradients, evaluation") {
  auto plain = make_batchnorm2d(3, 0.1f, 1e-5f, false, true);
  auto batch_only = make_batchnorm2d(3, 0.1f, 1e-5f, true, false);
  CHECK(plain->params().size() == 3);  // running_mean, running_var, num_batches_tracked
  CHECK(plain->params()[0].name == "running_mean");
  CHECK(batch_only->params().size() == 2);  // weight, bias
  gradcheck(*plain, {4, 3, 2, 3}, random_vector(72, 29, -2.f, 2.f), true, 1e-2f, 2e-2);
  gradcheck(*batch_only, {4, 3, 2, 3}, random_vector(72, 30, -2.f, 2.f), true, 1e-2f, 2e-2);
  // Without running statistics evaluation normalises with the batch's own: each channel's mean 0.
  auto devs = host_devices(1);
  auto bn = make_batchnorm2d(2, 0.1f, 1e-5f, false, false);
  CHECK(bn->params().empty());
  const Tensor in = tensor_from(devs[0], {3, 2, 2, 2}, random_vector(24, 31, 1.f, 5.f));
  const auto out = to_vector(bn->forward(devs[0], in, false));
  for (int c = 0; c < 2; ++c) {
    double sum = 0, sq = 0;
    for (int n = 0; n < 3; ++n)
      for (int i = 0; i < 4; ++i) {
        const double v = out[static_cast<size_t>((n * 2 + c) * 4 + i)];
        sum += v, sq += v * v;
      }
    CHECK(sum / 12 == doctest::Approx(0).epsilon(1e-5).scale(1));
    CHECK(sq / 12 == doctest::Approx(1).epsilon(1e-3));
  }
}

TEST_CASE("BatchNorm2d gradients match finite differences (training mode)") {
  auto layer = make_batchnorm2d(3);
  gradcheck(*layer, {4, 3, 3, 2}, random_vector(72, 5, -2.f, 2.f), true, 1e-2f, 2e-2);
}

TEST_CASE("ReLU gradients match finite differences away from the kink") {
  auto v = random_vector(60, 6);
  for (auto& x : v) x = x < 0 ? x - 0.1f : x + 0.1f;
  auto layer = make_relu();
  gradcheck(*layer, {3, 20}, v);
}

TEST_CASE("ReLU6, SiLU, Sigmoid, Tanh, Hardswish, Hardsigmoid and GELU's tanh form: PyTorch's values, and gradients that match finite differences") {
  // Inputs over [-8, 8], kept 0.05 away from the kinks: ReLU6's at 0 and 6, the hard functions' at ±3.
  auto v = random_vector(80, 23, -8.f, 8.f);
  for (auto& x : v)
    for (float kink : {0.f, 6.f, -3.f, 3.f})
      if (std::abs(x - kink) < 0.05f) x = kink + (x < kink ? -0.05f : 0.05f);
  for (Activation a : {Activation::ReLU6, Activation::SiLU, Activation::Sigmoid, Activation::Tanh, Activation::Hardswish,
                       Activation::Hardsigmoid, Activation::GeluTanh}) {
    INFO(activation_name(a));
    auto layer = make_activation(a);
    gradcheck(*layer, {4, 20}, v, true, 1e-3f);
  }
  auto devs = host_devices(1);
  const std::vector<float> x{-7.f, -1.f, 0.f, 0.5f, 3.f, 6.5f};
  const Tensor in = tensor_from(devs[0], {1, 6}, x);
  auto values = [&](Activation a) { return to_vector(make_activation(a)->forward(devs[0], in, false)); };
  CHECK(values(Activation::ReLU6) == std::vector<float>{0.f, 0.f, 0.f, 0.5f, 3.f, 6.f});
  const auto silu = values(Activation::SiLU), sig = values(Activation::Sigmoid), tanh = values(Activation::Tanh);
  for (size_t i = 0; i < x.size(); ++i) {
    const double s = 1.0 / (1.0 + std::exp(-double(x[i])));
    CHECK(sig[i] == doctest::Approx(s).epsilon(1e-6));
    CHECK(silu[i] == doctest::Approx(x[i] * s).epsilon(1e-6));
    CHECK(tanh[i] == doctest::Approx(std::tanh(double(x[i]))).epsilon(1e-6));
  }
  // Hardswish x·min(max(x+3, 0), 6)/6 and Hardsigmoid min(max(x+3, 0), 6)/6, as ATen computes them.
  CHECK(values(Activation::Hardswish) == std::vector<float>{0.f, -1.f * 2.f / 6.f, 0.f, 0.5f * 3.5f / 6.f, 3.f, 6.5f});
  CHECK(values(Activation::Hardsigmoid) == std::vector<float>{0.f, 2.f / 6.f, 0.5f, 3.5f / 6.f, 1.f, 1.f});
  // GELU's tanh form: F.gelu(x, approximate='tanh') of PyTorch 1.13 at these x, to float32 rounding.
  const auto gelu = values(Activation::GeluTanh);
  const std::vector<double> torch_gelu{-0.0, -0.15880799, 0.0, 0.34571400, 2.99636269, 6.5};
  for (size_t i = 0; i < x.size(); ++i) CHECK(gelu[i] == doctest::Approx(torch_gelu[i]).epsilon(1e-6));
}

TEST_CASE("AvgPool2d and AdaptiveAvgPool2d of any size: PyTorch's windows, gradients that match finite differences") {
  SUBCASE("AvgPool2d 3, stride 2, padding 1, ceil_mode, count_include_pad False") {
    auto layer = make_avgpool2d(3, 2, 1, true, false);
    CHECK(layer->output_shape({2, 6, 7}) == Shape{2, 4, 4});
    gradcheck(*layer, {2, 2, 6, 7}, random_vector(168, 24));
  }
  SUBCASE("AvgPool2d 2, stride 2 (DenseNet's transitions), count_include_pad") {
    auto layer = make_avgpool2d(2, 2, 0);
    gradcheck(*layer, {2, 3, 4, 5}, random_vector(120, 25));
  }
  SUBCASE("AdaptiveAvgPool2d((3, 2)) of 5x7: overlapping windows") {
    auto layer = make_adaptive_avgpool2d(3, 2);
    CHECK(layer->output_shape({2, 5, 7}) == Shape{2, 3, 2});
    gradcheck(*layer, {2, 2, 5, 7}, random_vector(140, 26));
  }
  SUBCASE("AdaptiveAvgPool2d((7, 7)) of 2x3: every input read by several windows (VGG's at small inputs)") {
    auto layer = make_adaptive_avgpool2d(7, 7);
    gradcheck(*layer, {2, 2, 2, 3}, random_vector(24, 27));
  }
  // Values: one 4x4 plane, AvgPool2d(3, 2, 1): corners average 4 pixels over 9 (padding counted) or
  // over 4 (not counted); adaptive 2x2 of 4x4 is the four 2x2 quadrants' means.
  auto devs = host_devices(1);
  std::vector<float> x(16);
  std::iota(x.begin(), x.end(), 0.f);
  const Tensor in = tensor_from(devs[0], {1, 1, 4, 4}, x);
  const auto counted = to_vector(make_avgpool2d(3, 2, 1)->forward(devs[0], in, false));
  const auto uncounted = to_vector(make_avgpool2d(3, 2, 1, false, false)->forward(devs[0], in, false));
  CHECK(counted[0] == doctest::Approx((0 + 1 + 4 + 5) / 9.0));
  CHECK(uncounted[0] == doctest::Approx((0 + 1 + 4 + 5) / 4.0));
  CHECK(counted[1] == doctest::Approx((1 + 2 + 3 + 5 + 6 + 7) / 9.0));  // rows 0-1 and a padded one, columns 1-3
  CHECK(uncounted[1] == doctest::Approx((1 + 2 + 3 + 5 + 6 + 7) / 6.0));
  CHECK(uncounted[3] == doctest::Approx((5 + 6 + 7 + 9 + 10 + 11 + 13 + 14 + 15) / 9.0));  // inside: no padding
  const auto quads = to_vector(make_adaptive_avgpool2d(2, 2)->forward(devs[0], in, false));
  CHECK(quads == std::vector<float>{2.5f, 4.5f, 10.5f, 12.5f});
}

TEST_CASE("MaxPool2d gradients match finite differences with distinct inputs") {
  std::vector<float> v(2 * 2 * 6 * 6);
  std::iota(v.begin(), v.end(), 0.f);
  std::shuffle(v.begin(), v.end(), std::mt19937(9));
  for (auto& x : v) x *= 0.05f;  // spacing well above eps: no argmax flips
  auto layer = make_maxpool2d(2, 2);
  gradcheck(*layer, {2, 2, 6, 6}, v);
  auto overlapping = make_maxpool2d(3, 2);
  gradcheck(*overlapping, {2, 2, 6, 6}, v);
  auto padded = make_maxpool2d(3, 2, 1);  // torchvision ResNet's stem
  gradcheck(*padded, {2, 2, 6, 6}, v);
  auto ceil = make_maxpool2d(3, 2, 0, true);  // SqueezeNet's: a partial last window
  gradcheck(*ceil, {2, 2, 6, 6}, v);
}

TEST_CASE("MaxPool2d's padding and ceil_mode give PyTorch's output sizes and never pick padding") {
  // PyTorch: MaxPool2d(3, 2, padding=1)(7x7) is 4x4; MaxPool2d(3, 2, ceil_mode=True) of 6x6 is 3x3,
  // of 7x7 3x3 (no window may start in the right padding), of 8x8 4x4.
  CHECK(make_maxpool2d(3, 2, 1)->output_shape({1, 7, 7}) == Shape{1, 4, 4});
  CHECK(make_maxpool2d(3, 2, 0, true)->output_shape({1, 6, 6}) == Shape{1, 3, 3});
  CHECK(make_maxpool2d(3, 2, 0, true)->output_shape({1, 7, 7}) == Shape{1, 3, 3});
  CHECK(make_maxpool2d(3, 2, 0, true)->output_shape({1, 8, 8}) == Shape{1, 4, 4});
  CHECK(make_maxpool2d(2, 2, 1, true)->output_shape({1, 5, 5}) == Shape{1, 3, 3});
  // PyTorch's refusals (a model file's stride of 0 once divided by zero): kernel and stride
  // positive, padding at most half the kernel
  CHECK_THROWS_AS(make_maxpool2d(3, 0), UsageError);
  CHECK_THROWS_AS(make_maxpool2d(0, 1), UsageError);
  CHECK_THROWS_AS(make_maxpool2d(3, 2, 2), UsageError);
  CHECK_THROWS_AS(make_maxpool2d(3, 2, -1), UsageError);
  auto devs = host_devices(1);
  // All negative: the −inf padding must not win over them.
  Tensor in = tensor_from(devs[0], {1, 1, 2, 2}, {-4.f, -3.f, -2.f, -1.f});
  Tensor out = make_maxpool2d(3, 2, 1)->forward(devs[0], in, true);
  CHECK(out.shape() == Shape{1, 1, 1, 1});
  CHECK(out.data()[0] == -1.f);
}

TEST_CASE("Flatten passes gradients through unchanged") {
  auto layer = make_flatten();
  gradcheck(*layer, {2, 3, 2, 2}, random_vector(24, 8));
}

TEST_CASE("softmax cross-entropy: value and gradient") {
  const int64_t B = 5, K = 4;
  auto logits = random_vector(B * K, 10, -3.f, 3.f);
  std::vector<int32_t> labels = {0, 3, 1, 2, 3};
  std::vector<float> grad(B * K);
  const double sum = cpu::softmax_xent(logits.data(), labels.data(), B, K, grad.data(), 1.f / B, nullptr);
  // value against a direct formula
  double want = 0;
  for (int64_t r = 0; r < B; ++r) {
    double z = 0;
    for (int64_t j = 0; j < K; ++j) z += std::exp(logits[r * K + j]);
    want += std::log(z) - logits[r * K + labels[r]];
  }
  CHECK(sum == doctest::Approx(want).epsilon(1e-6));
  const float eps = 1e-3f;
  for (int64_t i = 0; i < B * K; ++i) {
    auto l = logits;
    l[i] += eps;
    const double up = cpu::softmax_xent(l.data(), labels.data(), B, K, nullptr, 0, nullptr) / B;
    l[i] -= 2 * eps;
    const double down = cpu::softmax_xent(l.data(), labels.data(), B, K, nullptr, 0, nullptr) / B;
    CHECK(grad[i] == doctest::Approx((up - down) / (2 * eps)).epsilon(1e-3).scale(1));
  }
  int64_t correct = 0;
  std::vector<float> sure = {5, 0, 0, 0, 0, 0, 0, 5};
  std::vector<int32_t> sure_labels = {0, 2};
  cpu::softmax_xent(sure.data(), sure_labels.data(), 2, 4, nullptr, 0, &correct);
  CHECK(correct == 1);
  std::vector<int32_t> bad = {0, 4};
  CHECK_THROWS_WITH_AS(cpu::softmax_xent(sure.data(), bad.data(), 2, 4, nullptr, 0, nullptr),
                       doctest::Contains("label 4"), RuntimeError);
}

TEST_CASE("softmax cross-entropy over rows padded past their classes: the padding never read, its gradient zero") {
  const int64_t B = 5, K = 4, W = 7;
  const auto logits = random_vector(B * K, 10, -3.f, 3.f);
  const std::vector<int32_t> labels = {0, 3, 1, 2, 3};
  for (const float smoothing : {0.f, 0.1f}) {
    CAPTURE(smoothing);
    std::vector<float> grad(B * K);
    int64_t hits = 0;
    const double want = cpu::softmax_xent(logits.data(), labels.data(), B, K, grad.data(), 0.5f, &hits, smoothing);
    std::vector<float> wide(B * W, NAN);  // NaN in the padding: a read of it would show
    for (int64_t r = 0; r < B; ++r) std::copy_n(logits.begin() + r * K, K, wide.begin() + r * W);
    for (const bool in_place : {false, true}) {
      auto z = wide;
      std::vector<float> separate(B * W, 5.f);
      float* g = in_place ? z.data() : separate.data();
      int64_t got_hits = 0;
      CHECK(cpu::softmax_xent(z.data(), labels.data(), B, K, g, 0.5f, &got_hits, smoothing, W) == want);
      CHECK(got_hits == hits);
      for (int64_t r = 0; r < B; ++r)
        for (int64_t j = 0; j < W; ++j) CHECK(g[r * W + j] == (j < K ? grad[static_cast<size_t>(r * K + j)] : 0.f));
    }
    // The op, on a host device: the same, and rows closer together than their classes refused.
    auto devs = host_devices(1);
    Device& dev = devs[0];
    const Tensor z = tensor_from(dev, {B, W}, wide);
    Tensor y = Tensor::empty(dev, {B}, MemCategory::Inputs, DType::I32);
    std::copy(labels.begin(), labels.end(), y.data<int32_t>());
    Tensor g = Tensor::empty(dev, {B, W}, MemCategory::Activations);
    CHECK(softmax_xent(dev.exec(), z.buf(), y.buf(), B, K, g.buf(), 0.5f, nullptr, smoothing, W) == want);
    CHECK(to_vector(g)[W - 1] == 0.f);
    CHECK_THROWS_WITH_AS(softmax_xent(dev.exec(), z.buf(), y.buf(), B, K, g.buf(), 0.5f, nullptr, smoothing, K - 1),
                         doctest::Contains("softmax_xent: rows 3 apart hold no 4 columns"), RuntimeError);
  }
}

TEST_CASE("softmax cross-entropy with label smoothing: PyTorch's formula and its gradient, in place too") {
  // CrossEntropyLoss(label_smoothing=ε): (1 − ε)·(−log p_y) + ε·mean_k(−log p_k) per row.
  const int64_t B = 4;
  for (const int64_t K : {3, 70}) {  // a row within one block of the vectorised exp, and longer
    CAPTURE(K);
    auto logits = random_vector(static_cast<size_t>(B * K), 11 + static_cast<uint64_t>(K), -3.f, 3.f);
    const std::vector<int32_t> labels = {0, 2, 1, static_cast<int32_t>(K - 1)};
    for (const float ls : {0.1f, 1.f}) {
      CAPTURE(ls);
      double want = 0;
      for (int64_t r = 0; r < B; ++r) {
        double sum = 0, mean_nll = 0;
        for (int64_t j = 0; j < K; ++j) sum += std::exp(double(logits[r * K + j]));
        for (int64_t j = 0; j < K; ++j) mean_nll += (std::log(sum) - logits[r * K + j]) / K;
        want += (1 - ls) * (std::log(sum) - logits[r * K + labels[r]]) + ls * mean_nll;
      }
      std::vector<float> grad(logits.size());
      const double sum = cpu::softmax_xent(logits.data(), labels.data(), B, K, grad.data(), 1.f / B, nullptr, ls);
      CHECK(sum == doctest::Approx(want).epsilon(1e-6));
      const float h = 1e-3f;
      for (size_t i = 0; i < logits.size(); ++i) {
        auto l = logits;
        l[i] += h;
        const double up = cpu::softmax_xent(l.data(), labels.data(), B, K, nullptr, 0, nullptr, ls) / B;
        l[i] -= 2 * h;
        const double down = cpu::softmax_xent(l.data(), labels.data(), B, K, nullptr, 0, nullptr, ls) / B;
        CHECK(grad[i] == doctest::Approx((up - down) / (2 * h)).epsilon(1e-3).scale(1));
      }
      auto in_place = logits;
      CHECK(cpu::softmax_xent(in_place.data(), labels.data(), B, K, in_place.data(), 1.f / B, nullptr, ls) == sum);
      CHECK(in_place == grad);
    }
    // ε = 0 is the plain loss, bit for bit.
    std::vector<float> plain(logits.size()), zero(logits.size());
    CHECK(cpu::softmax_xent(logits.data(), labels.data(), B, K, plain.data(), 0.5f, nullptr) ==
          cpu::softmax_xent(logits.data(), labels.data(), B, K, zero.data(), 0.5f, nullptr, 0.f));
    CHECK(plain == zero);
  }
}

TEST_CASE("softmax cross-entropy on vocabulary-long rows: libm's double formula, in place too") {
  // The kernel sums a vectorised float32 exp in blocks of 64: rows shorter and longer than a
  // block, not a multiple of it, with a far-off logit (exp underflows) and a confident row.
  for (int64_t K : {1, 2, 63, 64, 65, 200, 4099}) {
    CAPTURE(K);
    const int64_t B = 3;
    auto logits = random_vector(static_cast<size_t>(B * K), 70 + static_cast<uint64_t>(K), -8.f, 8.f);
    if (K > 2) logits[K + 1] = -120.f, logits[2 * K + K / 2] = 40.f;
    const std::vector<int32_t> labels = {0, static_cast<int32_t>(K - 1), static_cast<int32_t>(K / 2)};
    double want = 0;
    std::vector<double> want_grad(static_cast<size_t>(B * K));
    for (int64_t r = 0; r < B; ++r) {
      const float* z = logits.data() + r * K;
      double mx = z[0], sum = 0;
      for (int64_t j = 0; j < K; ++j) mx = std::max<double>(mx, z[j]);
      for (int64_t j = 0; j < K; ++j) sum += std::exp(double(z[j]) - mx);
      want += std::log(sum) + mx - z[labels[r]];
      for (int64_t j = 0; j < K; ++j)
        want_grad[r * K + j] = (std::exp(double(z[j]) - mx) / sum - (j == labels[r] ? 1.0 : 0.0)) * 0.5;
    }
    std::vector<float> grad(logits.size());
    CHECK(cpu::softmax_xent(logits.data(), labels.data(), B, K, grad.data(), 0.5f, nullptr) ==
          doctest::Approx(want).epsilon(1e-6));
    double worst = 0;
    for (size_t i = 0; i < grad.size(); ++i) worst = std::max(worst, std::abs(grad[i] - want_grad[i]));
    CHECK(worst < 1e-7);
    // dlogits may be the logits themselves: the same loss and gradient.
    auto in_place = logits;
    CHECK(cpu::softmax_xent(in_place.data(), labels.data(), B, K, in_place.data(), 0.5f, nullptr) ==
          doctest::Approx(want).epsilon(1e-6));
    CHECK(in_place == grad);
  }
  std::vector<float> nan_row = {0.f, std::nanf(""), 1.f};
  const std::vector<int32_t> label0 = {0};
  CHECK(std::isnan(cpu::softmax_xent(nan_row.data(), label0.data(), 1, 3, nullptr, 0, nullptr)));  // not hidden
}

TEST_CASE("BatchNorm2d running statistics follow PyTorch (momentum 0.1, unbiased variance)") {
  auto devs = host_devices(1);
  Device& dev = devs[0];
  auto layer = make_batchnorm2d(1);
  const std::vector<Tensor> values = {tensor_from(dev, {1}, {1.f}), tensor_from(dev, {1}, {0.f}),
                                tensor_from(dev, {1}, {0.f}), tensor_from(dev, {1}, {1.f}),
                                Tensor::zeros(dev, {}, MemCategory::Parameters)};
  std::vector<Tensor> grads = {Tensor::zeros(dev, {1}, MemCategory::Gradients),
                               Tensor::zeros(dev, {1}, MemCategory::Gradients), Tensor(), Tensor(), Tensor()};
  layer->bind(values, grads);
  Tensor in = tensor_from(dev, {2, 1, 1, 2}, {1.f, 2.f, 3.f, 6.f});  // mean 3, biased var 3.5, unbiased 14/3
  Tensor out = layer->forward(dev, in, true);
  CHECK(values[2].data()[0] == doctest::Approx(0.3));
  CHECK(values[3].data()[0] == doctest::Approx(0.9 + 0.1 * 14.0 / 3.0));
  CHECK(values[4].data()[0] == 1.f);
  CHECK(out.data()[0] == doctest::Approx((1 - 3) / std::sqrt(3.5 + 1e-5)));
  Tensor eval = layer->forward(dev, in, false);  // eval: running statistics
  CHECK(eval.data()[0] == doctest::Approx((1 - 0.3) / std::sqrt(0.9 + 0.1 * 14.0 / 3.0 + 1e-5)));
}

TEST_CASE("SGD follows torch.optim.SGD: momentum, dampening, nesterov, weight decay") {
  auto devs = host_devices(1);
  ThreadPool& pool = devs[0].pool();
  SgdConfig c;
  c.lr = 0.1f;
  c.momentum = 0.9f;
  c.weight_decay = 0.01f;
  c.dampening = 0.f;
  float p = 1.f, buf = 0.f;
  const float g1 = 0.5f, g2 = -0.25f;
  cpu::sgd_update(pool, &p, &g1, &buf, true, c, 1);
  float d1 = g1 + 0.01f * 1.f;
  CHECK(buf == doctest::Approx(d1));
  CHECK(p == doctest::Approx(1.f - 0.1f * d1));
  const float p1 = p;
  cpu::sgd_update(pool, &p, &g2, &buf, false, c, 1);
  float d2 = g2 + 0.01f * p1, b2 = 0.9f * d1 + d2;
  CHECK(buf == doctest::Approx(b2));
  CHECK(p == doctest::Approx(p1 - 0.1f * b2));
  SUBCASE("nesterov") {
    c.nesterov = true;
    float q = 1.f, qb = 0.f;
    cpu::sgd_update(pool, &q, &g1, &qb, true, c, 1);
    CHECK(q == doctest::Approx(1.f - 0.1f * (d1 + 0.9f * d1)));
  }
  SUBCASE("dampening applies after the first step") {
    c.dampening = 0.5f;
    float q = 1.f, qb = 0.f;
    cpu::sgd_update(pool, &q, &g1, &qb, true, c, 1);
    CHECK(qb == doctest::Approx(d1));  // the first buffer is the gradient itself
    const float q1 = q;
    cpu::sgd_update(pool, &q, &g2, &qb, false, c, 1);
    CHECK(qb == doctest::Approx(0.9f * d1 + 0.5f * (g2 + 0.01f * q1)));
  }
}

TEST_CASE("LayerNorm gradients match finite differences (rows of the last dimension)") {
  auto layer = make_layernorm(6);
  gradcheck(*layer, {2, 3, 6}, random_vector(36, 20, -2.f, 2.f), true, 1e-3f, 1e-2);
}

TEST_CASE("LayerNorm normalises each row: zero mean, unit biased variance, then weight and bias") {
  auto devs = host_devices(1);
  auto layer = make_layernorm(4);
  const std::vector<Tensor> values = {tensor_from(devs[0], {4}, {1.f, 1.f, 1.f, 1.f}), tensor_from(devs[0], {4}, {0.f, 0.f, 0.f, 0.f})};
  layer->bind(values, {Tensor(), Tensor()});
  Tensor out = layer->forward(devs[0], tensor_from(devs[0], {1, 4}, {1.f, 2.f, 3.f, 6.f}), false);
  const double mean = 3, var = (4 + 1 + 0 + 9) / 4.0;
  CHECK(out.data()[0] == doctest::Approx((1 - mean) / std::sqrt(var + 1e-5)));
  CHECK(out.data()[3] == doctest::Approx((6 - mean) / std::sqrt(var + 1e-5)));
  layer->clear_cache();
  layer->bind({}, {});
}

TEST_CASE("GELU (exact) gradients and values") {
  auto layer = make_gelu();
  gradcheck(*layer, {3, 7}, random_vector(21, 21, -3.f, 3.f), true, 1e-3f, 1e-2);
  auto devs = host_devices(1);
  Tensor out = layer->forward(devs[0], tensor_from(devs[0], {3}, {-1.f, 0.f, 1.f}), true);
  CHECK(out.data()[0] == doctest::Approx(-0.15865525));  // x·Φ(x)
  CHECK(out.data()[1] == 0.f);
  CHECK(out.data()[2] == doctest::Approx(0.84134475));
  layer->clear_cache();
}

TEST_CASE("Embedding: rows looked up, repeated ids accumulate their gradients, bad ids named") {
  auto devs = host_devices(1);
  Device& dev = devs[0];
  auto layer = make_embedding(5, 3);
  const std::vector<float> table = random_vector(15, 22);
  Tensor w = tensor_from(dev, {5, 3}, table, MemCategory::Parameters);
  Tensor g = Tensor::zeros(dev, {5, 3}, MemCategory::Gradients);
  layer->bind({w}, {g});
  Tensor ids = Tensor::empty(dev, {2, 3}, MemCategory::Inputs, DType::I32);
  const int32_t id_values[6] = {4, 1, 4, 0, 4, 2};
  std::copy(id_values, id_values + 6, ids.data<int32_t>());
  Tensor out = layer->forward(dev, ids, true);
  CHECK(out.shape() == Shape{2, 3, 3});
  for (int r = 0; r < 6; ++r)
    for (int c = 0; c < 3; ++c) CHECK(out.data()[r * 3 + c] == table[static_cast<size_t>(id_values[r] * 3 + c)]);
  const auto dout = random_vector(18, 23);
  layer->backward(dev, tensor_from(dev, {2, 3, 3}, dout), false);
  for (int c = 0; c < 3; ++c) {
    CHECK(g.data()[4 * 3 + c] == doctest::Approx(dout[static_cast<size_t>(0 * 3 + c)] + dout[static_cast<size_t>(2 * 3 + c)] +
                                                  dout[static_cast<size_t>(4 * 3 + c)]));
    CHECK(g.data()[3 * 3 + c] == 0.f);  // id 3 never appears
    CHECK(g.data()[1 * 3 + c] == dout[static_cast<size_t>(1 * 3 + c)]);
  }
  ids.data<int32_t>()[5] = 5;
  CHECK_THROWS_WITH_AS(layer->forward(dev, ids, true), doctest::Contains("token id 5 at position 5"), RuntimeError);
  layer->clear_cache();
  layer->bind({}, {});
}

TEST_CASE("Causal self-attention gradients match finite differences (qkv, heads, the mask)") {
  auto attn = make_causal_self_attention(8, 2);
  gradcheck(*attn, {2, 5, 8}, random_vector(80, 24, -1.f, 1.f), true, 1e-3f, 1e-2);
}

TEST_CASE("Swin's shifted-window attention: gradients match finite differences (padded, shifted and masked, or "
          "not), the relative position bias table's too") {
  // 5 x 4 pixels in windows of 3 x 2: padded to 6 x 4, four windows; shifted by (1, 1) or not
  for (int64_t shift : {0, 1}) {
    CAPTURE(shift);
    auto attn = make_shifted_window_attention(8, {3, 2}, {shift, shift}, 2);
    gradcheck(*attn, {2, 5, 4, 8}, random_vector(320, 25, -1.f, 1.f), true, 1e-3f, 1e-2);
  }
}

TEST_CASE("Swin V2's shifted-window attention: gradients match finite differences (cosine attention's logit scale, "
          "cpb_mlp, the silent key bias)") {
  for (int64_t shift : {0, 1}) {
    CAPTURE(shift);
    auto attn = make_shifted_window_attention_v2(8, {3, 2}, {shift, shift}, 2, true, true, 6);
    CHECK(attn->describe() == "ShiftedWindowAttentionV2(dim=8, window_size=[3, 2], shift_size=[" +
                                  std::to_string(shift) + ", " + std::to_string(shift) + "], num_heads=2)");
    gradcheck(*attn, {2, 5, 4, 8}, random_vector(320, 27, -1.f, 1.f), true, 1e-3f, 1e-2);
  }
  CHECK_THROWS_WITH_AS(make_shifted_window_attention_v2(8, {1, 2}, {0, 0}, 2), doctest::Contains("divides by 0"),
                       RuntimeError);
}

TEST_CASE("Swin V2's cosine rows: unit rows, the query's scale clamped at ln 100, no logit gradient past it, and "
          "its own initial state torchvision's") {
  ThreadPool pool(1);
  const CosineShape s{1, 2, 4, 2};  // two tokens, two heads of 2
  std::vector<float> qkv = {3, 4, 0, 0, 1, 0, 0, 2, 5, 6, 7, 8,  // token 0: q (3, 4) (0, 0), k (1, 0) (0, 2), v
                            0, 5, 1, 1, 6, 8, 2, 0, 9, 9, 9, 9};
  const std::vector<float> logit = {std::log(10.f), 6.f};  // head 1 past the clamp: a scale of 100
  std::vector<float> norms(8), dots(4);
  cpu::cosine_qk_forward(pool, qkv.data(), norms.data(), logit.data(), s);
  CHECK(qkv[0] == doctest::Approx(0.6 * 10).epsilon(1e-6));
  CHECK(qkv[1] == doctest::Approx(0.8 * 10).epsilon(1e-6));
  CHECK(qkv[2] == 0.f);  // a zero row stays zero (divided by ε)
  CHECK(qkv[3] == 0.f);
  CHECK(qkv[14] == doctest::Approx(100 / std::sqrt(2.0)).epsilon(1e-6));  // token 1's q, head 1: (1, 1)·100/√2
  CHECK(qkv[5] == 0.f);
  CHECK(qkv[7] == 1.f);  // keys unscaled
  CHECK(qkv[8] == 5.f);  // v untouched
  CHECK(norms[0] == 5.f);
  CHECK(norms[3] == 2.f);
  std::vector<float> dq(24, 1.f);
  cpu::cosine_qk_backward(pool, dq.data(), qkv.data(), norms.data(), logit.data(), dots.data(), s);
  CHECK(dots[0] == doctest::Approx(14.f));  // (6 + 8)·1: y·dy of token 0's head-0 query
  CHECK(dots[1] == 0.f);                    // head 1 clamped: no gradient for its logit scale
  CHECK(dots[3] == 0.f);
  CHECK(dq[8] == 1.f);  // v's gradient passes
  // torchvision's ShiftedWindowAttentionV2(8, [2, 3], ...).relative_coords_table, and logit_scale log(10)
  auto v2 = make_shifted_window_attention_v2(8, {2, 3}, {0, 0}, 2);
  const auto decls = v2->params();
  REQUIRE(decls.size() == 3);
  CHECK(decls[0].values == std::vector<float>{std::log(10.f), std::log(10.f)});
  const std::vector<float> torchvision = {
      -1.056641697883606f, -1.056641697883606f, -1.056641697883606f, -0.7739760279655457f, -1.056641697883606f, 0.f,
      -1.056641697883606f, 0.7739760279655457f, -1.056641697883606f, 1.056641697883606f,  0.f, -1.056641697883606f,
      0.f, -0.7739760279655457f, 0.f, 0.f, 0.f, 0.7739760279655457f, 0.f, 1.056641697883606f,
      1.056641697883606f, -1.056641697883606f, 1.056641697883606f, -0.7739760279655457f, 1.056641697883606f, 0.f,
      1.056641697883606f, 0.7739760279655457f, 1.056641697883606f, 1.056641697883606f};
  REQUIRE(decls[1].values.size() == torchvision.size());
  for (size_t i = 0; i < torchvision.size(); ++i) CHECK(decls[1].values[i] == doctest::Approx(torchvision[i]).epsilon(1e-7));
}

TEST_CASE("MaxViT's relative positional attention: gradients match finite differences") {
  auto attn = make_relative_position_attention(8, 4, 4);  // partitions of 2 x 2 tokens, two heads
  gradcheck(*attn, {2, 3, 4, 8}, random_vector(192, 26, -1.f, 1.f), true, 1e-3f, 1e-2);
}

TEST_CASE("Swin's windows and mask, and the relative position index, are torchvision's") {
  // torchvision's relative_position_index, as it builds it: coordinates, their differences,
  // shifted to start at 0, the row's scaled by 2·ww − 1, summed.
  const int64_t wh = 3, ww = 4, T = wh * ww;
  const std::vector<int64_t> index = relative_position_index(wh, ww);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j) {
      const int64_t dy = i / ww - j / ww + wh - 1, dx = i % ww - j % ww + ww - 1;
      CHECK(index[static_cast<size_t>(i * T + j)] == dy * (2 * ww - 1) + dx);
    }
  // The mask: torchvision labels the padded image's regions by slices, (0, −w), (−w, −s), (−s, None)
  // along each axis, later assignments over earlier ones (a shift of 0 makes the last slice the
  // whole axis); tokens of two labels mask each other with −100.
  for (auto [sh, sw] : {std::pair<int64_t, int64_t>{1, 2}, {0, 2}, {2, 0}}) {
    CAPTURE(sh);
    CAPTURE(sw);
    const RelativeBiasShape s{1, wh, ww, 9, 8, sh, sw};
    std::vector<int64_t> label(static_cast<size_t>(9 * 8), 0);
    auto clamp = [](int64_t v, int64_t n) { return v < 0 ? v + n : v; };  // Python's slice bounds
    const int64_t hs[3][2] = {{0, -wh}, {-wh, -sh}, {-sh, 9}}, ws[3][2] = {{0, -ww}, {-ww, -sw}, {-sw, 8}};
    int64_t count = 0;
    for (const auto& h : hs)
      for (const auto& w : ws) {
        const int64_t h1 = h[1] == 9 ? 9 : clamp(h[1], 9), w1 = w[1] == 8 ? 8 : clamp(w[1], 8);
        for (int64_t y = clamp(h[0], 9); y < h1; ++y)
          for (int64_t x = clamp(w[0], 8); x < w1; ++x) label[static_cast<size_t>(y * 8 + x)] = count;
        ++count;
      }
    for (int64_t block = 0; block < s.blocks(); ++block)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t j = 0; j < T; ++j) {
          const int64_t y0 = block / 2 * wh, x0 = block % 2 * ww;
          const int64_t li = label[static_cast<size_t>((y0 + i / ww) * 8 + x0 + i % ww)];
          const int64_t lj = label[static_cast<size_t>((y0 + j / ww) * 8 + x0 + j % ww)];
          CHECK(s.mask(block, i, j) == (li == lj ? 0.f : -100.f));
        }
  }
  // The windows: the padded image rolled by (−sh, −sw) (torch.roll), cut row by row; merging undoes it.
  WindowPartitionShape p{2, 7, 6, 3, wh, ww};
  p.sh = 1, p.sw = 2;
  REQUIRE(p.padded_h() == 9);
  REQUIRE(p.padded_w() == 8);
  ThreadPool pool(1);
  const auto image = random_vector(static_cast<size_t>(2 * 7 * 6 * 3), 27);
  std::vector<float> tokens(static_cast<size_t>(2 * p.windows() * T * 3)), back(image.size());
  cpu::window_partition(pool, tokens.data(), image.data(), 4, p);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t win = 0; win < p.windows(); ++win)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t ry = win / 2 * wh + t / ww, rx = win % 2 * ww + t % ww;  // in the rolled image
        const int64_t y = (ry + p.sh) % 9, x = (rx + p.sw) % 8;                   // roll(−s): from y + s
        for (int64_t c = 0; c < 3; ++c) {
          const float want = y < 7 && x < 6 ? image[static_cast<size_t>(((b * 7 + y) * 6 + x) * 3 + c)] : 0.f;
          CHECK(tokens[static_cast<size_t>(((b * p.windows() + win) * T + t) * 3 + c)] == want);
        }
      }
  cpu::window_merge(pool, back.data(), tokens.data(), 4, p);
  CHECK(back == image);
}

TEST_CASE("StochasticDepth: each sample kept whole (scaled by 1/(1 - p)) or zeroed, by dropout's draw of its element 0") {
  auto devs = host_devices(1);
  Device& dev = devs[0];
  auto depth = make_stochastic_depth(0.5f, 3);
  CHECK(depth->describe() == "StochasticDepth(p=0.5, mode=row)");
  const int64_t samples = 16, per = 2 * 3 * 3;
  const auto xs = random_vector(static_cast<size_t>(samples * per), 31, 0.5f, 1.5f);  // no zeros
  const Tensor x = tensor_from(dev, {samples, 2, 3, 3}, xs);
  CHECK(depth->forward(dev, x, false).data() == x.data());  // evaluation: handed on as it is
  const auto y = to_vector(depth->forward(dev, x, true));
  const auto dx = to_vector(depth->backward(dev, tensor_from(dev, x.shape(), std::vector<float>(xs.size(), 1.f)), true));
  // Dropout's per-element draws at the same site: each sample takes its element 0's factor.
  ThreadPool pool(1);
  std::vector<float> ones(xs.size(), 1.f), elementwise(xs.size());
  cpu::dropout_apply(pool, elementwise.data(), ones.data(), samples, per, {0.5f, 3, 0, nullptr, 0});
  int dropped = 0;
  for (int64_t n = 0; n < samples; ++n) {
    const float f = elementwise[static_cast<size_t>(n * per)];
    dropped += f == 0.f;
    for (int64_t e = 0; e < per; ++e) {
      const auto i = static_cast<size_t>(n * per + e);
      CHECK(dx[i] == f);
      CHECK(y[i] == xs[i] * f);
    }
  }
  CHECK(dropped > 0);
  CHECK(dropped < samples);
  gradcheck(*make_stochastic_depth(0.3f, 2), {6, 5}, random_vector(30, 9));
  CHECK_THROWS_AS(make_stochastic_depth(1.5f, 0), UsageError);
}

TEST_CASE("Dropout: the identity in evaluation, and gradients through it and attention's dropout match finite differences") {
  auto devs = host_devices(1);
  Device& dev = devs[0];
  auto drop = make_dropout(0.4f, 1);
  CHECK(drop->describe() == "Dropout(p=0.4, inplace=False)");
  const Tensor x = tensor_from(dev, {2, 3, 4}, random_vector(24, 8));
  const Tensor same = drop->forward(dev, x, false);
  CHECK(same.data() == x.data());  // evaluation: handed on as it is
  // Training: forward and backward draw the same mask (the op is linear, so dx = f ⊙ dy).
  const auto y = to_vector(drop->forward(dev, x, true));
  const auto dx = to_vector(drop->backward(dev, tensor_from(dev, {2, 3, 4}, std::vector<float>(24, 1.f)), true));
  const auto xs = to_vector(x);
  int zeros = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    CHECK(y[i] == xs[i] * dx[i]);
    zeros += dx[i] == 0.f;
  }
  CHECK(zeros > 0);
  CHECK(zeros < 24);
  gradcheck(*make_dropout(0.3f, 2), {3, 5}, random_vector(15, 9));
  gradcheck(*make_causal_self_attention(8, 2, 0.02, 0.3f, 4), {2, 5, 8}, random_vector(80, 24, -1.f, 1.f), true, 1e-3f,
            1e-2);
}

TEST_CASE("Causal self-attention: a position never sees a later one") {
  auto devs = host_devices(1);
  auto attn = make_causal_self_attention(4, 2);
  const ModelLayout l = ModelLayout::of(*attn);
  CHECK(l.entries[0].name == "c_attn.weight");
  CHECK(l.entries[0].shape == Shape{12, 4});
  CHECK(l.entries[3].name == "c_proj.bias");
  std::vector<float> p(static_cast<size_t>(l.parameter_count)), b;
  init_state(l, p.data(), b.data(), 3);
  Tensor params = tensor_from(devs[0], {l.parameter_count}, p, MemCategory::Parameters);
  const auto leaves = param_modules(*attn);
  for (size_t i = 0; i < leaves.size(); ++i) {
    std::vector<Tensor> v;
    for (const auto& e : l.entries)
      if (e.leaf == static_cast<int>(i)) v.push_back(params.slice_flat(e.offset, e.shape));
    leaves[i]->bind(v, std::vector<Tensor>(v.size()));
  }
  auto x = random_vector(1 * 6 * 4, 25);
  const Tensor a = attn->forward(devs[0], tensor_from(devs[0], {1, 6, 4}, x), false);
  const auto first = to_vector(a);
  attn->clear_cache();
  for (size_t i = 4 * 4; i < x.size(); ++i) x[i] += 1.f;  // change positions 4 and 5 only
  const auto second = to_vector(attn->forward(devs[0], tensor_from(devs[0], {1, 6, 4}, x), false));
  attn->clear_cache();
  for (size_t i = 0; i < 4 * 4; ++i) CHECK(second[i] == first[i]);  // positions 0..3 unchanged
  CHECK(second[4 * 4] != first[4 * 4]);
  for (Module* m : leaves) m->bind({}, {});
}

TEST_CASE("GPT: nanoGPT's state-dict names and sizes, gradients of every parameter match finite differences, with dropout too") {
  for (float dropout : {0.f, 0.25f}) {  // dropout: the same masks in every forward (key 0)
    CAPTURE(dropout);
    const GptConfig g{7, 4, 2, 2, 8, dropout};
    auto gpt = make_gpt(g);
    const ModelLayout l = ModelLayout::of(*gpt);
    std::vector<std::string> names;
    int64_t trainable = 0;
    for (const auto& e : l.entries) names.push_back(e.name), trainable += numel(e.shape);
    CHECK(names.front() == "transformer.wte.weight");
    CHECK(names[1] == "transformer.wpe.weight");
    CHECK(std::find(names.begin(), names.end(), "transformer.h.1.attn.c_attn.bias") != names.end());
    CHECK(std::find(names.begin(), names.end(), "transformer.h.0.mlp.c_proj.weight") != names.end());
    CHECK(names[names.size() - 3] == "transformer.ln_f.weight");
    CHECK(names.back() == "lm_head.weight");  // no bias, not tied
    // nanoGPT's count: V·C + T·C + L·(12C² + 13C) + 2C, plus the untied lm_head V·C.
    const int64_t C = g.dim, L = g.layers;
    CHECK(trainable == g.vocab * C + g.context * C + L * (12 * C * C + 13 * C) + 2 * C + g.vocab * C);
    CHECK(gpt->output_shape({4}) == Shape{4, 7});
    CHECK_THROWS_WITH_AS(gpt->output_shape({5}), doctest::Contains("(context)"), RuntimeError);

    auto devs = host_devices(1);
    Device& dev = devs[0];
    Bound b = bind_random(*gpt, dev, 77);
    Tensor ids = token_ids(dev, {1, 5, 5, 0, 6, 2, 1, 1, 3, 4, 0, 6});  // the vocabulary is 7 here
    CHECK(check_token_gradients(*gpt, dev, b, ids, 78).shape() == Shape{3, 4, 7});
    gpt->clear_cache();
    for (Module* m : param_modules(*gpt)) m->bind({}, {});
  }
}

TEST_CASE("GPT: a vocabulary that is not a multiple of 64 has its logits' rows padded to one, where that costs at "
          "most 1/64 more, and the parameters keep V rows") {
  CHECK(gpt_logits_width(50257) == 50304);  // GPT-2's
  CHECK(gpt_logits_width(50304) == 50304);
  CHECK(gpt_logits_width(256) == 256);
  CHECK(gpt_logits_width(65) == 65);       // 63 more columns: not worth it
  CHECK(gpt_logits_width(1000) == 1000);   // 24 more: over 1000/64
  CHECK(gpt_logits_width(3000) == 3008);   // 8 more: under 3000/64
  CHECK(gpt_logits_width(4033) == 4096);
  CHECK(gpt_logits_width(190) == 192);
  CHECK(gpt_logits_width(126) == 126);
  const ModelDef def = gpt_model(GptConfig{4100, 4, 1, 2, 8, 0});
  CHECK(def.classes == 4100);
  CHECK(def.output_shape() == Shape{4, 4160});
  const ModelLayout big = ModelLayout::of(def);
  CHECK(big.entries.front().shape == Shape{4100, 8});  // wte
  CHECK(big.entries.back().shape == Shape{4100, 8});   // lm_head: V rows, as nanoGPT's and every file's
  // Finite differences through the padded rows (V = 190, rows 192 wide: a loss of few outputs keeps
  // float32's differences precise).
  const GptConfig g{190, 4, 1, 2, 8, 0};
  auto gpt = make_gpt(g);
  CHECK(gpt->output_shape({4}) == Shape{4, 192});
  auto devs = host_devices(1);
  Device& dev = devs[0];
  Bound b = bind_random(*gpt, dev, 79);
  const Tensor ids = token_ids(dev, {1, 189, 5, 0, 170, 2, 1, 1, 3, 4, 0, 6});
  const auto out = to_vector(check_token_gradients(*gpt, dev, b, ids, 80));
  REQUIRE(out.size() == static_cast<size_t>(12 * 192));
  for (int64_t r = 0; r < 12; ++r)
    for (int64_t j = 190; j < 192; ++j) CHECK(out[static_cast<size_t>(r * 192 + j)] == 0.f);
  gpt->clear_cache();
  for (Module* m : param_modules(*gpt)) m->bind({}, {});
}

}  // namespace test_layers
