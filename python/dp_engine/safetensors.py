"""safetensors files read and written with NumPy (the format: an 8-byte little-endian header length, a
JSON header naming each tensor's dtype, shape and byte range, then the bytes): what dp's --init reads
and its --save writes."""
import json
import os
import struct
import tempfile

import numpy as np

_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16, "I64": np.int64, "I32": np.int32,
           "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_}
_NAMES = {np.dtype(v): k for k, v in _DTYPES.items()}


def read(path):
    """{name: array} of a safetensors file (bfloat16 widened to float32), and its __metadata__."""
    with open(path, "rb") as f:
        raw = f.read()
    (length,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + length])
    body = memoryview(raw)[8 + length:]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        start, end = entry["data_offsets"]
        if entry["dtype"] == "BF16":
            bits = np.frombuffer(body[start:end], dtype=np.uint16).astype(np.uint32) << 16
            tensors[name] = bits.view(np.float32).reshape(entry["shape"])
        else:
            tensors[name] = np.frombuffer(body[start:end], dtype=_DTYPES[entry["dtype"]]).reshape(entry["shape"]).copy()
    return tensors, header.get("__metadata__", {})


def write(path, tensors):
    """{name: array} as a safetensors file, written atomically (a temporary beside it, renamed)."""
    header, offset, parts = {}, 0, []
    for name, array in tensors.items():
        array = np.asarray(array)
        if not array.flags.c_contiguous:  # (np.ascontiguousarray would make a scalar's shape (1,))
            array = array.copy(order="C")
        if array.dtype not in _NAMES:
            raise TypeError(f"{name}: dtype {array.dtype} has no safetensors name here")
        data = array.tobytes()
        header[name] = {"dtype": _NAMES[array.dtype], "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        parts.append(data)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the tensors start 8-byte aligned
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=os.path.basename(path) + ".tmp.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(raw)) + raw)
            for data in parts:
                f.write(data)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
