// NumPy arrays handed to dp as a data set in memory (data/memory_data.hpp: --data memory:NAME):
// images [N, C, H, W] or [N, H, W] (uint8 pixels, or float32 samples taken as they are) with integer
// labels [N], checked as tensor files are; or token ids [T] for a language model.
#pragma once
#include <pybind11/numpy.h>

#include <string>

namespace dp::python {

// `test_images`, `test_labels`: None for no held-out set.
void put_images(const std::string& name, const pybind11::array& images, const pybind11::array& labels,
                const pybind11::object& test_images, const pybind11::object& test_labels, const std::string& source);
// `val`: None for no validation split.
void put_tokens(const std::string& name, const pybind11::array& train, const pybind11::object& val,
                const std::string& source);

}  // namespace dp::python
