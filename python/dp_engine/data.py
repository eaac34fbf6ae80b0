"""A call's data as dp's --data: a path dp reads as the CLI does (MNIST's IDX files, CIFAR-10, tensor files,
an image folder, train.bin and val.bin, a text), or arrays handed to dp in memory (--data memory:NAME):
images (N, C, H, W) or (N, H, W) with labels (N,), as NumPy arrays, torch tensors or a TensorDataset;
token ids (T,) for a language model. Arrays are checked as tensor files are (uint8 pixels normalised by
the loader, float32 samples taken as given) and read where they are: the batches are the one copy (a CPU
tensor's memory is a NumPy array's; a strided array is made contiguous, other floats narrowed to float32,
first). Token ids are read where they are when they are uint16, as dp keeps them, and copied as uint16
otherwise. An array must not change while a call reads it."""
import atexit
import itertools
import os

import numpy as np

from dp_engine import _core

_names = itertools.count()
_live = set()  # the names handed over and not dropped yet: dropped at exit, while Python still runs


@atexit.register
def _drop_all():
    for name in list(_live):
        _core.drop_data(name)
        _live.discard(name)


def as_array(x):
    """A NumPy view of x (a CPU tensor's memory shared, not copied)."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # a torch tensor
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def images_of(x):
    """Images as dp reads them: uint8 pixels or float32 samples (other floats narrowed to float32)."""
    x = as_array(x)
    if x.dtype.kind == "f" and x.dtype != np.float32:
        x = x.astype(np.float32)
    return x


def labels_of(y):
    y = as_array(y)
    if y.dtype.kind in "ui" and y.dtype not in (np.uint8, np.int32, np.int64):
        y = y.astype(np.int64)
    return y


def pair_of(data, what):
    """(images, labels) of a pair or a TensorDataset; None where data is neither."""
    tensors = getattr(data, "tensors", None)  # torch.utils.data.TensorDataset
    if tensors is not None:
        if len(tensors) != 2:
            raise TypeError(f"{what}: a TensorDataset of (images, labels), not of {len(tensors)} tensors")
        return tensors
    if isinstance(data, (tuple, list)) and len(data) == 2:
        return data
    return None


def is_path(data):
    return isinstance(data, (str, os.PathLike))


def path_of(data):
    """--data for a path: a train.bin names its folder (nanoGPT's layout, with val.bin beside it)."""
    path = os.fspath(data)
    return (os.path.dirname(path) or ".") if os.path.basename(path) == "train.bin" else path


class InMemory:
    """Arrays handed to dp under a name for one call (`with InMemory(data, test_data) as name:`), dropped
    after it."""

    def __init__(self, data, test_data):
        self.data, self.test_data = data, test_data
        self.name = f"py{os.getpid()}-{next(_names)}"

    def __enter__(self):
        pair = pair_of(self.data, "data")
        if pair is not None:
            test = pair_of(self.test_data, "test_data") if self.test_data is not None else None
            if self.test_data is not None and test is None:
                raise TypeError("test_data: (images, labels) or a TensorDataset, as data is")
            _core.put_images(self.name, images_of(pair[0]), labels_of(pair[1]),
                             None if test is None else images_of(test[0]), None if test is None else labels_of(test[1]),
                             "arrays")
        else:
            ids = as_array(self.data)
            if ids.ndim != 1:
                raise TypeError("data: (images, labels), a TensorDataset, token ids (T,), or a path; not an array of "
                                f"shape {ids.shape}")
            _core.put_tokens(self.name, ids, None if self.test_data is None else as_array(self.test_data), "token arrays")
        _live.add(self.name)
        return "memory:" + self.name

    def __exit__(self, *exc):
        _core.drop_data(self.name)
        _live.discard(self.name)
        return False


def sample_shape(data):
    """One image sample's shape (C, H, W) of array data, for exporting a module (None for a path or tokens)."""
    pair = None if data is None or is_path(data) else pair_of(data, "data")
    if pair is None:
        return None
    shape = as_array(pair[0]).shape
    return (1,) + tuple(shape[1:]) if len(shape) == 3 else tuple(shape[1:])
