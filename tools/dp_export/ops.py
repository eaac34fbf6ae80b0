"""The op table: which PyTorch module (by its type) or function or method (by its target) becomes
which dp op, and the attributes the op takes from it. Adding an op to the exporter is an entry here
(and the op's entry in dp's own table, models/graph/graph_ops.cpp). A maker returns None where dp
does not run that use of it (an Embedding with padding_idx, max_pool2d returning indices): the
exporter then lists the node among those it refuses."""
import functools
import operator

from dp_export.errors import ExportError


def pair(v):
    return list(v) if isinstance(v, (tuple, list)) else v


@functools.lru_cache(maxsize=None)
def module_table():
    """{module type: maker(module) -> (op, attrs) or None}."""
    import torch.nn as nn

    def simple(op):
        return lambda m: (op, {})

    def embedding(m):
        if m.padding_idx is not None or m.max_norm is not None:
            return None
        return "embedding", {"num_embeddings": m.num_embeddings, "embedding_dim": m.embedding_dim}

    def layer_norm(m):
        attrs = {"normalized_shape": list(m.normalized_shape), "eps": m.eps, "elementwise_affine": m.elementwise_affine}
        if m.elementwise_affine and getattr(m, "bias", None) is None:
            attrs["bias"] = False  # nn.LayerNorm(bias=False), PyTorch 2.1 on
        return "layer_norm", attrs

    def max_pool2d(m):
        if m.return_indices:
            return None
        return "max_pool2d", {"kernel_size": pair(m.kernel_size), "stride": pair(m.stride),
                              "padding": pair(m.padding), "dilation": pair(m.dilation), "ceil_mode": m.ceil_mode}

    return {
        nn.Linear: lambda m: ("linear", {"in_features": m.in_features, "out_features": m.out_features,
                                         "bias": m.bias is not None}),
        nn.Conv2d: lambda m: ("conv2d", {
            "in_channels": m.in_channels, "out_channels": m.out_channels, "kernel_size": pair(m.kernel_size),
            "stride": pair(m.stride), "padding": pair(m.padding), "dilation": pair(m.dilation), "groups": m.groups,
            "bias": m.bias is not None, "padding_mode": m.padding_mode}),
        nn.BatchNorm2d: lambda m: ("batch_norm2d", {
            "num_features": m.num_features, "eps": m.eps, "momentum": m.momentum, "affine": m.affine,
            "track_running_stats": m.track_running_stats}),
        nn.LayerNorm: layer_norm,
        nn.Embedding: embedding,
        nn.ReLU: simple("relu"),
        nn.ReLU6: simple("relu6"),
        nn.SiLU: simple("silu"),
        nn.Sigmoid: simple("sigmoid"),
        nn.Hardswish: simple("hardswish"),
        nn.Hardsigmoid: simple("hardsigmoid"),
        nn.Tanh: simple("tanh"),
        nn.Hardtanh: lambda m: ("relu6", {}) if m.min_val == 0.0 and m.max_val == 6.0 else None,
        nn.GELU: lambda m: ("gelu", {"approximate": getattr(m, "approximate", "none")}),
        nn.Dropout: lambda m: ("dropout", {"p": m.p}),
        nn.MaxPool2d: max_pool2d,
        nn.AvgPool2d: lambda m: ("avg_pool2d", {
            "kernel_size": pair(m.kernel_size), "stride": pair(m.stride), "padding": pair(m.padding),
            "ceil_mode": m.ceil_mode, "count_include_pad": m.count_include_pad,
            "divisor_override": m.divisor_override}),
        nn.AdaptiveAvgPool2d: lambda m: ("adaptive_avg_pool2d", {"output_size": pair(m.output_size)}),
        nn.Flatten: lambda m: ("flatten", {"start_dim": m.start_dim, "end_dim": m.end_dim}),
        nn.Identity: simple("identity"),
        # The call's arguments decide the rest (the exporter's attention_op).
        nn.MultiheadAttention: lambda m: ("multihead_attention", {
            "embed_dim": m.embed_dim, "num_heads": m.num_heads, "bias": m.in_proj_bias is not None,
            "dropout": m.dropout, "batch_first": m.batch_first, "add_bias_kv": m.bias_k is not None,
            "add_zero_attn": m.add_zero_attn, "kdim": m.kdim, "vdim": m.vdim}),
    }


def module_op(m):
    """(op, attrs) for a module dp runs, None otherwise."""
    maker = module_table().get(type(m))
    if maker is not None:
        return maker(m)
    if is_window_attention(m):
        return window_attention_op(m)
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


class Call:
    """A call_function or call_method node's arguments, by position or keyword."""

    def __init__(self, node):
        self.args, self.kw = node.args, node.kwargs

    def arg(self, i, name, default):
        return self.args[i] if len(self.args) > i else self.kw.get(name, default)

    def two_tensors(self):
        import torch.fx
        return len(self.args) == 2 and all(isinstance(a, torch.fx.Node) for a in self.args)


def _simple(op):
    return lambda c: (op, {})


def _of_two_tensors(op):
    return lambda c: (op, {}) if c.two_tensors() else None


def _add(c):
    return ("add", {}) if "alpha" not in c.kw and c.two_tensors() else None


def _softmax(op):
    def make(c):
        dim = c.arg(1, "dim", None)
        return None if dim is None or c.arg(2, "dtype", None) is not None else (op, {"dim": dim})
    return make


def _transpose(c):
    return "permute", {"dim0": c.arg(1, "dim0", None), "dim1": c.arg(2, "dim1", None)}


def _mean(c):
    dim = c.arg(1, "dim", None)
    return None if dim is None else ("mean", {"dim": list(dim) if isinstance(dim, (tuple, list)) else dim,
                                              "keepdim": bool(c.arg(2, "keepdim", False))})


def _flatten(c):
    return "flatten", {"start_dim": c.arg(1, "start_dim", 0), "end_dim": c.arg(2, "end_dim", -1)}


def _method_permute(c):
    dims = list(c.args[1:]) if len(c.args) > 2 or not isinstance(c.arg(1, "dims", None), (list, tuple)) \
        else list(c.arg(1, "dims", None))
    return "permute", {"dims": dims}


def _max_pool2d(c):
    if c.arg(6, "return_indices", False):
        return None
    return "max_pool2d", {"kernel_size": pair(c.arg(1, "kernel_size", None)), "stride": pair(c.arg(2, "stride", None)),
                          "padding": pair(c.arg(3, "padding", 0)), "dilation": pair(c.arg(4, "dilation", 1)),
                          "ceil_mode": c.arg(5, "ceil_mode", False)}


def _avg_pool2d(c):
    return "avg_pool2d", {"kernel_size": pair(c.arg(1, "kernel_size", None)), "stride": pair(c.arg(2, "stride", None)),
                          "padding": pair(c.arg(3, "padding", 0)), "ceil_mode": c.arg(4, "ceil_mode", False),
                          "count_include_pad": c.arg(5, "count_include_pad", True),
                          "divisor_override": c.arg(6, "divisor_override", None)}


def _stochastic_depth(c):
    return "stochastic_depth", {"p": c.arg(1, "p", None), "mode": c.arg(2, "mode", None),
                                "training": bool(c.arg(3, "training", True))}


@functools.lru_cache(maxsize=None)
def function_table():
    """{function: maker(Call) -> (op, attrs) or None}: the call_function nodes dp runs."""
    import torch
    import torch.nn.functional as F
    table = {}

    def add(targets, maker):
        for t in targets:
            table[t] = maker

    add((operator.matmul, torch.matmul, torch.bmm), _of_two_tensors("matmul"))
    add((F.softmax, torch.softmax), _softmax("softmax"))
    add((F.log_softmax, torch.log_softmax), _softmax("log_softmax"))
    add((torch.permute,), lambda c: ("permute", {"dims": list(c.arg(1, "dims", None))}))
    add((torch.transpose, torch.swapaxes, torch.swapdims), _transpose)
    add((operator.add, operator.iadd, torch.add), _add)
    add((operator.mul, operator.imul, torch.mul), _of_two_tensors("mul"))
    add((torch.mean,), _mean)
    add((F.relu, torch.relu), _simple("relu"))
    add((F.relu6,), _simple("relu6"))
    add((F.silu,), _simple("silu"))
    add((torch.sigmoid, F.sigmoid), _simple("sigmoid"))
    add((F.hardswish,), _simple("hardswish"))
    add((F.hardsigmoid,), _simple("hardsigmoid"))
    add((torch.tanh, F.tanh), _simple("tanh"))
    add((F.gelu,), lambda c: ("gelu", {"approximate": c.kw.get("approximate", "none")}))
    add((torch.flatten,), _flatten)
    add((torch.unsqueeze, torch.squeeze, torch.reshape), _simple("reshape"))
    add((torch.cat,), lambda c: ("cat", {"dim": c.arg(1, "dim", 0)}))
    add((F.avg_pool2d,), _avg_pool2d)
    add((F.adaptive_avg_pool2d,), lambda c: ("adaptive_avg_pool2d", {"output_size": pair(c.arg(1, "output_size", None))}))
    add((F.dropout,), lambda c: ("dropout", {"p": c.arg(1, "p", 0.5), "training": bool(c.arg(2, "training", True))}))
    add((F.max_pool2d,), _max_pool2d)
    return table


# {method name: maker(Call) -> (op, attrs) or None}: the call_method nodes dp runs.
METHOD_TABLE = {
    **{name: _simple("reshape") for name in ("view", "reshape", "unsqueeze", "squeeze")},  # the recorded shape says
    "flatten": _flatten,
    **{name: _simple(name) for name in ("relu", "sigmoid", "tanh")},
    **{name: _add for name in ("add", "add_", "__add__")},
    **{name: _of_two_tensors("mul") for name in ("mul", "mul_", "__mul__")},
    "mean": _mean,
    "contiguous": _simple("identity"),
    **{name: _of_two_tensors("matmul") for name in ("matmul", "bmm", "__matmul__")},
    "softmax": _softmax("softmax"),
    "log_softmax": _softmax("log_softmax"),
    "permute": _method_permute,
    **{name: _transpose for name in ("transpose", "swapaxes", "swapdims")},
}


def is_stochastic_depth(target):
    """torchvision.ops.stochastic_depth (found by name: torchvision is optional)."""
    return getattr(target, "__module__", "") == "torchvision.ops.stochastic_depth" and \
        getattr(target, "__name__", "") == "stochastic_depth"


def function_op(node):
    """(op, attrs) for a call_function or call_method node dp runs, None otherwise."""
    t = node.target
    if node.op == "call_function":
        try:
            maker = function_table().get(t)
        except TypeError:  # an unhashable target: none of dp's
            maker = None
        if maker is None and is_stochastic_depth(t):
            maker = _stochastic_depth
        return maker(Call(node)) if maker is not None else None
    if node.op == "call_method":
        maker = METHOD_TABLE.get(t)
        return maker(Call(node)) if maker is not None else None
    return None
