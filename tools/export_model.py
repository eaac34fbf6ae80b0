#!/usr/bin/python3
"""Export a PyTorch model to a dp model file (docs/model-format.md), for `dp train/memprof/demo/plan
--model FILE.json`.

    tools/export_model.py torchvision.models:resnet50 --kwargs '{"num_classes": 10}' \\
            --input 3x64x64 --out resnet50.json [--weights resnet50.safetensors]
    tools/export_model.py my_project/net.py:Net --input 3x32x32 --out net.json
    tools/export_model.py nanoGPT/model.py:GPT --config GPTConfig --kwargs '{"n_layer": 6}' \\
            --input tokens:256 --out gpt.json --weights gpt.safetensors

The spec is `package.module:callable` or `path/to/file.py:callable`, a class or a factory that
returns an nn.Module; --kwargs its arguments as a JSON object, or with --config CLASS those of the
one configuration object it takes (nanoGPT's GPT(GPTConfig(...))). The model is traced with torch.fx
(every node with its output shape from a run on a batch of two random samples, on a copy, so the
module's state is untouched); --weights writes its state_dict() as safetensors, for dp's --init.
The input shape is checked first (the model must run on it: one message where it does not); then
every node outside the ops dp runs is listed in one refusal, each with its op, module path, source
line and what to write instead where there is a plain way; a line torch.fx cannot trace is named
with what about it (exit 2 for each).
"""
import argparse
import contextlib
import copy
import importlib
import importlib.util
import json
import math
import operator
import os
import pathlib
import re
import sys
import tempfile

FORMAT, VERSION = "dp-model", 1


class ExportError(Exception):
    pass


def fail(message):
    print(f"export_model: {message}", file=sys.stderr)
    sys.exit(2)


_loaded = {}  # a file or module imported once: the spec's and its --config class share it


def load_callable(spec):
    if ":" not in spec:
        raise ExportError(f"the spec '{spec}' is not package.module:callable or path/to/file.py:callable")
    where, name = spec.rsplit(":", 1)
    if where in _loaded:
        module = _loaded[where]
    elif where.endswith(".py"):
        if not os.path.isfile(where):
            raise ExportError(f"{where}: no such file")
        sys.path.insert(0, os.path.dirname(os.path.abspath(where)))
        loader = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(where))[0], where)
        module = importlib.util.module_from_spec(loader)
        try:
            loader.loader.exec_module(module)
        except Exception as e:  # the user's file failed to import: say so, not a traceback
            raise ExportError(f"{where} does not import: {type(e).__name__}: {e}")
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise ExportError(f"cannot import '{where}': {e}")
    _loaded[where] = module
    if not hasattr(module, name):
        raise ExportError(f"'{where}' has no '{name}'")
    return getattr(module, name)


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


def parse_input(text):
    if text.startswith("tokens:"):
        t = text[len("tokens:"):]
        if not t.isdigit() or int(t) < 1:
            raise ExportError(f"--input {text}: tokens:T takes a positive T")
        return "tokens", [int(t)]
    parts = text.lower().split("x")
    if not all(p.isdigit() and int(p) > 0 for p in parts) or len(parts) not in (1, 3):
        raise ExportError(f"--input {text}: give one sample's shape as CxHxW (e.g. 3x32x32), F for a vector of F "
                          "features, or tokens:T")
    return "image", [int(p) for p in parts]


def where_of(node):
    """The user's source line a node came from ("net.py:12"), from fx's recorded stack trace."""
    trace = getattr(node, "stack_trace", None) or ""
    frames = re.findall(r'File "([^"]+)", line (\d+)', trace)
    tracer_at = [i for i, (f, _) in enumerate(frames) if f.endswith(os.path.join("fx", "_symbolic_trace.py"))]
    import torch
    torch_dir = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "")
    user = [(i, f, line) for i, (f, line) in enumerate(frames)
            if not f.startswith("<") and not os.path.abspath(f).startswith(torch_dir)
            and os.path.abspath(f) != os.path.abspath(__file__)]
    if not user:
        return ""
    # torch 1.13 lists the innermost frame first (before the tracer's); torch 2.x last.
    i, f, line = user[0] if tracer_at and tracer_at[0] > user[0][0] else user[-1]
    return f"{os.path.basename(f)}:{line}"


def pair(v):
    return list(v) if isinstance(v, (tuple, list)) else v


def module_op(m):
    """(op, attrs) for a module dp runs, None otherwise."""
    import torch.nn as nn
    if type(m) is nn.Linear:
        return "linear", {"in_features": m.in_features, "out_features": m.out_features, "bias": m.bias is not None}
    if type(m) is nn.Conv2d:
        return "conv2d", {"in_channels": m.in_channels, "out_channels": m.out_channels,
                          "kernel_size": pair(m.kernel_size), "stride": pair(m.stride), "padding": pair(m.padding),
                          "dilation": pair(m.dilation), "groups": m.groups, "bias": m.bias is not None,
                          "padding_mode": m.padding_mode}
    if type(m) is nn.BatchNorm2d:
        return "batch_norm2d", {"num_features": m.num_features, "eps": m.eps, "momentum": m.momentum,
                                "affine": m.affine, "track_running_stats": m.track_running_stats}
    if type(m) is nn.LayerNorm:
        attrs = {"normalized_shape": list(m.normalized_shape), "eps": m.eps, "elementwise_affine": m.elementwise_affine}
        if m.elementwise_affine and getattr(m, "bias", None) is None:
            attrs["bias"] = False  # nn.LayerNorm(bias=False), PyTorch 2.1 on
        return "layer_norm", attrs
    if type(m) is nn.Embedding:
        if m.padding_idx is not None or m.max_norm is not None:
            return None
        return "embedding", {"num_embeddings": m.num_embeddings, "embedding_dim": m.embedding_dim}
    if type(m) is nn.ReLU:
        return "relu", {}
    if type(m) is nn.ReLU6:
        return "relu6", {}
    if type(m) is nn.SiLU:
        return "silu", {}
    if type(m) is nn.Sigmoid:
        return "sigmoid", {}
    if type(m) is nn.Hardswish:
        return "hardswish", {}
    if type(m) is nn.Hardsigmoid:
        return "hardsigmoid", {}
    if type(m) is nn.Tanh:
        return "tanh", {}
    if type(m) is nn.Hardtanh and m.min_val == 0.0 and m.max_val == 6.0:
        return "relu6", {}
    if type(m) is nn.GELU:
        return "gelu", {"approximate": getattr(m, "approximate", "none")}
    if type(m) is nn.Dropout:
        return "dropout", {"p": m.p}
    if type(m) is nn.MaxPool2d:
        if m.return_indices:
            return None
        return "max_pool2d", {"kernel_size": pair(m.kernel_size), "stride": pair(m.stride),
                              "padding": pair(m.padding), "dilation": pair(m.dilation), "ceil_mode": m.ceil_mode}
    if type(m) is nn.AvgPool2d:
        return "avg_pool2d", {"kernel_size": pair(m.kernel_size), "stride": pair(m.stride), "padding": pair(m.padding),
                              "ceil_mode": m.ceil_mode, "count_include_pad": m.count_include_pad,
                              "divisor_override": m.divisor_override}
    if type(m) is nn.AdaptiveAvgPool2d:
        return "adaptive_avg_pool2d", {"output_size": pair(m.output_size)}
    if type(m) is nn.Flatten:
        return "flatten", {"start_dim": m.start_dim, "end_dim": m.end_dim}
    if type(m) is nn.Identity:
        return "identity", {}
    if is_window_attention(m):
        return window_attention_op(m)
    if type(m) is nn.MultiheadAttention:  # the call's arguments decide the rest (attention_op)
        return "multihead_attention", {
            "embed_dim": m.embed_dim, "num_heads": m.num_heads, "bias": m.in_proj_bias is not None,
            "dropout": m.dropout, "batch_first": m.batch_first, "add_bias_kv": m.bias_k is not None,
            "add_zero_attn": m.add_zero_attn, "kdim": m.kdim, "vdim": m.vdim}
    return None


def is_window_attention(m):
    """Swin's shifted-window attention (v1 and v2) or MaxViT's relative positional attention."""
    name = f"{type(m).__module__}.{type(m).__qualname__}"
    return name in ("torchvision.models.swin_transformer.ShiftedWindowAttention",
                    "torchvision.models.swin_transformer.ShiftedWindowAttentionV2",
                    "torchvision.models.maxvit.RelativePositionalMultiHeadAttention")


def cpb_mlp_width(m):
    """Swin V2's cpb_mlp width: torchvision's Sequential(Linear(2, w), ReLU, Linear(w, heads, bias=False))."""
    import torch.nn as nn
    mlp = m.cpb_mlp
    ok = (type(mlp) is nn.Sequential and len(mlp) == 3 and type(mlp[0]) is nn.Linear and type(mlp[1]) is nn.ReLU
          and type(mlp[2]) is nn.Linear and mlp[0].in_features == 2 and mlp[0].bias is not None
          and mlp[2].in_features == mlp[0].out_features and mlp[2].out_features == m.num_heads and mlp[2].bias is None)
    if not ok:
        raise ExportError(f"module {type(m).__module__}.{type(m).__name__}: its cpb_mlp is not torchvision's "
                          f"Linear(2, w), ReLU, Linear(w, num_heads, bias=False): {mlp}")
    return mlp[0].out_features


def window_attention_op(m):
    """(op, attrs) of torchvision's window attention. dp computes the relative position index
    from the window (torchvision's formula); a module whose buffer holds other values is refused."""
    import torch
    swin = type(m).__name__ in ("ShiftedWindowAttention", "ShiftedWindowAttentionV2")
    wh, ww = (m.window_size if swin else (m.size, m.size))
    ys, xs = torch.meshgrid(torch.arange(wh), torch.arange(ww), indexing="ij")
    ys, xs = ys.flatten(), xs.flatten()
    want = (ys[:, None] - ys[None, :] + wh - 1) * (2 * ww - 1) + (xs[:, None] - xs[None, :] + ww - 1)
    index = m.relative_position_index
    if index.numel() != want.numel() or not torch.equal(index.flatten().to(want.dtype), want.flatten()):
        raise ExportError(f"module {type(m).__module__}.{type(m).__name__}: its relative_position_index is not "
                          f"torchvision's for a {wh}x{ww} window; dp computes that one")
    if swin:
        attrs = {"dim": m.qkv.in_features, "window_size": list(m.window_size), "shift_size": list(m.shift_size),
                 "num_heads": m.num_heads, "qkv_bias": m.qkv.bias is not None, "proj_bias": m.proj.bias is not None,
                 "attention_dropout": m.attention_dropout, "dropout": m.dropout}
        if type(m).__name__ == "ShiftedWindowAttention":
            return "shifted_window_attention", attrs
        return "shifted_window_attention_v2", {**attrs, "cpb_hidden": cpb_mlp_width(m)}
    return "relative_position_attention", {"feat_dim": m.to_qkv.in_features, "head_dim": m.head_dim,
                                           "max_seq_len": m.max_seq_len}


def pad_nodes(name, x, shape, pads, where):
    """Zero padding of x (its shape with the batch's) as one "pad" node per padded dimension, the
    last named `name`; pads are F.pad's (last dimension first, (before, after) pairs). Returns the
    nodes and the padded shape."""
    shape = list(shape)
    todo = [(len(shape) - 1 - i, pads[2 * i], pads[2 * i + 1]) for i in range(len(pads) // 2)
            if pads[2 * i] or pads[2 * i + 1]]
    nodes, source = [], x
    for k, (dim, before, after) in enumerate(todo):
        shape[dim] += before + after
        out = name if k == len(todo) - 1 else f"{name}_pad{dim}"
        nodes.append({"name": out, "op": "pad", "module": "", "inputs": [source],
                      "attrs": {"dim": dim, "before": before, "after": after}, "shape": shape[1:], "where": where})
        source = out
    return nodes, shape


def functional_pad_nodes(node, shapes, where):
    """F.pad(x, pad, mode="constant", value=0) as pad nodes; another mode or value, a negative pad
    (a crop) or one of the batch's dimension is refused."""
    import torch.fx
    args, kw = list(node.args), node.kwargs
    x = args[0]
    pads = args[1] if len(args) > 1 else kw.get("pad")
    mode = args[2] if len(args) > 2 else kw.get("mode", "constant")
    value = args[3] if len(args) > 3 else kw.get("value", None)
    at = f" at {where}" if where else ""
    what = f"F.pad (node '{node.name}'){at}"
    shape = list(shapes[x.name].shape)
    if mode != "constant" or not (value is None or value == 0):
        raise ExportError(f"{what}: mode {mode!r}, value {value!r}; dp pads with zeros only (mode 'constant', value 0)")
    if not isinstance(pads, (list, tuple)) or len(pads) % 2 or any(isinstance(p, torch.fx.Node) for p in pads) \
            or len(pads) // 2 > len(shape):
        raise ExportError(f"{what}: its pad {pads} is not pairs of numbers for the last dimensions")
    pads = [int(p) for p in pads]
    if any(p < 0 for p in pads):
        raise ExportError(f"{what}: a negative pad {pads} crops; slice instead (x[:, a:b]: a narrow)")
    if len(pads) // 2 == len(shape) and (pads[-2] or pads[-1]):
        raise ExportError(f"{what}: pads the batch's dimension; dp keeps dimension 0 the samples")
    nodes, _ = pad_nodes(node.name, x.name, shape, pads, where)
    if not nodes:  # nothing to pad
        nodes = [{"name": node.name, "op": "identity", "module": "", "inputs": [x.name], "attrs": {},
                  "shape": shape[1:], "where": where}]
    return nodes


def patch_merging_nodes(node, shapes, where):
    """torchvision's _patch_merging_pad (Swin's patch merging, [.., H, W, C] -> [.., H/2, W/2, 4C]
    from the pixels (0, 0), (1, 0), (0, 1), (1, 1) of each 2x2 block): an odd H or W zero-padded by
    one (torchvision's F.pad), then a view, a permute and a view: [H/2, 2, W/2, 2, C] ordered
    (H/2, W/2, the column's 2, the row's 2, C)."""
    x = node.args[0]
    shape = list(shapes[x.name].shape)
    if len(shape) != 4:
        at = f" at {where}" if where else ""
        raise ExportError(f"torchvision's _patch_merging_pad (node '{node.name}'){at}: its input "
                          f"{shape[1:]} is not [H, W, C]")
    base = node.name
    padded, shape = pad_nodes(f"{base}_padded", x.name, shape, [0, 0, 0, shape[2] % 2, 0, shape[1] % 2], where)
    source = padded[-1]["name"] if padded else x.name
    h, w, c = (int(d) for d in shape[1:])
    return padded + [
        {"name": f"{base}_blocks", "op": "reshape", "module": "", "inputs": [source], "attrs": {},
         "shape": [h // 2, 2, w // 2, 2, c], "where": where},
        {"name": f"{base}_ordered", "op": "permute", "module": "", "inputs": [f"{base}_blocks"],
         "attrs": {"dims": [0, 1, 3, 4, 2, 5]}, "shape": [h // 2, w // 2, 2, 2, c], "where": where},
        {"name": base, "op": "reshape", "module": "", "inputs": [f"{base}_ordered"], "attrs": {},
         "shape": [h // 2, w // 2, 4 * c], "where": where}]


def fold_transposes(nodes, output):
    """A permute that swaps the last two dimensions and is read only by a matmul, as its second
    operand (`q @ k.transpose(-2, -1)`), becomes the matmul's trans_b: dp reads k transposed
    instead of copying it."""
    readers = {}
    for n in nodes:
        for i in n["inputs"]:
            readers.setdefault(i, []).append(n)
    by_name = {n["name"]: n for n in nodes}
    folded = set()
    for n in nodes:
        if n["op"] != "matmul" or n["attrs"].get("trans_b"):
            continue
        p = by_name.get(n["inputs"][1])
        if p is None or p["op"] != "permute" or p["name"] == output or len(readers.get(p["name"], [])) != 1 \
                or n["inputs"][0] == p["name"]:
            continue
        dims = p["attrs"]["dims"]
        if dims != list(range(len(dims) - 2)) + [len(dims) - 1, len(dims) - 2]:
            continue
        n["inputs"] = [n["inputs"][0], p["inputs"][0]]
        n["attrs"] = dict(n["attrs"], trans_b=True)
        folded.add(p["name"])
    return [n for n in nodes if n["name"] not in folded]


def attention_op(node, m, attrs, shapes, where):
    """nn.MultiheadAttention called as self-attention (query, key and value one value), its output
    read (getitem 0), not its weights: (op and attrs, input names, the output's shape)."""
    import torch.fx
    args = list(node.args) + [node.kwargs.get(k) for k in ("query", "key", "value")][len(node.args):]
    q, k, v = (args + [None] * 3)[:3]
    at = f" at {where}" if where else ""
    if not (isinstance(q, torch.fx.Node) and q is k and k is v):
        raise ExportError(f"module nn.MultiheadAttention ('{node.target}'){at}: dp runs it as self-attention only "
                          "(query, key and value one value)")
    for name in ("key_padding_mask", "attn_mask"):
        if node.kwargs.get(name) is not None:
            raise ExportError(f"module nn.MultiheadAttention ('{node.target}'){at}: {name} is not run by dp")
    reads = {u.args[1] for u in node.users if u.target is operator.getitem and u.users}
    attrs = dict(attrs, self_attention=True, need_weights=1 in reads)
    out = next((u for u in node.users if u.target is operator.getitem and u.args[1] == 0), None)
    if out is None:
        raise ExportError(f"module nn.MultiheadAttention ('{node.target}'){at}: its output is not read")
    return ("multihead_attention", attrs), [q.name], out.name


def function_op(node):
    """(op, attrs) for a call_function or call_method node dp runs, None otherwise."""
    import torch
    import torch.fx
    import torch.nn.functional as F
    t, args, kw = node.target, node.args, node.kwargs

    def arg(i, name, default):
        return args[i] if len(args) > i else kw.get(name, default)

    def two_tensors():
        return len(args) == 2 and all(isinstance(a, torch.fx.Node) for a in args)

    def softmax_attrs(op):
        dim = arg(1, "dim", None)
        return None if dim is None or arg(2, "dtype", None) is not None else (op, {"dim": dim})

    def permute_attrs():
        dims = list(args[1:]) if len(args) > 2 or not isinstance(arg(1, "dims", None), (list, tuple)) \
            else list(arg(1, "dims", None))
        return "permute", {"dims": dims}

    def transpose_attrs():
        return "permute", {"dim0": arg(1, "dim0", None), "dim1": arg(2, "dim1", None)}

    def mean_attrs(dim_at):
        dim = arg(dim_at, "dim", None)
        return None if dim is None else ("mean", {"dim": list(dim) if isinstance(dim, (tuple, list)) else dim,
                                                   "keepdim": bool(arg(dim_at + 1, "keepdim", False))})

    if node.op == "call_function":
        if t in (operator.matmul, torch.matmul, torch.bmm) and two_tensors():
            return "matmul", {}
        if t in (F.softmax, torch.softmax):
            return softmax_attrs("softmax")
        if t in (F.log_softmax, torch.log_softmax):
            return softmax_attrs("log_softmax")
        if t is torch.permute:
            return "permute", {"dims": list(arg(1, "dims", None))}
        if t in (torch.transpose, torch.swapaxes, torch.swapdims):
            return transpose_attrs()
        if t in (operator.add, operator.iadd, torch.add) and "alpha" not in kw and two_tensors():
            return "add", {}
        if t in (operator.mul, operator.imul, torch.mul) and two_tensors():
            return "mul", {}
        if t is torch.mean:
            return mean_attrs(1)
        if t in (F.relu, torch.relu):
            return "relu", {}
        if t is F.relu6:
            return "relu6", {}
        if t is F.silu:
            return "silu", {}
        if t in (torch.sigmoid, F.sigmoid):
            return "sigmoid", {}
        if t is F.hardswish:
            return "hardswish", {}
        if t is F.hardsigmoid:
            return "hardsigmoid", {}
        if t in (torch.tanh, F.tanh):
            return "tanh", {}
        if t is F.gelu:
            return "gelu", {"approximate": kw.get("approximate", "none")}
        if t is torch.flatten:
            return "flatten", {"start_dim": arg(1, "start_dim", 0), "end_dim": arg(2, "end_dim", -1)}
        if t in (torch.unsqueeze, torch.squeeze, torch.reshape):
            return "reshape", {}
        if t is torch.cat:
            return "cat", {"dim": arg(1, "dim", 0)}
        if t is F.avg_pool2d:
            return "avg_pool2d", {"kernel_size": pair(arg(1, "kernel_size", None)),
                                  "stride": pair(arg(2, "stride", None)), "padding": pair(arg(3, "padding", 0)),
                                  "ceil_mode": arg(4, "ceil_mode", False),
                                  "count_include_pad": arg(5, "count_include_pad", True),
                                  "divisor_override": arg(6, "divisor_override", None)}
        if t is F.adaptive_avg_pool2d:
            return "adaptive_avg_pool2d", {"output_size": pair(arg(1, "output_size", None))}
        if t is F.dropout:
            return "dropout", {"p": arg(1, "p", 0.5), "training": bool(arg(2, "training", True))}
        if t is F.max_pool2d:
            if arg(6, "return_indices", False):
                return None
            return "max_pool2d", {"kernel_size": pair(arg(1, "kernel_size", None)),
                                  "stride": pair(arg(2, "stride", None)), "padding": pair(arg(3, "padding", 0)),
                                  "dilation": pair(arg(4, "dilation", 1)), "ceil_mode": arg(5, "ceil_mode", False)}
        if getattr(t, "__module__", "") == "torchvision.ops.stochastic_depth" and t.__name__ == "stochastic_depth":
            return "stochastic_depth", {"p": arg(1, "p", None), "mode": arg(2, "mode", None),
                                        "training": bool(arg(3, "training", True))}
        return None
    if node.op == "call_method":
        if t in ("view", "reshape", "unsqueeze", "squeeze"):  # views: the recorded shape says which
            return "reshape", {}
        if t == "flatten":
            return "flatten", {"start_dim": arg(1, "start_dim", 0), "end_dim": arg(2, "end_dim", -1)}
        if t in ("relu", "sigmoid", "tanh"):
            return t, {}
        if t in ("add", "add_", "__add__") and "alpha" not in kw and two_tensors():
            return "add", {}
        if t in ("mul", "mul_", "__mul__") and two_tensors():
            return "mul", {}
        if t == "mean":
            return mean_attrs(1)
        if t == "contiguous":
            return "identity", {}
        if t in ("matmul", "bmm", "__matmul__") and two_tensors():
            return "matmul", {}
        if t == "softmax":
            return softmax_attrs("softmax")
        if t == "log_softmax":
            return softmax_attrs("log_softmax")
        if t == "permute":
            return permute_attrs()
        if t in ("transpose", "swapaxes", "swapdims"):
            return transpose_attrs()
    return None


MULTIPLY = (operator.mul, operator.imul, "mul", "__mul__", "__rmul__")
DIVIDE = (operator.truediv, operator.itruediv, "div", "__truediv__")


def is_sdpa(target):
    """F.scaled_dot_product_attention (PyTorch 2.x; nanoGPT's model.py calls it where it exists)."""
    import torch.nn.functional as F
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    return sdpa is not None and target is sdpa


def sdpa_nodes(node, shapes, values, where):
    """F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale) as the ops
    of its definition: kᵀ, q @ kᵀ, the scale (1/√E by default), the causal mask (is_causal, or an
    attn_mask that is the causal one), softmax, dropout (a dropout site whatever dropout_p, so the
    sites after it keep their numbers), @ v. A mask other than the causal one is refused."""
    import math
    import torch
    import torch.fx
    names = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")
    given = dict(zip(names, node.args))
    given.update(node.kwargs)
    q, k, v = given["query"], given["key"], given["value"]
    mask, p, causal = given.get("attn_mask"), float(given.get("dropout_p", 0.0)), bool(given.get("is_causal", False))
    at = f" at {where}" if where else ""
    shape = list(shapes[node.name].shape)[1:]
    rows, cols = int(shapes[q.name].shape[-2]), int(shapes[k.name].shape[-2])
    if mask is not None:
        value = values.get(mask.name) if isinstance(mask, torch.fx.Node) else None
        # a boolean mask says which keys take part: the causal one is tril
        if value is None or value.dtype != torch.bool or not is_causal_mask(~value, rows, cols):
            raise ExportError(f"F.scaled_dot_product_attention (node '{node.name}'){at}: its attn_mask is not the "
                              "causal one; dp runs is_causal=True or that mask")
        causal = True
    k_shape = list(shapes[k.name].shape)[1:]
    kt_shape = k_shape[:-2] + [k_shape[-1], k_shape[-2]]
    rank = len(k_shape) + 1
    dims = list(range(rank))
    dims[-1], dims[-2] = dims[-2], dims[-1]
    factor = given.get("scale") or 1.0 / math.sqrt(int(shapes[q.name].shape[-1]))
    scores = shape[:-1] + [cols]
    base = node.name
    out = [{"name": f"{base}_kt", "op": "permute", "module": "", "inputs": [k.name], "attrs": {"dims": dims},
            "shape": kt_shape, "where": where},
           {"name": f"{base}_scores", "op": "matmul", "module": "", "inputs": [q.name, f"{base}_kt"], "attrs": {},
            "shape": scores, "where": where},
           {"name": f"{base}_scaled", "op": "scale", "module": "", "inputs": [f"{base}_scores"],
            "attrs": {"factor": float(factor)}, "shape": scores, "where": where}]
    last = f"{base}_scaled"
    if causal:
        out.append({"name": f"{base}_masked", "op": "masked_fill", "module": "", "inputs": [last],
                    "attrs": {"mask": "causal", "value": "-inf"}, "shape": scores, "where": where})
        last = f"{base}_masked"
    out.append({"name": f"{base}_att", "op": "softmax", "module": "", "inputs": [last], "attrs": {"dim": -1},
                "shape": scores, "where": where})
    out.append({"name": f"{base}_dropped", "op": "dropout", "module": "", "inputs": [f"{base}_att"],
                "attrs": {"p": p}, "shape": scores, "where": where})
    out.append({"name": base, "op": "matmul", "module": "", "inputs": [f"{base}_dropped", v.name], "attrs": {},
                "shape": shape, "where": where})
    return out


def size_source(node):
    """The tensor a size expression reads its size from (x in x.shape[0], x.size(0)); None if none."""
    import torch.fx
    while isinstance(node, torch.fx.Node) and is_size(node):
        node = node.args[0] if node.args else None
    return node if isinstance(node, torch.fx.Node) else None


def special_op(node, meta, shapes, values, size_of):
    """(op, attrs, input names) for the calls whose attributes come from the traced values rather
    than the call alone: a fused F.layer_norm, masked_fill with a constant mask, a part of split or
    chunk, arange. None for any other node."""
    import math
    import torch
    import torch.fx
    import torch.nn.functional as F
    t, args, kw = node.target, node.args, node.kwargs
    if fused_module(node):
        eps = args[4] if len(args) > 4 else kw.get("eps", 1e-5)
        attrs = {"normalized_shape": [int(meta.shape[-1])], "eps": eps, "elementwise_affine": True}
        if not has_bias(node):
            attrs["bias"] = False
        return "layer_norm", attrs, [args[0].name]
    if t == "masked_fill" or t is torch.masked_fill:
        x, mask, value = (list(args) + [kw.get("mask"), kw.get("value")])[:3]
        if not isinstance(mask, torch.fx.Node) or mask.name not in values or isinstance(value, torch.fx.Node):
            return None
        rows, cols = int(meta.shape[-2]), int(meta.shape[-1])
        if not is_causal_mask(values[mask.name], rows, cols):
            raise ExportError(f"{describe_target(node)} (node '{node.name}') at {where_of(node)}: its mask is not "
                              "the causal one (True above the diagonal); dp runs masked_fill with that mask")
        v = float(value)
        return "masked_fill", {"mask": "causal", "value": v if math.isfinite(v) else ("inf" if v > 0 else "-inf")}, \
            [x.name]
    if t is operator.getitem and isinstance(args[0], torch.fx.Node) and args[0].target in (
            "split", "chunk", torch.split, torch.chunk):
        whole = args[0]
        x = whole.args[0]
        size = whole.args[1] if len(whole.args) > 1 else whole.kwargs.get(
            "split_size_or_sections", whole.kwargs.get("split_size", whole.kwargs.get("chunks")))
        dim = whole.args[2] if len(whole.args) > 2 else whole.kwargs.get("dim", 0)
        rank = len(shapes[x.name].shape)
        dim = dim % rank
        extent = int(shapes[x.name].shape[dim])
        if whole.target in ("chunk", torch.chunk):
            size = -(-extent // int(size_of(size)))
        if isinstance(size, (list, tuple)):
            sections = [int(size_of(v)) for v in size]
        else:
            size = int(size_of(size))
            sections = [min(size, extent - s) for s in range(0, extent, size)]
        i = args[1]
        return "narrow", {"dim": dim, "start": sum(sections[:i]), "length": sections[i]}, [x.name]
    if t == "expand" and node.op == "call_method":
        # x.expand(n, -1, ...) of a value without the batch dimension: n is a tensor's size(0)
        x, sizes = args[0], list(args[1:])
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
            sizes = list(sizes[0])
        source = size_source(sizes[0]) if sizes else None
        if source is None or any(not (v == -1 or (not isinstance(v, torch.fx.Node) and v == 1)) for v in sizes[1:]):
            return None
        return "expand", {}, [x.name, source.name]
    if t is operator.getitem and isinstance(args[0], torch.fx.Node) and isinstance(args[1], tuple) \
            and meta is not None and hasattr(meta, "shape"):
        # x[:, i] and x[:, a:b] (one index or slice besides the batch's whole slice)
        x, index = args
        whole = slice(None, None, None)
        picks = [(d, v) for d, v in enumerate(index) if v != whole]
        if len(picks) != 1 or picks[0][0] == 0 or Ellipsis in index:
            return None
        d, v = picks[0]
        extent = int(shapes[x.name].shape[d])
        if isinstance(v, int):
            return "select", {"dim": d, "index": v % extent}, [x.name]
        if isinstance(v, slice) and v.step in (None, 1):
            start, stop, _ = v.indices(extent)
            return "narrow", {"dim": d, "start": start, "length": stop - start}, [x.name]
        return None
    if t == "narrow" and node.op == "call_method":
        x, dim, start, length = (list(args) + [kw.get("dim"), kw.get("start"), kw.get("length")])[:4]
        return "narrow", {"dim": int(size_of(dim)) % len(meta.shape), "start": int(size_of(start)),
                          "length": int(size_of(length))}, [x.name]
    if len(args) == 2 and (t in MULTIPLY or t is torch.mul or t in DIVIDE or t is torch.div) \
            and "rounding_mode" not in kw:
        def number(a):  # a Python number or a size expression's value
            if isinstance(a, torch.fx.Node) and is_size(a):
                a = size_of(a)
            return a if isinstance(a, (int, float)) and not isinstance(a, bool) else None
        a, b = args
        divide = t in DIVIDE or t is torch.div
        if isinstance(a, torch.fx.Node) and not is_size(a) and number(b) is not None and number(b) != 0:
            return "scale", {"factor": 1.0 / number(b) if divide else float(number(b))}, [a.name]
        if not divide and isinstance(b, torch.fx.Node) and not is_size(b) and number(a) is not None:
            return "scale", {"factor": float(number(a))}, [b.name]
        return None
    if t is torch.arange:
        a = [int(size_of(v)) for v in args]
        start, end, step = (0, a[0], 1) if len(a) == 1 else (a[0], a[1], a[2] if len(a) > 2 else 1)
        start, end, step = int(size_of(kw.get("start", start))), int(size_of(kw.get("end", end))), \
            int(size_of(kw.get("step", step)))
        return "arange", {"start": start, "end": end, "step": step}, []
    return None


# Arithmetic on sizes (k * h * w, c // groups) and comparisons of them: a size too.
SIZE_ARITHMETIC = (operator.mul, operator.add, operator.sub, operator.floordiv, operator.mod, operator.neg,
                   operator.truediv, operator.pow, math.sqrt, math.floor, math.ceil, math.log,
                   operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge)


def is_size(node):
    """x.size(...) / x.shape, their items and arithmetic on them: a view's arguments, not values."""
    import torch
    import torch.fx
    if node.op == "call_method" and node.target in ("size", "dim"):
        return True
    if node.op == "call_function" and (node.target in SIZE_ARITHMETIC or node.target is torch._assert):
        # torch._assert(h == self.image_size, ...): a check of sizes, which the export's example passed
        traced = [a for a in node.args if isinstance(a, torch.fx.Node)]
        return bool(traced) and all(is_size(a) for a in traced)
    if node.op == "call_function" and node.target in (getattr, operator.getitem):
        src = node.args[0]
        return isinstance(src, torch.fx.Node) and (
            is_size(src) or (node.target is getattr and node.args[1] in ("shape", "device", "dtype")))
    return False


def tensor_inputs(node):
    import torch.fx
    found = []

    def walk(a):
        if isinstance(a, torch.fx.Node):
            if not is_size(a):
                found.append(a)
        elif isinstance(a, (list, tuple)):
            for b in a:
                walk(b)
        elif isinstance(a, dict):
            for b in a.values():
                walk(b)
    walk(node.args)
    walk(node.kwargs)
    return found


def describe_target(node):
    t = node.target
    if node.op == "call_method":
        return f"Tensor.{t}"
    return getattr(t, "__module__", "") + "." + getattr(t, "__name__", str(t))


# What to write instead of an op dp does not run, where there is a plain way (the refusal says it).
HINTS = {
    "torch.nn.functional.max_pool2d": "return_indices=False (dp keeps no indices)",
    # Training returns (logits, aux...): dp trains one output, the logits.
    "torchvision.models.googlenet.GoogLeNetOutputs": "--kwargs '{\"aux_logits\": false}': dp trains one output",
    "torchvision.models.inception.InceptionOutputs": "--kwargs '{\"aux_logits\": false}': dp trains one output",
    "torch.nn.functional.batch_norm": "the module nn.BatchNorm2d",
    "torch.nn.functional.linear": "the module nn.Linear",
    "torch.nn.functional.conv2d": "the module nn.Conv2d",
    "torch._C._nn.linear": "the module nn.Linear",
    "torch.sub": "x + (-1) * y, or a module",
    "Tensor.sub": "x + (-1) * y, or a module",
}


def user_line(tb):
    """The innermost line of the user's own code in a traceback ("net.py:12: q, k, v = x.chunk(3, -1)"):
    not torch's, not this exporter's; "" when there is none."""
    import linecache
    import traceback
    import torch
    torch_dir = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "")
    mine = [f for f in traceback.extract_tb(tb) if not f.filename.startswith("<")
            and not os.path.abspath(f.filename).startswith(torch_dir)
            and os.path.abspath(f.filename) != os.path.abspath(__file__)]
    if not mine:
        return ""
    f = mine[-1]
    code = (f.line or linecache.getline(f.filename, f.lineno)).strip()
    return f"{os.path.basename(f.filename)}:{f.lineno}: {code}"


def first_line(e):
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"


def why_untraceable(code, e):
    """What about a line torch.fx could not trace, in the user's terms."""
    if re.search(r"\.shape\b|\.size\(|\.dim\(", code) and "=" in code:
        return ("it reads a traced tensor's shape or size as Python numbers, which torch.fx does not give "
                "(name the sizes from --input, or use x.flatten(1) and views with -1)")
    if re.match(r"^[\w\s,()\[\]*]+,[\w\s,()\[\]*]*=", code) or "for " in code:
        return ("it unpacks or iterates a traced value (a, b = ..., or a loop over one), which torch.fx cannot "
                "(index it instead: x.chunk(3, -1)[0], ...)")
    if re.search(r"\bif\b|\bwhile\b|\bbool\(|\.item\(\)", code):
        return "its control flow depends on a tensor's values, which torch.fx cannot trace"
    return f"torch.fx stopped there ({first_line(e)})"


def example_input(model, kind, shape):
    """A batch of two random samples of one sample's --input shape."""
    import torch
    if kind == "tokens":
        vocab = next((m.num_embeddings for m in model.modules() if isinstance(m, torch.nn.Embedding)), None)
        if vocab is None:
            raise ExportError("--input tokens:T needs a model with an nn.Embedding (its vocabulary)")
        return torch.randint(0, vocab, (2, *shape))
    return torch.randn(2, *shape, generator=torch.Generator().manual_seed(0))


def meta_copy(module):
    """A copy of the module with its parameters and buffers on the meta device, made without copying
    their data (GPT-2's 500 MB would be copied, then dropped); a tied parameter stays one."""
    import torch
    memo = {}
    for p in module.parameters():
        memo[id(p)] = torch.nn.Parameter(torch.empty_like(p, device="meta"), requires_grad=p.requires_grad)
    for b in module.buffers():
        memo[id(b)] = torch.empty_like(b, device="meta")
    return copy.deepcopy(module, memo)


def check_runs_on(model, example, text):
    """--input before anything else: the model runs on a batch of it (on a copy), or one message
    saying where and why not. On the meta device first (no memory or arithmetic); where that fails
    (an op without a meta kernel, a tensor made on the CPU, or the shape) on the CPU, which says why."""
    import torch
    try:
        with torch.no_grad():
            meta_copy(model)(example.to("meta"))
        return
    except Exception:
        pass
    try:
        with torch.no_grad():
            copy.deepcopy(model)(example)
    except Exception as e:
        at = user_line(e.__traceback__)
        raise ExportError(f"--input {text}: the model does not take samples of this shape ({first_line(e)})"
                          + (f" at {at}" if at else ""))


@contextlib.contextmanager
def unpacking_proxies():
    """While tracing: torch.fx unpacks a traced value (b, c, h, w = x.shape) on every Python.

    torch.fx unpacks a proxy into its items (getitem nodes: a view's arguments, as any x.size(i))
    when the calling instruction is UNPACK_SEQUENCE. PyTorch 1.13 finds that instruction at the
    frame's offset // 2, which Python 3.11's inline caches move (it then refuses, or fails on an
    index); this finds it by its offset. PyTorch 2.x finds it right itself and is left as it is."""
    import dis
    import inspect

    import torch.fx
    original = torch.fx.Proxy.__iter__
    if sys.version_info < (3, 11) or "f_lasti // 2" not in inspect.getsource(original):
        yield
        return

    def by_offset(self):
        caller = inspect.currentframe().f_back
        inst = next((i for i in dis.get_instructions(caller.f_code) if i.offset == caller.f_lasti), None)
        if inst is not None and inst.opname == "UNPACK_SEQUENCE":
            return (self[i] for i in range(inst.argval))
        return self.tracer.iter(self)
    torch.fx.Proxy.__iter__ = by_offset
    try:
        yield
    finally:
        torch.fx.Proxy.__iter__ = original


class NotASize(Exception):
    pass


def size_value(node, inputs, tensor_of=None):
    """The value of a size expression (x.size(1), x.shape[-1] * 2, t <= 1024, x.device) for the
    placeholders' values in `inputs`; NotASize for anything else. tensor_of(node) gives a traced
    tensor's value where a size is read from one (None: only the placeholders' are known)."""
    import torch
    import torch.fx

    def ev(a):
        if isinstance(a, torch.fx.Node):
            return size_value(a, inputs, tensor_of)
        if isinstance(a, (list, tuple)):
            return type(a)(ev(b) for b in a)
        return a
    if node.op == "placeholder":
        if node.name not in inputs:
            raise NotASize()
        return inputs[node.name]
    if node.op == "call_method" and node.target in ("size", "dim"):
        return getattr(ev(node.args[0]), node.target)(*[ev(a) for a in node.args[1:]])
    if node.op == "call_function" and node.target is getattr and node.args[1] in ("shape", "device", "dtype"):
        return getattr(ev(node.args[0]), node.args[1])
    if node.op == "call_function" and (node.target in SIZE_ARITHMETIC or node.target is operator.getitem):
        src = [ev(a) for a in node.args]
        if node.target is operator.getitem and isinstance(src[0], torch.Tensor):
            raise NotASize()
        return node.target(*src)
    if tensor_of is not None and not is_size(node):
        return tensor_of(node, inputs)
    raise NotASize()


class SizeTracer:
    """torch.fx's Tracer, knowing the input: a size used as a Python value — in control flow
    (`assert t <= block_size`, `if h % 2`), or as a number (`math.sqrt(k.size(-1))`, `int(...)`) —
    is evaluated on the example batch and on one a sample larger; equal, it is a constant of the
    export (specialised), else an error naming it."""

    def __init__(self, examples):
        import torch.fx
        outer = self
        self.examples = examples  # [{placeholder name: value}] at two batch sizes

        self.memo = {}  # batch size -> {node: its value} (tensor_of)

        class Tracer(torch.fx.Tracer):
            def to_bool(self, obj):
                return bool(outer.concrete(obj))

            def is_leaf_module(self, m, qualified_name):
                # torchvision's window attention runs as one op of dp's (module_op)
                return is_window_attention(m) or super().is_leaf_module(m, qualified_name)
        self.tracer = Tracer()
        self.tracer.record_stack_traces = True

    def concrete(self, proxy, same=True):
        import torch.fx
        # the tracer names placeholders after the forward's arguments, in order
        names = [n.name for n in proxy.node.graph.nodes if n.op == "placeholder"]
        try:
            values = [size_value(proxy.node, dict(zip(names, ex)), self.tensor_of) for ex in self.examples]
        except NotASize:
            raise torch.fx.proxy.TraceError("symbolically traced variables cannot be used as inputs to control flow")
        if same and values[0] != values[1]:
            raise torch.fx.proxy.TraceError(
                f"a size used as a Python value depends on the batch ({values[0]} at a batch of "
                f"{len(self.examples[0][0])}, {values[1]} at {len(self.examples[1][0])})")
        return values[0]

    def tensor_of(self, node, inputs):
        """A traced tensor on these inputs, for its sizes: the nodes traced so far evaluated up to
        it on the meta device (shapes without memory or arithmetic: GPT-2 at 1024 tokens costs
        nothing), each once per example batch (remembered: a model reads sizes in every layer)."""
        import torch
        import torch.fx
        memo = self.memo.setdefault(len(next(iter(inputs.values()))), {})

        def ev(n):
            if n in memo:
                return memo[n]
            args = torch.fx.node.map_arg(n.args, ev)
            kwargs = torch.fx.node.map_arg(n.kwargs, ev)
            if n.op == "placeholder":
                value = inputs[n.name]
                value = torch.empty_like(value, device="meta") if isinstance(value, torch.Tensor) else value
            elif n.op == "get_attr":  # the model's state, or a constant the trace made (on the root)
                value = self.meta_root if hasattr(self.meta_root, n.target.split(".")[0]) else self.tracer.root
                for part in n.target.split("."):
                    value = getattr(value, part)
                value = value.to("meta") if isinstance(value, torch.Tensor) else value
            elif n.op == "call_function":
                value = n.target(*args, **kwargs)
            elif n.op == "call_method":
                value = getattr(args[0], n.target)(*args[1:], **kwargs)
            elif n.op == "call_module":
                value = self.meta_root.get_submodule(n.target)(*args, **kwargs)
            else:
                raise NotASize()
            memo[n] = value
            return value
        # torch.fx patches nn.Module's __call__ and __getattr__ while tracing: modules run as
        # themselves here (its saved originals), then the patches go back.
        import torch.fx._symbolic_trace as fx_trace
        patched = torch.nn.Module.__call__, torch.nn.Module.__getattr__
        torch.nn.Module.__call__, torch.nn.Module.__getattr__ = fx_trace._orig_module_call, fx_trace._orig_module_getattr
        try:
            with torch.no_grad():
                return ev(node)
        except NotASize:
            raise
        except Exception:
            raise NotASize()
        finally:
            torch.nn.Module.__call__, torch.nn.Module.__getattr__ = patched

    @contextlib.contextmanager
    def numbers(self):
        """Proxy.__float__, __int__ and __index__ while tracing: a size's value (math.sqrt(k.size(-1)))."""
        import torch.fx
        original_getattr = torch.fx.Proxy.__getattr__

        def attribute(p, k):
            # the input's device and dtype are what they are (torch.arange(t, device=x.device)
            # then makes a constant: positions)
            if k in ("device", "dtype") and p.node.op == "placeholder":
                return getattr(self.concrete(p, same=False), k)
            if k in ("size", "shape") and p.node.op == "placeholder":
                # the input's sizes: numbers (from --input), but the batch's, which stays traced
                dims = [original_getattr(p, "size")(0)] + list(self.concrete(p, same=False).shape[1:])
                if k == "shape":
                    return tuple(dims)
                return lambda dim=None: tuple(dims) if dim is None else dims[dim]
            return original_getattr(p, k)
        added = {"__float__": lambda p: float(self.concrete(p)), "__int__": lambda p: int(self.concrete(p)),
                 "__index__": lambda p: int(self.concrete(p))}
        own = {k: torch.fx.Proxy.__dict__[k] for k in added if k in torch.fx.Proxy.__dict__}  # a PyTorch's own
        for k, f in added.items():
            setattr(torch.fx.Proxy, k, f)
        torch.fx.Proxy.__getattr__ = attribute
        try:
            yield
        finally:
            for k in added:
                if k in own:
                    setattr(torch.fx.Proxy, k, own[k])
                else:
                    delattr(torch.fx.Proxy, k)
            torch.fx.Proxy.__getattr__ = original_getattr

    def trace(self, model):
        import torch
        self.meta_root = meta_copy(model)  # the model's shapes, no memory
        with unpacking_proxies(), self.numbers():
            return self.tracer.trace(model)


def example_targets(model, kind, example):
    """What a model that computes its own loss takes as its second input: class ids, one per
    position of a token model, one per sample of an image model."""
    import torch
    if kind == "tokens":
        vocab = next(m.num_embeddings for m in model.modules() if isinstance(m, torch.nn.Embedding))
        return torch.randint(0, vocab, example.shape, generator=torch.Generator().manual_seed(1))
    return torch.zeros(len(example), dtype=torch.long)


def is_causal_mask(mask, rows, cols):
    """Is this boolean mask, broadcast over [..., rows, cols], True exactly above the diagonal?"""
    import torch
    m = mask.to(torch.bool)
    if m.dim() < 2 or m.shape[-2] != rows or m.shape[-1] != cols:
        return False
    want = torch.ones(rows, cols, dtype=torch.bool).triu(1)
    return bool((m.reshape(-1, rows, cols) == want).all())


def fused_module(node):
    """F.layer_norm(x, shape, m.weight, m.bias, eps) (nanoGPT's LayerNorm, ConvNeXt's LayerNorm2d
    inside), or with bias None (nanoGPT's bias=False): the parameters' module path when they are one
    module's, else None."""
    import torch.fx
    import torch.nn.functional as F
    if node.op != "call_function" or node.target is not F.layer_norm:
        return None
    args = list(node.args) + [None] * 5
    w = args[2] if args[2] is not None else node.kwargs.get("weight")
    b = args[3] if args[3] is not None else node.kwargs.get("bias")
    if b is None and isinstance(w, torch.fx.Node) and w.op == "get_attr":
        mw, _, nw = w.target.rpartition(".")
        return mw if mw and nw == "weight" else None
    if not (isinstance(w, torch.fx.Node) and isinstance(b, torch.fx.Node) and w.op == b.op == "get_attr"):
        return None
    mw, _, nw = w.target.rpartition(".")
    mb, _, nb = b.target.rpartition(".")
    return mw if mw == mb and mw and (nw, nb) == ("weight", "bias") else None


def has_bias(node):
    """Whether a fused F.layer_norm passes a bias (nanoGPT's bias=False passes None)."""
    args = list(node.args) + [None] * 5
    return (args[3] if args[3] is not None else node.kwargs.get("bias")) is not None


def export(model, kind, shape, name, source, input_text=None):
    import torch
    import torch.fx
    import torch.nn.functional as F
    from torch.fx.passes.shape_prop import _extract_tensor_metadata

    example = example_input(model, kind, shape)
    check_runs_on(model, example, input_text or "x".join(map(str, shape)))
    # Two batch sizes: a size used as a Python value must not depend on the batch, and every
    # value's first dimension must follow it (dp's ops keep dim 0 the samples).
    wider = torch.cat([example, example[:1]])
    examples = [(example, example_targets(model, kind, example)), (wider, example_targets(model, kind, wider))]
    tracer = SizeTracer(examples)
    try:
        graph = tracer.trace(model)
    except Exception as e:
        at = user_line(e.__traceback__)
        if not at:
            raise ExportError(f"torch.fx cannot trace the model ({first_line(e)})")
        raise ExportError(f"torch.fx cannot trace {at}: {why_untraceable(at.split(': ', 1)[1], e)}")
    gm = torch.fx.GraphModule(tracer.tracer.root, graph)
    modules = dict(gm.named_modules())
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) > 2:
        raise ExportError(f"the model takes {len(placeholders)} inputs ({', '.join(n.name for n in placeholders)}); "
                          "dp feeds one, and a target for a model that computes its own loss")
    input_node = placeholders[0]
    target_node = placeholders[1] if len(placeholders) == 2 else None

    def depends_on(seed):
        """The nodes whose values depend on seed's (sizes read from it are constants of the export,
        but the batch's, which x.expand(n, ...) takes: a class token for every sample)."""
        found, sizes = set(), set()
        for node in gm.graph.nodes:
            if node is seed or (not is_size(node) and any(a.name in found for a in node.all_input_nodes)):
                found.add(node.name)
            elif is_size(node) and any(a.name in found or a.name in sizes for a in node.all_input_nodes):
                sizes.add(node.name)
            if node.op == "call_method" and node.target == "expand" and any(
                    isinstance(a, torch.fx.Node) and a.name in sizes for a in node.args[1:]):
                found.add(node.name)
        return found
    from_input = depends_on(input_node)
    from_target = depends_on(target_node) if target_node is not None else set()
    by_name = {n.name: n for n in gm.graph.nodes}

    # The output: the value that is not the loss (nanoGPT returns (logits, loss)).
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    out = out_node.args[0]
    items = list(out) if isinstance(out, (tuple, list)) else [out]
    kept = [a for a in items if isinstance(a, torch.fx.Node) and a.name not in from_target]
    if len(kept) != 1 or not all(a is None or isinstance(a, torch.fx.Node) for a in items):
        raise ExportError("the model returns more than one value; dp trains one output with cross-entropy")
    output = kept[0].name  # (a name the nodes below may alias)
    # What only the loss reads: the target, the loss and the views of the output it takes.
    loss_only = set(from_target)
    for node in reversed(gm.graph.nodes):
        users = [u for u in node.users if u.op != "output"]
        if node.op not in ("placeholder", "output") and node.name != output and users and not any(
                u.op == "output" for u in node.users) and all(u.name in loss_only for u in users):
            loss_only.add(node.name)
    if target_node is not None:
        losses = [n for n in gm.graph.nodes if n.name in loss_only and n.op == "call_function"
                  and n.target is F.cross_entropy]
        if len(target_node.users) == 0 or not losses:
            raise ExportError(f"the model takes a second input ('{target_node.name}') that is not the target of a "
                              "cross-entropy loss; dp feeds one input")
        where = where_of(losses[0])
        print(f"export_model: the model computes its own loss (F.cross_entropy{' at ' + where if where else ''}); "
              "dp trains its logits with dp's cross-entropy", flush=True)

    # Constants: what depends on neither input (a causal mask from a buffer, positions, their
    # embedding). A mask that only masked_fill reads is folded into its attributes.
    def constant(node):
        return node.op not in ("placeholder", "output") and not is_size(node) and node.name not in from_input \
            and node.name not in loss_only
    def reads_as_mask(u, node):
        if u.target == "masked_fill" or u.target is torch.masked_fill:
            return len(u.args) > 1 and u.args[1] is node
        if u.op == "call_function" and is_sdpa(u.target):
            return (u.args[3] if len(u.args) > 3 else u.kwargs.get("attn_mask")) is node
        return False
    mask_only = set()
    for node in reversed(gm.graph.nodes):
        users = [u for u in node.users if not is_size(u)]
        if constant(node) and users and all(u.name in mask_only or reads_as_mask(u, node) for u in users):
            mask_only.add(node.name)
    fused = {n.name for n in gm.graph.nodes if fused_module(n)}
    fused_params = {a.name for n in gm.graph.nodes if n.name in fused for a in n.all_input_nodes if a.op == "get_attr"}

    # The masks' values are needed (is it the causal one?): they and the constants they come from
    # run on the CPU; everything else on the meta device, shapes without memory or arithmetic.
    need_real = set()
    for node in reversed(gm.graph.nodes):
        if node.name in mask_only or (constant(node) and any(u.name in need_real for u in node.users)):
            need_real.add(node.name)

    class Probe(torch.fx.Interpreter):
        """Each node's output shape (tensor_meta), keeping the values masked_fill reads as masks and
        those sizes are read from. on_meta: the model's state and the input on the meta device, but
        for need_real's nodes, which run on `real` (on the CPU)."""
        def __init__(self, module, real, on_meta):
            super().__init__(module)
            self.real_root, self.on_meta, self.real = real, on_meta, False
            self.values, self.shapes = {}, {}

        def run_node(self, n):
            self.real = not self.on_meta or n.name in need_real
            result = super().run_node(n)
            if isinstance(result, torch.Tensor):
                self.shapes[n.name] = _extract_tensor_metadata(result)
            if n.name in mask_only or any(is_size(u) for u in n.users):
                self.values[n.name] = result
            return result

        def fetch_args_kwargs_from_env(self, n):
            args, kwargs = super().fetch_args_kwargs_from_env(n)
            if self.real:
                return args, kwargs
            to_meta = (lambda a: a.to("meta") if isinstance(a, torch.Tensor) and a.device.type != "meta" else a)
            return torch.fx.node.map_aggregate(args, to_meta), torch.fx.node.map_aggregate(kwargs, to_meta)

        def get_attr(self, target, args, kwargs):
            value = self.real_root if self.real else self.module
            for part in target.split("."):
                value = getattr(value, part)
            return value

        def call_module(self, target, args, kwargs):
            root = self.real_root if self.real else self.module
            return root.get_submodule(target)(*args, **kwargs)

    def propagate(args):
        """Each node's output at this batch: on the meta device (the model's state too, a copy: BatchNorm's
        running stats move) where PyTorch has the ops' meta kernels (GPT-2 at 1024 tokens then costs
        no memory), else on the CPU, on a copy."""
        meta_error = None
        for on_meta in (True, False):
            # (a GraphModule's own deepcopy copies its state whatever the memo: the module it was
            # traced from is copied instead)
            module = torch.fx.GraphModule(meta_copy(tracer.tracer.root), copy.deepcopy(gm.graph)) if on_meta \
                else copy.deepcopy(gm)
            probe = Probe(module, gm, on_meta)
            try:
                with torch.no_grad():
                    probe.run(*args[:len(placeholders)])
            except Exception as e:
                if on_meta:
                    meta_error = e
                    continue
                at = user_line(e.__traceback__)
                raise ExportError(f"the model does not run on an input of shape {['N'] + shape}: {first_line(e)}"
                                  + (f" at {at}" if at else ""))
            return probe.shapes, probe.values
        raise meta_error
    shapes, values = propagate(examples[0])
    shapes3, _ = propagate(examples[1])

    def size_of(a):
        """An argument's value: a number as it is, a size expression evaluated on the example."""
        if isinstance(a, torch.fx.Node):
            try:
                return size_value(a, dict(zip([p.name for p in placeholders], examples[0])),
                                  lambda n, _: values[n.name] if n.name in values else size_value(n, {}))
            except NotASize:
                where = where_of(a)
                raise ExportError(f"'{a.name}'{' at ' + where if where else ''} is used as a number, but it is "
                                  "neither a constant nor a size of the input; dp's ops take it as a constant only")
        return a

    params = dict(model.named_parameters())
    # Tied parameters (nanoGPT's lm_head.weight is transformer.wte.weight): one parameter, its first
    # name in state_dict() order; each other name is tied to it.
    tied, first_name = {}, {}
    for k, v in model.state_dict(keep_vars=True).items():
        if isinstance(v, torch.nn.Parameter):
            if id(v) in first_name:
                tied[k] = first_name[id(v)]
            else:
                first_name[id(v)] = k
    in_tie = set(tied) | set(tied.values())
    emitted_params = set()
    nodes, refused = [], []
    attention, alias = set(), {}  # MultiheadAttention nodes; getitem(attention, 0) -> the attention's name

    def what_of(node):
        return f"{describe_target(node)} (node '{node.name}')"
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output") or is_size(node) or node.name in loss_only:
            continue
        if node.name in mask_only or node.name in fused_params:
            continue
        where = where_of(node)
        at = f" at {where}" if where else ""
        if node.op == "get_attr" and node.target not in model.state_dict():
            # a tensor the trace made (torch.arange(t) on the input's device): positions only
            value = getattr(gm, node.target)
            if value.dim() == 1 and not value.is_floating_point() and torch.equal(value, torch.arange(len(value))):
                nodes.append({"name": node.name, "op": "arange", "module": "", "inputs": [],
                              "attrs": {"start": 0, "end": len(value), "step": 1}, "shape": [len(value)],
                              "where": where})
                continue
            refused.append(f"a constant tensor{at} ({list(value.shape)}, {value.dtype}) that is not positions "
                           "0..n-1; dp runs none")
            continue
        if node.op == "get_attr" and node.target in params:
            # a parameter its module uses directly (class token, position embedding, layer scale)
            owner, _, attr = node.target.rpartition(".")
            nodes.append({"name": node.name, "op": "parameter", "module": owner, "inputs": [],
                          "attrs": {"name": attr}, "shape": list(params[node.target].shape), "where": where})
            continue
        if node.op == "get_attr":
            refused.append(f"buffer '{node.target}'{at} is used outside its module; dp runs buffers through the "
                           "modules that own them")
            continue
        if node.op in ("call_method", "call_function") and node.target in ("split", "chunk", torch.split,
                                                                          torch.chunk):
            continue  # its parts are narrows (the getitems below)
        if node.op == "call_function" and is_sdpa(node.target):
            nodes.extend(sdpa_nodes(node, shapes, values, where))
            continue
        if node.op == "call_function" and describe_target(node) == "torchvision.models.swin_transformer._patch_merging_pad":
            nodes.extend(patch_merging_nodes(node, shapes, where))
            continue
        if node.op == "call_function" and (node.target is torch.nn.functional.pad or describe_target(node) in (
                "torch.nn.functional.pad", "torch._C._nn.pad")):  # (PyTorch 2's F.pad is torch._C._nn.pad)
            nodes.extend(functional_pad_nodes(node, shapes, where))
            continue
        if node.op == "call_function" and node.target is operator.getitem and node.args[0].name in attention:
            if node.args[1] != 0 and not node.users:
                continue  # x, _ = attention(...): the weights, unread
            if node.args[1] != 0:
                raise ExportError(f"{what_of(node)}{at} reads MultiheadAttention's weights; dp returns its output only "
                                  "(need_weights=False)")
            alias[node.name] = node.args[0].name
            continue
        if node.op == "call_module" and any(f"{node.target}.{n}" in in_tie
                                            for n, _ in modules[node.target].named_parameters(recurse=False)):
            nodes.extend(tied_module_nodes(node, modules[node.target], tied, emitted_params, shapes, from_input,
                                           alias, where))
            continue
        module_path = node.target if node.op == "call_module" else ""
        inputs, shape_of = None, None  # shape_of: the node whose output shape is this one's
        meta = shapes.get(node.name)
        if node.op == "call_module":
            m = modules[node.target]
            found = module_op(m)
            what = f"module {type(m).__module__}.{type(m).__name__} ('{node.target}')"
            if found is not None and found[0] == "multihead_attention":
                found, inputs, shape_of = attention_op(node, m, found[1], shapes, where)
                attention.add(node.name)
                meta = shapes.get(shape_of)
        else:
            what = f"{describe_target(node)} (node '{node.name}')"
            found = special_op(node, meta, shapes, values, size_of)
            if found is not None:
                op, attrs, inputs = found
                found = (op, attrs)
                if op == "layer_norm":
                    module_path = fused_module(node)
            else:
                found = function_op(node)
        if found is None:
            hint = HINTS.get(describe_target(node) if node.op != "call_module" else "")
            refused.append(f"{what}{at}" + (f" (instead: {hint})" if hint else ""))
            continue
        op, attrs = found
        meta3 = shapes3.get(shape_of or node.name)
        if meta is None or not hasattr(meta, "shape"):
            raise ExportError(f"{what}{at} does not give one tensor")
        if op == "permute" and "dims" not in attrs:  # transpose(a, b): the whole order
            rank = len(meta.shape)
            dims = list(range(rank))
            a, b = (d % rank for d in (attrs["dim0"], attrs["dim1"]))
            dims[a], dims[b] = dims[b], dims[a]
            attrs = {"dims": dims}
        if node.name in from_input:
            if (len(meta.shape) == 0 or meta.shape[0] != len(example) or meta3.shape[0] != len(example) + 1
                    or list(meta.shape)[1:] != list(meta3.shape)[1:]):
                raise ExportError(f"{what}{at}: its output's first dimension is not the batch's (a batch of "
                                  f"{len(example)} gives {list(meta.shape)}, of {len(example) + 1} "
                                  f"{list(meta3.shape)}); dp keeps dimension 0 the samples in every op")
            out_shape = list(meta.shape)[1:]
        else:  # a constant: its whole shape (dp adds it to every sample)
            out_shape = list(meta.shape)
        if inputs is None:
            inputs = [a.name for a in tensor_inputs(node)]
        inputs = [alias.get(i, i) for i in inputs]
        nodes.append({"name": node.name, "op": op, "module": module_path, "inputs": inputs, "attrs": attrs,
                      "shape": out_shape, "where": where})
    output = alias.get(output, output)
    nodes = fold_transposes(nodes, output)
    if refused:
        raise ExportError(f"{len(refused)} op{'s' if len(refused) > 1 else ''} dp does not run "
                          "(docs/model-format.md lists those it does):\n  " + "\n  ".join(refused))
    state_names = model.state_dict().keys()
    unread = {by_name[n].target for n in mask_only if by_name[n].op == "get_attr" and by_name[n].target in state_names}
    # A buffer no node reads became a constant while tracing (nanoGPT's causal tril, sliced to the
    # input's length, is the masked_fill's mask): state dp holds and saves but never reads, so what
    # dp saves loads back into the module with load_state_dict(strict=True).
    run = {n["module"] for n in nodes if n["module"]}
    unread.update(k for k in model.state_dict() if k not in params and k not in tied
                  and k.rpartition(".")[0] not in run)
    if unread:
        print(f"export_model: {len(unread)} buffer{'s' if len(unread) > 1 else ''} read only as constants (folded "
              f"into the nodes that use them), kept as state dp saves: {', '.join(sorted(unread))}", flush=True)
    state = []
    for k, v in model.state_dict().items():
        entry = {"name": k, "shape": list(v.shape), "kind": "parameter" if k in params or k in tied else "buffer"}
        if k in tied:
            entry["tied_to"] = tied[k]
        elif k in unread:
            entry.update(unread=True, init=initial_values(v))
        state.append(entry)
    if tied:
        print(f"export_model: tied parameters, one parameter each: "
              + ", ".join(f"{k} is {t}" for k, t in tied.items()), flush=True)
    return {"format": FORMAT, "version": VERSION, "name": name, "source": source,
            "input": {"name": input_node.name, "kind": kind, "shape": shape,
                      "dtype": "int64" if kind == "tokens" else "float32"},
            "nodes": nodes, "output": output, "state": state, "loss": {"kind": "cross_entropy"}}


def tied_module_nodes(node, m, tied, emitted, shapes, from_input, alias, where):
    """A module whose weight is tied to another's (nanoGPT's wte and lm_head) as functions of that
    one parameter: a `parameter` node (once, before its first reader) read by `embedding`
    (F.embedding(ids, w)) or by `matmul` with trans_b (F.linear(x, w)); dp sums its readers'
    gradients into it."""
    import torch.nn as nn
    what = f"module {type(m).__module__}.{type(m).__name__} ('{node.target}')" + (f" at {where}" if where else "")
    if type(m) is nn.Linear and m.bias is not None:
        raise ExportError(f"{what} has a tied weight and a bias; dp runs a tied Linear without a bias (nanoGPT's "
                          "lm_head)")
    if not ((type(m) is nn.Embedding and module_op(m) is not None) or type(m) is nn.Linear):
        raise ExportError(f"{what} has a tied parameter; dp ties the weights of nn.Embedding and nn.Linear "
                          "(bias=False) only")
    weight = f"{node.target}.weight"
    shared = tied.get(weight, weight)
    out = []
    if shared not in emitted:
        emitted.add(shared)
        owner, _, attr = shared.rpartition(".")
        out.append({"name": shared, "op": "parameter", "module": owner, "inputs": [], "attrs": {"name": attr},
                    "shape": list(m.weight.shape), "where": where})
    meta = shapes[node.name]
    shape = list(meta.shape)[1:] if node.name in from_input else list(meta.shape)
    x = alias.get(tensor_inputs(node)[0].name, tensor_inputs(node)[0].name)
    if type(m) is nn.Embedding:
        out.append({"name": node.name, "op": "embedding", "module": "", "inputs": [x, shared],
                    "attrs": {"num_embeddings": m.num_embeddings, "embedding_dim": m.embedding_dim},
                    "shape": shape, "where": where})
    else:
        out.append({"name": node.name, "op": "matmul", "module": "", "inputs": [x, shared],
                    "attrs": {"trans_b": True}, "shape": shape, "where": where})
    return out


def initial_values(v):
    """A buffer no node reads, as the model file records its value: "tril" (a causal mask of ones
    on and below the diagonal), "ones", "zeros", or its values."""
    import torch
    v = v.detach().float().cpu()
    if v.dim() >= 2 and torch.equal(v, torch.ones_like(v).tril()):
        return "tril"
    if torch.all(v == 1):
        return "ones"
    if torch.all(v == 0):
        return "zeros"
    return v.flatten().tolist()


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
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "torch"))
    import st_io
    state = {k: v if v.dtype in (torch.float32, torch.int64) else v.float() for k, v in state.items()}
    replace_atomically(path, lambda tmp: st_io.save(state, tmp))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("spec", help="package.module:callable or path/to/file.py:callable")
    p.add_argument("--kwargs", default="{}", help="the callable's arguments, a JSON object (with --config, the "
                   "configuration's)")
    p.add_argument("--config", help="the callable takes one configuration object (nanoGPT's GPT(GPTConfig)): this "
                   "class, by name in the spec's file or module, or as package.module:Name, made from --kwargs")
    p.add_argument("--input", required=True, help="one sample's shape: CxHxW, or tokens:T")
    p.add_argument("--out", required=True, help="the model file to write (.json)")
    p.add_argument("--weights", help="also write the module's state_dict() here (safetensors, for dp's --init)")
    a = p.parse_args(argv)
    try:
        import torch  # noqa: F401
        import torch.fx  # noqa: F401
    except ImportError:
        fail("PyTorch is not installed for this Python (" + sys.executable + "): apt-get install python3-torch "
             "python3-torchvision, and run the exporter as tools/export_model.py (its first line names Debian's python3)")
    try:
        if not a.out.endswith(".json"):
            raise ExportError(f"--out {a.out}: a model file's name ends in .json (how dp tells it from a built-in)")
        where = a.spec.rsplit(":", 1)[0] if ":" in a.spec else ""
        refuse_overwriting([("--out", a.out), ("--weights", a.weights)],
                           [("the spec's file", where)] if where.endswith(".py") else [])
        try:
            kwargs = json.loads(a.kwargs)
        except json.JSONDecodeError as e:
            raise ExportError(f"--kwargs is not JSON: {e}")
        if not isinstance(kwargs, dict):
            raise ExportError("--kwargs is not a JSON object")
        kind, shape = parse_input(a.input)
        make = load_callable(a.spec)
        if not callable(make):
            raise ExportError(f"'{a.spec}' is not a class or a function")
        import torch
        torch.manual_seed(0)
        call = f"'{a.spec}'(**{kwargs})"
        try:
            if a.config:
                where = a.spec.rsplit(":", 1)[0]
                config_class = load_callable(a.config if ":" in a.config else f"{where}:{a.config}")
                call = f"'{a.spec}'({a.config}(**{kwargs}))"
                model = make(config_class(**kwargs))
            else:
                model = make(**kwargs)
        except ExportError:
            raise
        except Exception as e:
            raise ExportError(f"{call} failed: {type(e).__name__}: {e}")
        if not isinstance(model, torch.nn.Module):
            raise ExportError(f"'{a.spec}' returned {type(model).__name__}, not an nn.Module")
        model.train()
        doc = export(model, kind, shape, a.spec.rsplit(":", 1)[1], a.spec, a.input)
    except ExportError as e:
        fail(str(e))
    except Exception as e:  # never a traceback: what went wrong, and where in the user's code
        at = user_line(e.__traceback__)
        fail(f"cannot export {a.spec}: {type(e).__name__}: {first_line(e)}" + (f" at {at}" if at else "")
             + " (the exporter does not handle this; a report with the model helps)")
    text = to_json(doc)
    replace_atomically(a.out, lambda tmp: pathlib.Path(tmp).write_text(text))
    if a.weights:
        names = {e["name"] for e in doc["state"]}
        write_weights(a.weights, {k: v for k, v in model.state_dict().items() if k in names})
    print(f"export_model: {a.out}: {len(doc['nodes'])} nodes, {len(doc['state'])} state entries, "
          f"input {a.input}, output {doc['nodes'][-1]['shape'] if doc['nodes'] else []}"
          + (f"; weights in {a.weights}" if a.weights else ""))


if __name__ == "__main__":
    main()
