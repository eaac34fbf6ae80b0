"""dp's commands as functions: plan, memprof, train, eval, demo, devices. Each takes the CLI's flags as
keyword arguments (flags.py), runs the command in this process with the GIL released, and returns the
CLI's report as an object (results.py); a failure raises DpError (OutOfMemoryError for exit 3) with the
CLI's message."""
import contextlib
import json
import os
import signal
import sys
import tempfile
import threading
from typing import Any, Optional, Sequence, Union

from dp_engine import _core, flags
from dp_engine.data import InMemory, is_path, path_of, sample_shape
from dp_engine.errors import DpError, OutOfMemoryError
from dp_engine.models import export_module, is_module, load_trained
from dp_engine.results import Plan, Result, Run, read_metrics
from dp_engine import safetensors

# What a model and data may be (docs/python.md): a built-in's name or a model file, or a torch.nn.Module;
# a path, (images, labels) arrays or tensors, a TensorDataset, or token ids.
Model = Union[str, "os.PathLike[str]", Any]
Data = Union[str, "os.PathLike[str]", Sequence[Any], Any]
Shape = Union[Sequence[int], str]

# Keywords of the functions' own, beside the flags: the model and data as objects, the held-out set,
# a module's input shape, and how a run shows itself.
OWN = ("model", "data", "test_data", "input", "progress", "verbose")


@contextlib.contextmanager
def _captured(capture):
    """What dp prints to standard output and error (file descriptors 1 and 2, where C's stdio writes) while
    the block runs, as text in box["out"] and box["err"]; nothing taken when capture is False (dp's
    lines go where they go)."""
    box = {"out": "", "err": ""}
    if not capture:
        yield box
        return
    sys.stdout.flush()
    sys.stderr.flush()
    saved = {fd: os.dup(fd) for fd in (1, 2)}
    sinks = {fd: tempfile.TemporaryFile() for fd in (1, 2)}
    try:
        for fd, sink in sinks.items():
            os.dup2(sink.fileno(), fd)
        yield box
    finally:
        for fd, sink in sinks.items():
            os.dup2(saved[fd], fd)
            os.close(saved[fd])
            sink.seek(0)
            box["out" if fd == 1 else "err"] = sink.read().decode(errors="replace")
            sink.close()


def _run(command, argv, capture=True, interruptible=False, step_lines=True):
    """Runs `dp COMMAND ARGV` in this process: what it printed, or the failure raised. What it said on
    standard error goes to sys.stderr (a notebook shows it), but for a failure's own message, which is
    the exception's."""
    with _captured(capture) as out:
        code, message, remedies = _core.run(["dp", command, *argv], interruptible, step_lines)
    said = out["err"]
    at = 0 if said.startswith("error: ") else said.find("\nerror: ") + 1
    if code != 0 and not message and (at > 0 or said.startswith("error: ")):  # a command that printed its failure
        message, _, remedies = said[at + len("error: "):].partition("\n")
        said = said[:at]
    if said:
        sys.stderr.write(said)
    if code == 128 + signal.SIGINT:
        raise KeyboardInterrupt(f"dp {command} interrupted after its step in flight")
    if code != 0:
        message = message.strip()
        message = message[len("error: "):] if message.startswith("error: ") else message
        raise (OutOfMemoryError if code == 3 else DpError)(message, code, remedies)
    return out["out"]


@contextlib.contextmanager
def _model_and_data(command, model, data, test_data, input, settings, folder):
    """The flags for the call's model and data: a module exported into `folder` (its weights a
    training's start and an evaluation's weights, unless given), arrays handed over in memory."""
    given = {}
    module = model if is_module(model) else None
    if module is not None:
        path, weights, _ = export_module(module, input, folder, sample_shape(data))
        given["model"] = path
        if command == "train" and settings.get("init") is None:
            given["init"] = weights
        if command == "eval" and settings.get("weights") is None:
            given["weights"] = weights
    elif model is not None:
        given["model"] = os.fspath(model)
    if data is None or is_path(data):
        if data is not None:
            given["data"] = path_of(data)
        if test_data is not None:
            raise TypeError("test_data goes with arrays as data; a path's folder holds its own held-out set")
        yield given, module
        return
    with InMemory(data, test_data) as name:
        given["data"] = name
        yield given, module


def _check(function, command, settings):
    flags.check_keywords(function, command, settings, own=OWN)
    clash = [k for k in ("model", "data") if k in settings]
    if clash:
        raise TypeError(f"{function}() got {clash[0]} twice")


def _profile(command, model, data, test_data, input, settings):
    with tempfile.TemporaryDirectory(prefix="dp_engine-") as folder:
        with _model_and_data(command, model, data, test_data, input, settings, folder) as (given, _):
            report = settings.get("json") or os.path.join(folder, "report.json")
            page = settings.get("html") or os.path.join(folder, "page.html")
            argv = flags.argv_for(command, {**given, **settings, "json": report, "html": page})
            text = _own_files_unsaid(_run(command, argv), folder)
        with open(report) as f, open(page) as p:
            return json.load(f), text, p.read()


def _own_files_unsaid(text, folder):
    """The printed text less its "wrote:" line where that names only the call's own scratch files, and a
    module's model file by its name alone (ResNet.json), not its scratch folder."""
    kept = [line for line in text.splitlines(keepends=True)
            if not (line.startswith("wrote: ") and line.count(folder) == line.count(" --"))
            and not line.startswith("saved " + folder)]
    return "".join(kept).replace(folder + os.sep, "")


def plan(model: Optional[Model] = None, data: Optional[Data] = None, *, input: Optional[Shape] = None,
         **settings: Any) -> Plan:
    """dp plan: each device's memory for the run the settings describe, planned without running it (meta
    devices: `devices="meta:8"`). `model`: a built-in's name, a model file, or a torch.nn.Module (with
    `input=(C, H, W)` or `"tokens:T"`). `compare=True` plans every strategy (Plan.strategies());
    `max_batch=True` finds the largest batch that fits `device_memory`. The settings are dp plan's flags
    in snake_case (docs/flags.md)."""
    _check("plan", "plan", settings)
    return Plan(*_profile("plan", model, data, None, input, settings))


def memprof(model: Optional[Model] = None, data: Optional[Data] = None, *, test_data: Optional[Data] = None,
            input: Optional[Shape] = None, **settings: Any) -> Plan:
    """dp memprof: the run's steps measured on its devices, each device's memory by category and phase."""
    _check("memprof", "memprof", settings)
    return Plan(*_profile("memprof", model, data, test_data, input, settings))


def demo(**settings: Any) -> Result:
    """dp demo: one step told phase by phase (devices host:4, the tiny model), with its page."""
    _check("demo", "demo", settings)
    with tempfile.TemporaryDirectory(prefix="dp_engine-") as folder:
        report = settings.get("json") or os.path.join(folder, "demo.json")
        page = settings.get("html") or os.path.join(folder, "demo.html")
        text = _own_files_unsaid(_run("demo", flags.argv_for("demo", {**settings, "json": report, "html": page})), folder)
        with open(report) as f, open(page) as p:
            return Result(json.load(f), text, p.read())


def devices() -> Result:
    """dp devices: what this machine offers (CUDA GPUs, host devices), as text."""
    return Result({}, _run("devices", []))


def eval(model: Optional[Model] = None, data: Optional[Data] = None, *, test_data: Optional[Data] = None,
         input: Optional[Shape] = None, **settings: Any) -> Result:
    """dp eval: the held-out loss and accuracy of `weights` (for a torch.nn.Module, its own weights unless
    given). Returns the report (test_loss, test_accuracy, ...)."""
    _check("eval", "eval", settings)
    with tempfile.TemporaryDirectory(prefix="dp_engine-") as folder:
        with _model_and_data("eval", model, data, test_data, input, settings, folder) as (given, _):
            report = settings.get("json") or os.path.join(folder, "eval.json")
            text = _own_files_unsaid(_run("eval", flags.argv_for("eval", {**given, **settings, "json": report})), folder)
        with open(report) as f:
            return Result(json.load(f), text)


def train(model: Optional[Model] = None, data: Optional[Data] = None, *, test_data: Optional[Data] = None,
          input: Optional[Shape] = None, progress: bool = False, verbose: bool = False, **settings: Any) -> Run:
    """dp train: trains `model` on `data` with dp's DataParallel step and returns the Run (its history,
    held-out evaluations and trained weights). A torch.nn.Module starts from its own weights (unless
    `init=` names others) and holds the trained ones afterwards, every parameter and buffer dp keeps, as
    `dp train --save` then `load_state_dict` would give. `progress=True`: a tqdm bar (where tqdm is
    installed); `verbose=True`: dp's own lines, printed as it trains. Ctrl-C finishes the step in
    flight, writes the checkpoint (with `checkpoint=`) and raises KeyboardInterrupt."""
    _check("train", "train", settings)
    with tempfile.TemporaryDirectory(prefix="dp_engine-") as folder:
        with _model_and_data("train", model, data, test_data, input, settings, folder) as (given, module):
            save = settings.get("save") or os.path.join(folder, "trained.safetensors")
            metrics = settings.get("metrics") or os.path.join(folder, "metrics.jsonl")
            argv = flags.argv_for("train", {**given, **settings, "save": save, "metrics": metrics})
            with _progress_bar(progress, metrics, settings.get("steps")):
                text = _own_files_unsaid(_run("train", argv, capture=not verbose, interruptible=True,
                                              step_lines=verbose), folder)
        history, evaluations = read_metrics(metrics)
        weights, _ = safetensors.read(save)
        if module is not None:
            load_trained(module, save)
        return Run(history, evaluations, weights, text, settings.get("checkpoint"))


@contextlib.contextmanager
def _progress_bar(wanted, metrics, steps):
    """A tqdm bar fed from --metrics' rows as dp writes them (a row a step), while the block runs."""
    if not wanted:
        yield
        return
    try:
        import tqdm
        try:  # a notebook's widget where ipywidgets is there, else the text bar
            import ipywidgets  # noqa: F401
            from tqdm.auto import tqdm as bar_of
        except ImportError:
            bar_of = tqdm.tqdm
    except ImportError:
        raise ImportError("progress=True needs tqdm (apt-get install python3-tqdm)") from None
    done = threading.Event()

    def follow():
        bar = bar_of(total=steps or None, unit="step", desc="dp train")
        seen = 0
        while True:
            finished = done.wait(0.2)
            try:
                with open(metrics) as f:
                    rows = [json.loads(line) for line in f if line.strip().endswith("}")]
            except (FileNotFoundError, ValueError):
                rows = []
            steps_rows = [r for r in rows if "after_step" not in r]
            if len(steps_rows) > seen:
                bar.update(len(steps_rows) - seen)
                seen = len(steps_rows)
                bar.set_postfix(loss=f"{steps_rows[-1]['loss']:.4f}")
            if finished:
                bar.close()
                return

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
