#include "memory_arrays.hpp"

#include <cstdint>
#include <memory>
#include <vector>

#include "core/error.hpp"
#include "data/memory_data.hpp"
#include "data/tensor_files.hpp"
#include "data/tokens.hpp"

namespace py = pybind11;

namespace dp::python {
namespace {

// The array's bytes as dp reads a tensor (C order: a strided array is made contiguous first, its
// one copy), its element type, and its shape; `what` names it in messages.
struct Held {
  py::array array;
  TensorView view;
};

Held held(const py::array& given, const std::string& what) {
  Held h;
  h.array = py::array::ensure(given, py::array::c_style);
  if (!h.array) throw UsageError(what + ": not an array");
  const py::dtype dtype = h.array.dtype();
  const char kind = dtype.kind();
  const auto size = dtype.itemsize();
  if (kind == 'u' && size == 1) h.view.kind = TensorKind::U8;
  else if (kind == 'i' && size == 4) h.view.kind = TensorKind::I32;
  else if (kind == 'i' && size == 8) h.view.kind = TensorKind::I64;
  else if (kind == 'f' && size == 4) h.view.kind = TensorKind::F32;
  else
    throw UsageError(what + ": dtype " + py::repr(dtype).cast<std::string>() +
                     " (images are uint8 or float32, labels and token ids int64, int32 or uint8)");
  h.view.data = static_cast<const char*>(h.array.data());
  for (py::ssize_t d = 0; d < h.array.ndim(); ++d) h.view.shape.push_back(h.array.shape(d));
  h.view.where = what;
  return h;
}

// An array kept alive as long as a copy of the data set reading it is, let go under the GIL by
// whichever thread drops the last one.
std::shared_ptr<const void> kept(const py::array& array) {
  return std::shared_ptr<const void>(new py::array(array), [](const void* held) {
    py::gil_scoped_acquire gil;
    delete static_cast<const py::array*>(held);
  });
}

Dataset split(const py::array& images, const py::array& labels, const std::string& source, const std::string& name) {
  const Held x = held(images, name + " images"), y = held(labels, name + " labels");
  std::shared_ptr<const void> owner = kept(x.array);  // the samples are read where they are
  py::gil_scoped_release release;  // the labels' copy
  return dataset_from_tensors(x.view, y.view, source + " (" + name + ")", std::move(owner));
}

TokenSplit token_split(const py::array& given, const std::string& source) {
  const py::array any = py::array::ensure(given);
  if (!any) throw UsageError(source + ": not an array");
  const char kind = any.dtype().kind();
  if (kind != 'i' && kind != 'u')
    throw UsageError(source + ": token ids are integers, not " + py::repr(any.dtype()).cast<std::string>());
  if (any.ndim() != 1) throw UsageError(source + ": token ids are one sequence [T]");
  TokenSplit s;
  s.source = source;
  if (kind == 'u' && any.dtype().itemsize() == 2) {  // uint16, as dp keeps them: read where they are
    const auto held = py::array_t<uint16_t, py::array::c_style>::ensure(any);
    s.owner = kept(held);
    s.held = held.data();
    s.held_count = static_cast<size_t>(held.shape(0));
    return s;
  }
  const auto ids = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(any);  // exact for integers
  s.tokens.resize(static_cast<size_t>(ids.shape(0)));
  const int64_t* id = ids.data();
  for (size_t i = 0; i < s.tokens.size(); ++i) {
    if (id[i] < 0 || id[i] > 65535)
      throw UsageError(source + ": token id " + std::to_string(id[i]) + " at position " + std::to_string(i) +
                       " is outside 0..65535 (dp keeps ids as uint16, as nanoGPT's train.bin does)");
    s.tokens[i] = static_cast<uint16_t>(id[i]);
  }
  return s;
}

}  // namespace

void put_images(const std::string& name, const py::array& images, const py::array& labels,
                const py::object& test_images, const py::object& test_labels, const std::string& source) {
  auto data = std::make_shared<MemoryData>();
  Dataset train = split(images, labels, source, "training");
  Dataset test;
  if (!test_images.is_none()) test = split(test_images.cast<py::array>(), test_labels.cast<py::array>(), source, "held-out");
  data->images = train_and_validation(std::move(train), std::move(test), source, source + " (no held-out arrays)");
  put_memory_data(name, std::move(data));
}

void put_tokens(const std::string& name, const py::array& train, const py::object& val, const std::string& source) {
  auto data = std::make_shared<MemoryData>();
  data->language = true;
  TokenSplit validation;
  validation.source = source + " (no validation ids)";
  if (!val.is_none()) validation = token_split(val.cast<py::array>(), source + " (validation ids)");
  data->tokens = token_ids(token_split(train, source + " (training ids)"), std::move(validation), source);
  put_memory_data(name, std::move(data));
}

}  // namespace dp::python
