"""Minimal safetensors reader/writer (the format is a u64 header length, a JSON header and raw
little-endian data), so the cross-checks need nothing beyond torch itself."""
import json
import struct

import torch

_DTYPES = {"F32": torch.float32, "I64": torch.int64}
_NAMES = {v: k for k, v in _DTYPES.items()}


def save(tensors, path):
    """Streamed: the header from the tensors' sizes, then each tensor's bytes in turn (no copy of
    the whole state in memory: GPT-2's is 500 MB)."""
    header, offset = {}, 0
    for name, t in tensors.items():
        n = t.numel() * t.element_size()
        header[name] = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + n]}
        offset += n
    h = json.dumps(header).encode()
    h += b" " * (-(len(h) + 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for t in tensors.values():
            f.write(memoryview(t.detach().contiguous().cpu().numpy()).cast("B"))


def load(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    body = raw[8 + n:]
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        t = torch.frombuffer(bytearray(body[b:e]), dtype=_DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"]).clone()
    return out
