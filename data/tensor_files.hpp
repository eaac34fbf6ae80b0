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
#include <string>

#include "data/dataset.hpp"

namespace dp {

// Whether dir holds train.safetensors or train_images.npy.
bool holds_tensor_files(const std::string& dir);
TrainTest load_tensor_dir(const std::string& dir);

Dataset read_safetensors_samples(const std::string& path);
Dataset read_npy_pair(const std::string& images_path, const std::string& labels_path);

}  // namespace dp
