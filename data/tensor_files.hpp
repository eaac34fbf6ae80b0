// Tensor files as a data set: samples of any size, exactly as a PyTorch script holds them, so a
// test can hand PyTorch the very same samples. --data DIR holding
//   train.safetensors [val.safetensors]   tensors `images` and `labels`, or
//   train_images.npy train_labels.npy [val_images.npy val_labels.npy]   NumPy's format (v1-v3)
// images [N, C, H, W] (or [N, H, W]: one channel), uint8 (normalised by the loader: ImageNet's
// statistics for 3 channels, MNIST's for 1, 0.5 and 0.5 otherwise) or float32 (the model's input as
// given: not normalised, not augmented); labels [N], int64, int32 or uint8, each >= 0. Without the
// val files the test set is empty (--eval then says so). RuntimeError naming the file and what is
// wrong: a dtype or shape it cannot hold, a count that differs, a negative label, a short file.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.hpp"

namespace dp {

// Whether dir holds train.safetensors or train_images.npy.
bool holds_tensor_files(const std::string& dir);
TrainTest load_tensor_dir(const std::string& dir);

Dataset read_safetensors_samples(const std::string& path);
Dataset read_npy_pair(const std::string& images_path, const std::string& labels_path);

// Tensors in memory (a file's, or the Python package's arrays): where the bytes are, their element
// type, their shape, and what to call them in a message ("train.safetensors's images").
enum class TensorKind { U8, I32, I64, F32 };
struct TensorView {
  const char* data = nullptr;
  TensorKind kind = TensorKind::U8;
  std::vector<int64_t> shape;
  std::string where;
};
// One split from its images and labels, checked as a tensor file's are; the samples copied, or with
// `owner` (what keeps their memory alive: the Python package's arrays) read where they are. The
// labels are copied (as int32).
Dataset dataset_from_tensors(const TensorView& images, const TensorView& labels, const std::string& source,
                             std::shared_ptr<const void> owner = nullptr);
// The training and validation splits as one data set described as `what` (with the counts and the
// sample's shape): the validation split must match the training one's shape and dtype, and takes its
// statistics; an empty one takes its shape and is named `no_validation` in messages.
TrainTest train_and_validation(Dataset train, Dataset validation, const std::string& what,
                               const std::string& no_validation);

}  // namespace dp
