// Image folders, torchvision's ImageFolder convention: --data DIR whose subfolders are the classes
// (sorted names → indices 0, 1, …), each holding JPEG and PNG files at any depth (sorted as
// os.walk and sorted() give them); or the ImageNet layout, train/ and val/ side by side with the
// same classes (train on one, evaluate on the other). Each sample is decoded (data/image_decode.hpp)
// and transformed (data/image_transforms.hpp) to the model's size when its batch is made, in the
// loader's threads: the data set is file names, whatever its size.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "data/decode_budget.hpp"
#include "data/image_transforms.hpp"

namespace dp {

struct ImageFolderOptions {
  int64_t channels = 3, rows = 224, cols = 224;  // what a sample becomes (the model's input)
  int64_t short_side = 0;  // evaluation's Resize; 0: round(max(rows, cols) · 256 / 224), ImageNet's 256 for 224
  RandomCrop crop;         // training's RandomResizedCrop (with --augment; else the evaluation transform)
  // --skip-bad-images: every file decoded once while the folder is read (over `threads`), and those
  // that fail left out, each with why (TrainTest::skipped), instead of an error.
  bool skip_bad = false;
  int threads = 1;
  // Decoders' memory: an image whose working set (pixels and resize scratch) is beyond
  // `decode_alone_bytes` waits for room in `decode_budget`, shared by every thread (data/decode_budget.hpp).
  int64_t decode_alone_bytes = kDecodeAloneBytes;
  DecodeBudget* decode_budget = &DecodeBudget::shared();
};

// Whether dir holds an image folder: a subfolder (of dir, or of dir/train) with a JPEG or PNG in it.
bool holds_image_folder(const std::string& dir);
// The folder's samples (UsageError naming the file or folder: an empty class, no classes, a file
// with an image's name that is not a JPEG or PNG, one that cannot be read, a format dp does not
// decode; val/ with other classes than train/).
TrainTest load_image_folder(const std::string& dir, const ImageFolderOptions& options);

}  // namespace dp
