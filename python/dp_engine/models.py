"""A call's model as dp's --model: a built-in's name, a model file's path, or a torch.nn.Module exported
in this process by the exporter's own code (tools/dp_export: the same checks, messages and file as
tools/export_model.py) together with its current weights, which a training starts from and an
evaluation evaluates; and the trained weights put back into the module."""
import os

import numpy as np

from dp_engine import safetensors
from dp_engine.errors import DpError


def is_module(model):
    try:
        import torch
    except ImportError:
        return False
    return isinstance(model, torch.nn.Module)


def input_of(input, data_shape=None):
    """(kind, shape, text) of one sample for the exporter: input=(C, H, W), (F,), "3x32x32" or "tokens:T";
    without it, the shape of the data's samples (an image array's)."""
    if input is None and data_shape is not None:
        input = tuple(data_shape)
    if input is None:
        raise TypeError("a torch module needs input=: one sample's shape, (C, H, W) or \"tokens:T\" for a language "
                        "model (or image arrays as data, whose samples' shape it takes)")
    if isinstance(input, str):  # the exporter's own words: export_model.py's --input
        from dp_export.errors import ExportError
        from dp_export.export import parse_input
        try:
            return (*parse_input(input, "input="), input)
        except ExportError as e:
            raise TypeError(str(e)) from None
    shape = [int(d) for d in input]
    if len(shape) not in (1, 3) or min(shape) < 1:
        raise TypeError(f"input={input!r}: one sample's shape as (C, H, W) or (F,), each at least 1")
    return "image", shape, "x".join(map(str, shape))


def export_module(module, input, folder, data_shape=None):
    """Writes the module as folder/model.json and its state as folder/weights.safetensors; returns both
    paths and the state's names (the entries dp keeps)."""
    from dp_export.errors import ExportError
    from dp_export.export import export
    from dp_export.writing import to_json

    kind, shape, text = input_of(input, data_shape)
    cls = type(module)
    was_training = module.training
    module.train()  # the exporter traces the training graph (dropout, batch norm's batch statistics)
    try:
        doc = export(module, kind, shape, cls.__name__, f"{cls.__module__}.{cls.__qualname__}", text)
    except ExportError as e:
        raise DpError(f"cannot export {cls.__name__}: {e}", 2) from None
    finally:
        module.train(was_training)
    path = os.path.join(folder, cls.__name__ + ".json")  # what dp's lines call the model
    with open(path, "w") as f:
        f.write(to_json(doc))
    names = [entry["name"] for entry in doc["state"]]
    weights = os.path.join(folder, "weights.safetensors")
    safetensors.write(weights, state_arrays(module, names))
    return path, weights, names


def state_arrays(module, names):
    """The module's state_dict entries named, as float32 (int64 counters as they are) arrays."""
    import torch
    state = module.state_dict()
    arrays = {}
    for name in names:
        t = state[name].detach().cpu()
        arrays[name] = (t if t.dtype in (torch.float32, torch.int64) else t.float()).numpy()
    return arrays


def load_trained(module, path):
    """The weights dp saved (`dp train --save`) into the module, in place: every parameter and buffer
    dp keeps, tied parameters still tied (each written where it lives); the state dp does not keep (a
    causal mask nanoGPT registers as a buffer) stays the module's. A name dp saved that the module lacks,
    or a shape that differs, is a DpError."""
    import torch
    tensors, _ = safetensors.read(path)
    state = module.state_dict(keep_vars=True)
    for name, array in tensors.items():
        if name not in state:
            raise DpError(f"{path}: {name} is not in the module's state_dict (a model file of another module?)")
        target = state[name]
        if tuple(target.shape) != tuple(array.shape):
            raise DpError(f"{path}: {name} is {list(array.shape)} there, {list(target.shape)} in the module")
        with torch.no_grad():
            target.copy_(torch.from_numpy(np.array(array, order="C")).to(target.dtype))
