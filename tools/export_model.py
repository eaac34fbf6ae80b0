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
import importlib
import importlib.util
import json
import os
import pathlib
import sys

# The exporter is the package beside this file (tools/dp_export/): errors, the op table, tracing,
# the nodes of special calls, the export, the writing. Importers of this file (the tests) get export
# and to_json from here as before.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dp_export.errors import ExportError  # noqa: E402
from dp_export.export import export, parse_input  # noqa: E402
from dp_export.tracing import first_line, user_line  # noqa: E402
from dp_export.writing import refuse_overwriting, replace_atomically, to_json, write_weights  # noqa: E402


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
