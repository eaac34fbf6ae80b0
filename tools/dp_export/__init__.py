"""The exporter: a PyTorch model to a dp model file (docs/model-format.md). tools/export_model.py is
its command line; a program (a test, a Python API) imports `dp_export.export.export` and
`dp_export.writing.to_json` with tools/ on its path.

    errors.py   what an export refuses with (ExportError)
    ops.py      the op table: which PyTorch module (by type), function or method becomes which op
    tracing.py  torch.fx tracing that keeps sizes as numbers; the user's line for every message
    nodes.py    the nodes of calls that are not one op: padding, patch merging, attention, masks,
                split and chunk, tied modules, parameters used directly
    export.py   the export: the traced graph checked and written as a model file's document
    writing.py  JSON and safetensors written atomically; no output over an input
"""
