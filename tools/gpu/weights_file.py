"""A safetensors file's float32 tensors, read and written with the standard library (numpy when it is
there, for speed): what the GPU check's comparisons need on the GPU machine's python and Debian's.

  read(path)                      {name: array.array('f') or numpy array} of the F32 tensors, and
                                  {name: bytes} of the others (int64 counters: compared exactly)
  perturbed_copy(src, dst, eps, seed)  every F32 value times (1 + eps * u), u uniform in [-1, 1]
                                  from `seed`: the float32 spread of a run is measured by starting it
                                  from such a copy (eps 1e-7: about one float32 rounding)
"""
import array
import json
import random
import struct
import sys

try:
    import numpy
except ImportError:  # the comparisons run without it, slower
    numpy = None


def _parse(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    return raw, n, json.loads(raw[8:8 + n])


def read(path):
    raw, n, header = _parse(path)
    floats, others = {}, {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        begin, end = meta["data_offsets"]
        data = raw[8 + n + begin:8 + n + end]
        if meta["dtype"] != "F32":
            others[name] = data
        elif numpy is not None:
            floats[name] = numpy.frombuffer(data, dtype="<f4").astype(numpy.float64)
        else:
            a = array.array("f")
            a.frombytes(data)
            if sys.byteorder != "little":
                a.byteswap()
            floats[name] = a
    return floats, others


def perturbed_copy(src, dst, eps, seed):
    raw, n, header = _parse(src)
    body = bytearray(raw[8 + n:])
    rng = random.Random(seed)
    state = numpy.random.default_rng(seed) if numpy is not None else None
    for name in sorted(header):
        meta = header[name]
        if name == "__metadata__" or meta["dtype"] != "F32":
            continue
        begin, end = meta["data_offsets"]
        if numpy is not None:
            v = numpy.frombuffer(bytes(body[begin:end]), dtype="<f4")
            v = (v * (1.0 + eps * state.uniform(-1.0, 1.0, v.size))).astype("<f4")
            body[begin:end] = v.tobytes()
        else:
            a = array.array("f")
            a.frombytes(bytes(body[begin:end]))
            for i in range(len(a)):
                a[i] *= 1.0 + eps * rng.uniform(-1.0, 1.0)
            body[begin:end] = a.tobytes()
    with open(dst, "wb") as f:
        f.write(raw[:8 + n])
        f.write(body)
