"""What an export writes: the model file as JSON, the weights as safetensors, each replaced
atomically; and the check that no output overwrites an input."""
import json
import os
import sys
import tempfile

from dp_export.errors import ExportError


def same_file(a, b):
    """Do two paths name one file (the same file where both exist, else the same resolved path)?"""
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.realpath(a) == os.path.realpath(b)


def refuse_overwriting(outputs, inputs):
    """ExportError when two outputs, or an output and an input, are one file: (flag, path) pairs."""
    outputs = [(f, p) for f, p in outputs if p]
    for i, (fa, pa) in enumerate(outputs):
        for fb, pb in outputs[i + 1:]:
            if same_file(pa, pb):
                raise ExportError(f"{fa} and {fb} name the same file ({pa}); give each output its own")
        for fb, pb in inputs:
            if pb and same_file(pa, pb):
                raise ExportError(f"{fa} {pa} is the same file as {fb}: writing it would destroy an input")


def replace_atomically(path, write):
    """write(tmp) into a temporary file beside path, then renamed over it: never half a file."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=".export-")
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    try:
        write(tmp)
        os.chmod(tmp, 0o666 & ~umask)  # as open() would have made it (mkstemp's are the owner's only)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def to_json(doc):
    """The file readable in a diff: one node and one state entry a line."""
    lines = ["{"]
    for k, v in doc.items():
        if k in ("nodes", "state"):
            items = ",\n".join("  " + json.dumps(x) for x in v)
            lines.append(f' "{k}": [\n{items}\n ],')
        else:
            lines.append(f" {json.dumps(k)}: {json.dumps(v)},")
    lines[-1] = lines[-1].rstrip(",")
    return "\n".join(lines) + "\n}\n"


def write_weights(path, state):
    """The state_dict as safetensors (tests/torch/st_io.py's writer, which convert_nanogpt.py uses
    too); float32 and int64 as they are, other floats as float32."""
    import torch
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "torch"))
    import st_io
    state = {k: v if v.dtype in (torch.float32, torch.int64) else v.float() for k, v in state.items()}
    replace_atomically(path, lambda tmp: st_io.save(state, tmp))
