#!/usr/bin/python3
"""Export a PyTorch model to a dp model file (docs/model-format.md), for `dp train/memprof/demo/plan
--model FILE.json`.

    python3 tools/export_model.py torchvision.models:resnet50 --kwargs '{"num_classes": 10}' \\
            --input 3x64x64 --out resnet50.json [--weights resnet50.safetensors]
    python3 tools/export_model.py my_project/net.py:Net --input 3x32x32 --out net.json

The spec is `package.module:callable` or `path/to/file.py:callable`, a class or a factory that
returns an nn.Module; --kwargs its arguments as a JSON object. The model is traced with torch.fx
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


def load_callable(spec):
    if ":" not in spec:
        raise ExportError(f"the spec '{spec}' is not package.module:callable or path/to/file.py:callable")
    where, name = spec.rsplit(":", 1)
    if where.endswith(".py"):
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
        return "layer_norm", {"normalized_shape": list(m.normalized_shape), "eps": m.eps,
                              "elementwise_affine": m.elementwise_affine}
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
    return None


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

    def mean_attrs(dim_at):
        dim = arg(dim_at, "dim", None)
        return None if dim is None else ("mean", {"dim": list(dim) if isinstance(dim, (tuple, list)) else dim,
                                                   "keepdim": bool(arg(dim_at + 1, "keepdim", False))})

    if node.op == "call_function":
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
        if t in ("view", "reshape"):
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
    return None


# Arithmetic on sizes (k * h * w, c // groups) and comparisons of them: a size too.
SIZE_ARITHMETIC = (operator.mul, operator.add, operator.sub, operator.floordiv, operator.mod, operator.neg,
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
        return isinstance(src, torch.fx.Node) and (is_size(src) or (node.target is getattr and node.args[1] == "shape"))
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
    "Tensor.unsqueeze": "x.view(...) with the new shape",
    "torch.unsqueeze": "x.view(...) with the new shape",
    "Tensor.squeeze": "x.view(...) or x.flatten(...)",
    "torch.squeeze": "x.view(...) or x.flatten(...)",
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


def check_runs_on(model, example, text):
    """--input before anything else: the model runs on a batch of it (on a copy), or one message
    saying where and why not."""
    import torch
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


def export(model, kind, shape, name, source, input_text=None):
    import torch
    import torch.fx
    from torch.fx.passes.shape_prop import ShapeProp

    example = example_input(model, kind, shape)
    check_runs_on(model, example, input_text or "x".join(map(str, shape)))
    tracer = torch.fx.Tracer()
    tracer.record_stack_traces = True
    try:
        with unpacking_proxies():
            graph = tracer.trace(model)
    except Exception as e:
        at = user_line(e.__traceback__)
        if not at:
            raise ExportError(f"torch.fx cannot trace the model ({first_line(e)})")
        raise ExportError(f"torch.fx cannot trace {at}: {why_untraceable(at.split(': ', 1)[1], e)}")
    gm = torch.fx.GraphModule(tracer.root, graph)
    modules = dict(gm.named_modules())

    def propagate(batch):
        """Each node's output at this many samples (on a copy: BatchNorm's running stats move)."""
        probe = copy.deepcopy(gm)
        try:
            ShapeProp(probe).propagate(batch)
        except Exception as e:
            at = user_line(e.__traceback__)
            raise ExportError(f"the model does not run on an input of shape {['N'] + shape}: {first_line(e)}"
                              + (f" at {at}" if at else ""))
        return {n.name: n.meta.get("tensor_meta") for n in probe.graph.nodes}
    shapes = propagate(example)
    # A second batch size: every value's first dimension must follow the batch (dp's ops keep dim 0
    # the samples), which sizes read from a traced x.shape make possible to get wrong (b * c, ...).
    wider = propagate(torch.cat([example, example[:1]]))

    # The nodes whose values depend on the input (the others compute constants: a table of indices)
    from_input = set()
    for node in gm.graph.nodes:
        if node.op == "placeholder" or any(a.name in from_input for a in node.all_input_nodes):
            from_input.add(node.name)
    nodes, input_name, output, refused = [], None, None, []
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            if input_name is not None:
                raise ExportError(f"the model takes more than one input ('{input_name}', '{node.name}')")
            input_name = node.name
            continue
        if node.op == "output":
            out = node.args[0]
            if not isinstance(out, torch.fx.Node):
                raise ExportError("the model returns more than one value; dp trains one output with cross-entropy")
            output = out.name
            continue
        if is_size(node):
            continue
        where = where_of(node)
        at = f" at {where}" if where else ""
        if node.op == "get_attr":
            refused.append(f"'{node.target}'{at} uses a parameter or buffer outside its module; dp runs "
                           "parameters through the modules that own them")
            continue
        module_path = node.target if node.op == "call_module" else ""
        if node.op == "call_module":
            m = modules[node.target]
            found = module_op(m)
            what = f"module {type(m).__module__}.{type(m).__name__} ('{node.target}')"
        else:
            found = function_op(node)
            what = f"{describe_target(node)} (node '{node.name}')"
        if found is None:
            hint = HINTS.get(describe_target(node) if node.op != "call_module" else "")
            refused.append(f"{what}{at}" + (f" (instead: {hint})" if hint else ""))
            continue
        op, attrs = found
        meta, meta3 = shapes.get(node.name), wider.get(node.name)
        if meta is None or not hasattr(meta, "shape"):
            raise ExportError(f"{what}{at} does not give one tensor")
        if node.name in from_input and (len(meta.shape) == 0 or meta.shape[0] != len(example)
                                        or meta3.shape[0] != len(example) + 1
                                        or list(meta.shape)[1:] != list(meta3.shape)[1:]):
            raise ExportError(f"{what}{at}: its output's first dimension is not the batch's (a batch of "
                              f"{len(example)} gives {list(meta.shape)}, of {len(example) + 1} "
                              f"{list(meta3.shape)}); dp keeps dimension 0 the samples in every op")
        nodes.append({"name": node.name, "op": op, "module": module_path,
                      "inputs": [a.name for a in tensor_inputs(node)], "attrs": attrs,
                      "shape": list(meta.shape)[1:], "where": where})
    if refused:
        raise ExportError(f"{len(refused)} op{'s' if len(refused) > 1 else ''} dp does not run "
                          "(docs/model-format.md lists those it does):\n  " + "\n  ".join(refused))
    params = dict(model.named_parameters())
    state = [{"name": k, "shape": list(v.shape), "kind": "parameter" if k in params else "buffer"}
             for k, v in model.state_dict().items()]
    return {"format": FORMAT, "version": VERSION, "name": name, "source": source,
            "input": {"name": input_name, "kind": kind, "shape": shape,
                      "dtype": "int64" if kind == "tokens" else "float32"},
            "nodes": nodes, "output": output, "state": state, "loss": {"kind": "cross_entropy"}}


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
    p.add_argument("--kwargs", default="{}", help="the callable's arguments, a JSON object")
    p.add_argument("--input", required=True, help="one sample's shape: CxHxW, or tokens:T")
    p.add_argument("--out", required=True, help="the model file to write (.json)")
    p.add_argument("--weights", help="also write the module's state_dict() here (safetensors, for dp's --init)")
    a = p.parse_args(argv)
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
        try:
            model = make(**kwargs)
        except Exception as e:
            raise ExportError(f"'{a.spec}'(**{kwargs}) failed: {type(e).__name__}: {e}")
        if not isinstance(model, torch.nn.Module):
            raise ExportError(f"'{a.spec}' returned {type(model).__name__}, not an nn.Module")
        model.train()
        doc = export(model, kind, shape, a.spec.rsplit(":", 1)[1], a.spec, a.input)
    except ExportError as e:
        fail(str(e))
    text = to_json(doc)
    replace_atomically(a.out, lambda tmp: pathlib.Path(tmp).write_text(text))
    if a.weights:
        write_weights(a.weights, model.state_dict())
    print(f"export_model: {a.out}: {len(doc['nodes'])} nodes, {len(doc['state'])} state entries, "
          f"input {a.input}, output {doc['nodes'][-1]['shape'] if doc['nodes'] else []}"
          + (f"; weights in {a.weights}" if a.weights else ""))


if __name__ == "__main__":
    main()
