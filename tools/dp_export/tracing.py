"""Tracing a model with torch.fx: an example input, a copy on the meta device to run, a tracer
that keeps sizes (x.size(1), x.shape[-1] // heads) as numbers, and the words for what cannot be
traced (the user's source line, a hint for the common cases)."""
import contextlib
import copy
import math
import operator
import os
import re
import sys

from dp_export.errors import ExportError
from dp_export.ops import is_window_attention


# The exporter's own files (this package and tools/export_model.py): never the user's line.
_PACKAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "")
_CLI = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "export_model.py")


def exporters_own(path):
    p = os.path.abspath(path)
    return p.startswith(_PACKAGE) or p == _CLI


def where_of(node):
    """The user's source line a node came from ("net.py:12"), from fx's recorded stack trace."""
    trace = getattr(node, "stack_trace", None) or ""
    frames = re.findall(r'File "([^"]+)", line (\d+)', trace)
    tracer_at = [i for i, (f, _) in enumerate(frames) if f.endswith(os.path.join("fx", "_symbolic_trace.py"))]
    import torch
    torch_dir = os.path.join(os.path.dirname(os.path.abspath(torch.__file__)), "")
    user = [(i, f, line) for i, (f, line) in enumerate(frames)
            if not f.startswith("<") and not os.path.abspath(f).startswith(torch_dir)
            and not exporters_own(f)]
    if not user:
        return ""
    # torch 1.13 lists the innermost frame first (before the tracer's); torch 2.x last.
    i, f, line = user[0] if tracer_at and tracer_at[0] > user[0][0] else user[-1]
    return f"{os.path.basename(f)}:{line}"


def size_source(node):
    """The tensor a size expression reads its size from (x in x.shape[0], x.size(0)); None if none."""
    import torch.fx
    while isinstance(node, torch.fx.Node) and is_size(node):
        node = node.args[0] if node.args else None
    return node if isinstance(node, torch.fx.Node) else None


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
            and not exporters_own(f.filename)]
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
