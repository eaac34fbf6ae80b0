// Per-layer forward/backward time of a model on one simulated device: where a step's time goes.
//   build/layer_timing [model=convnet] [batch=64] [threads per device=1] [repeats=50]
// Set OPENBLAS_CORETYPE / OPENBLAS_NUM_THREADS=1 as dp does (tools/dp/main.cpp) before running.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/device.hpp"
#include "models/model.hpp"
#include "tools/bench/bench_cli.hpp"

using namespace dp;
using Clock = std::chrono::steady_clock;

static int run(int argc, char** argv) {
  const std::string name = argc > 1 ? argv[1] : "convnet";
  const int64_t batch = dp::bench::number_arg<int64_t>(argc, argv, 2, "batch", 64);
  const int threads = static_cast<int>(dp::bench::number_arg<int64_t>(argc, argv, 3, "threads", 1));
  const int repeats = static_cast<int>(dp::bench::number_arg<int64_t>(argc, argv, 4, "repeats", 50));
  if (batch <= 0 || threads <= 0 || repeats <= 0) {
    std::fprintf(stderr, "usage: layer_timing [model] [batch > 0] [threads > 0] [repeats > 0]\n");
    return 2;
  }
  DeviceSpec spec;
  spec.kind = DeviceSpec::Kind::Host;
  spec.host_count = 1;
  DeviceOptions opts;
  opts.threads_per_device = threads;
  DeviceSet devs(spec, opts);
  Device& dev = devs[0];
  const ModelDef& def = find_model(name);
  Network net(def);
  const ModelLayout& lay = net.layout();
  Tensor params = Tensor::empty(dev, {lay.parameter_count}, MemCategory::Parameters);
  Tensor grads = Tensor::zeros(dev, {lay.parameter_count}, MemCategory::Gradients);
  Tensor buffers = Tensor::empty(dev, {lay.buffer_count}, MemCategory::Parameters);
  init_state(lay, params.data(), buffers.data(), 1);
  net.bind(params, grads, buffers);
  Shape in_shape = def.input_shape;
  in_shape.insert(in_shape.begin(), batch);
  Tensor input = Tensor::zeros(dev, in_shape, MemCategory::Inputs);
  for (int64_t i = 0; i < input.numel(); ++i) input.data()[i] = static_cast<float>((i * 37) % 101) / 50.f - 1.f;

  // The root's children: layers of a Sequential model, stages of a ResNet.
  std::vector<Module*> layers;
  for (const auto& c : net.root().children()) layers.push_back(c.module.get());
  std::vector<double> fwd(layers.size()), bwd(layers.size());
  for (int r = 0; r < repeats + 3; ++r) {
    std::vector<Tensor> acts{input};
    for (size_t i = 0; i < layers.size(); ++i) {
      auto t0 = Clock::now();
      acts.push_back(layers[i]->forward(dev, acts.back(), true));
      if (r >= 3) fwd[i] += std::chrono::duration<double>(Clock::now() - t0).count();
    }
    Tensor g = Tensor::zeros(dev, acts.back().shape(), MemCategory::Activations);
    for (size_t i = layers.size(); i-- > 0;) {
      auto t0 = Clock::now();
      g = layers[i]->backward(dev, g, i > 0);
      if (r >= 3) bwd[i] += std::chrono::duration<double>(Clock::now() - t0).count();
    }
  }
  double tf = 0, tb = 0;
  std::printf("%-52s %10s %10s\n", (name + ", batch " + std::to_string(batch)).c_str(), "fwd ms", "bwd ms");
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string what = net.root().children()[i].name + ": " + layers[i]->describe();
    std::printf("%-52s %10.3f %10.3f\n", what.c_str(), fwd[i] / repeats * 1e3, bwd[i] / repeats * 1e3);
    tf += fwd[i];
    tb += bwd[i];
  }
  std::printf("%-52s %10.3f %10.3f\n", "total", tf / repeats * 1e3, tb / repeats * 1e3);
  net.unbind();
  return 0;
}

int main(int argc, char** argv) { return dp::bench::guarded_main("layer_timing", run, argc, argv); }
