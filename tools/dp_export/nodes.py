"""The nodes dp's graph gets for calls that are not one op of the table (dp_export/ops.py): padding
as a node per dimension, Swin's patch merging, transposes folded into a matmul, attention
(MultiheadAttention's call, scaled_dot_product_attention), a fused layer norm, masked_fill with the
causal mask, split and chunk, arange, tied modules, and the values of parameters used directly."""
import operator

from dp_export.errors import ExportError
from dp_export.ops import module_op
from dp_export.tracing import describe_target, is_size, size_source, tensor_inputs, where_of


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


MULTIPLY = (operator.mul, operator.imul, "mul", "__mul__", "__rmul__")
DIVIDE = (operator.truediv, operator.itruediv, "div", "__truediv__")


def is_sdpa(target):
    """F.scaled_dot_product_attention (PyTorch 2.x; nanoGPT's model.py calls it where it exists)."""
    import torch.nn.functional as F
    sdpa = getattr(F, "scaled_dot_product_attention", None)
    return sdpa is not None and target is sdpa


def sdpa_nodes(node, shapes, values, where):
    """F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale): for
    self-attention (q, k and v of one shape [B, H, T, E]) one scaled_dot_product_attention node,
    which dp runs on its GPT's attention kernels; otherwise the ops of its definition: kᵀ, q @ kᵀ,
    the scale (1/√E by default), the causal mask, softmax, dropout, @ v. Either way the causal mask
    is is_causal or an attn_mask that is the causal one (another is refused), and dropout is a
    dropout site whatever dropout_p, so the sites after it keep their numbers."""
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
    q_shape, k_shape = list(shapes[q.name].shape), list(shapes[k.name].shape)
    if len(q_shape) == 4 and q_shape == k_shape == list(shapes[v.name].shape):
        scale = given.get("scale")
        attrs = {"is_causal": causal, "dropout_p": p, "scale": None if scale is None else float(scale)}
        return [{"name": node.name, "op": "scaled_dot_product_attention", "module": "",
                 "inputs": [q.name, k.name, v.name], "attrs": attrs, "shape": shape, "where": where}]
    k_shape = k_shape[1:]
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


def special_op(node, meta, shapes, values, size_of):
    """(op, attrs, input names) for the calls whose attributes come from the traced values rather
    than the call alone: a fused F.layer_norm, masked_fill with a constant mask, a part of split or
    chunk, arange. None for any other node."""
    import math
    import torch
    import torch.fx
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
