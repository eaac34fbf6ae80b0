// --normalise-on device: batches cross to the devices as uint8 pixels and the device that loads
// them looks each one up in its channel's table (kernels/ops/pixels.hpp), where the loader would
// have made float32 images on the host: a quarter of the bytes to make, stage and upload, the same
// bits. Device 0 holds the float32 batch as it would have (DataParallel's hotspot unchanged), and
// the uint8 one beside it until the step is joined.
#include "engine/comm.hpp"
#include "engine/data_parallel.hpp"
#include "engine/error.hpp"
#include "kernels/ops/pixels.hpp"

namespace dp {

void DataParallel::set_pixel_input(std::vector<float> table) {
  if (model_.input_dtype != DType::F32 || model_.input_shape.size() != 3)
    throw RuntimeError("model " + model_.name + " takes no images: its input cannot come as pixels");
  const int64_t channels = model_.input_shape[0];
  if (static_cast<int64_t>(table.size()) != channels * 256)
    throw RuntimeError("set_pixel_input: a table of " + std::to_string(table.size()) + " values for " +
                       std::to_string(channels) + " channels (" + std::to_string(channels * 256) + " wanted)");
  if (captured_ || next_ || steps_run_ > 0)
    throw RuntimeError("set_pixel_input: before the first step (a captured step or a batch uploaded ahead holds float32)");
  pixel_table_ = std::move(table);
  // On each device that loads batches: device 0 (DataParallel), every device (allreduce).
  const int loading = sync_.mode == SyncMode::AllReduce ? devices_.size() : 1;
  pixel_tables_.assign(static_cast<size_t>(devices_.size()), Tensor());
  for (int d = 0; d < loading; ++d) {
    pixel_tables_[static_cast<size_t>(d)] =
        Tensor::empty(devices_[d], {channels * 256}, MemCategory::Inputs, DType::F32);
    upload_async(pixel_tables_[static_cast<size_t>(d)], pixel_table_.data());
  }
  // The copies read pixel_table_, which a second call would replace: done before returning.
  for (int d = 0; d < loading; ++d) devices_[d].stream().synchronize();
}

Tensor DataParallel::images_from_pixels(int d, const Tensor& pixels) {
  Device& dev = devices_[d];
  const Tensor& table = pixel_tables_.at(static_cast<size_t>(d));
  if (!table.defined()) throw RuntimeError("images_from_pixels: no table on " + dev.name());
  Tensor images = Tensor::empty(dev, pixels.shape(), MemCategory::Inputs, DType::F32);
  const Shape& shape = pixels.shape();  // [batch, C, H, W]
  const int64_t samples = shape.at(0), channels = shape.at(1), plane = shape.at(2) * shape.at(3);
  dev.stream().enqueue(
      [images, pixels, table, samples, channels, plane, &dev] {
        expand_pixels(dev.exec(), images.data<float>(), pixels.data<uint8_t>(), table.data<float>(), samples,
                      channels, plane);
      },
      dev.stream().label([&] { return TaskLabel{"normalise pixels " + shape_str(shape), "copy"}; }));
  return images;
}

Tensor DataParallel::model_input(int d, const Tensor& uploaded, Tensor& keep) {
  if (uploaded.dtype() != DType::U8) return uploaded;
  keep = uploaded;
  return images_from_pixels(d, uploaded);
}

StepResult DataParallel::step(const uint8_t* pixels, const int32_t* labels, int64_t batch) {
  return step_any(pixels, DType::U8, labels, batch);
}

void DataParallel::upload_ahead(const uint8_t* pixels, const int32_t* labels, int64_t batch,
                                std::shared_ptr<const void> owner) {
  upload_ahead(MicroBatch::pixels(pixels, labels, batch), std::move(owner));
}

EvalResult DataParallel::evaluate(const uint8_t* pixels, const int32_t* labels, int64_t batch) {
  return evaluate_any(pixels, DType::U8, labels, batch);
}

}  // namespace dp
