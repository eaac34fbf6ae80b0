"""The export itself: a traced model to a dp model file's document (docs/model-format.md)."""
import copy
import operator

from dp_export.errors import ExportError
from dp_export.nodes import (attention_op, fold_transposes, functional_pad_nodes, fused_module, initial_values, is_sdpa,
    patch_merging_nodes, sdpa_nodes, special_op, tied_module_nodes)
from dp_export.ops import function_op, module_op
from dp_export.tracing import (HINTS, NotASize, SizeTracer, check_runs_on, describe_target, example_input,
    example_targets, first_line, is_size, meta_copy, size_value, tensor_inputs, user_line, where_of, why_untraceable)

FORMAT, VERSION = "dp-model", 1


def parse_input(text, name="--input"):
    """(kind, shape) of one sample written as CxHxW, F or tokens:T; ExportError naming `name` otherwise."""
    if text.startswith("tokens:"):
        t = text[len("tokens:"):]
        if not t.isdigit() or int(t) < 1:
            raise ExportError(f"{name} {text}: tokens:T takes a positive T")
        return "tokens", [int(t)]
    parts = text.lower().split("x")
    if not all(p.isdigit() and int(p) > 0 for p in parts) or len(parts) not in (1, 3):
        raise ExportError(f"{name} {text}: give one sample's shape as CxHxW (e.g. 3x32x32), F for a vector of F "
                          "features, or tokens:T")
    return "image", [int(p) for p in parts]


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
        print("export_model: tied parameters, one parameter each: "
              + ", ".join(f"{k} is {t}" for k, t in tied.items()), flush=True)
    return {"format": FORMAT, "version": VERSION, "name": name, "source": source,
            "input": {"name": input_node.name, "kind": kind, "shape": shape,
                      "dtype": "int64" if kind == "tokens" else "float32"},
            "nodes": nodes, "output": output, "state": state, "loss": {"kind": "cross_entropy"}}
