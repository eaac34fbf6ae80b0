"""dp-engine from Python: the dp commands as functions over the library the CLI uses, in this process.

    import torch, torchvision, dp_engine as dp
    model = torchvision.models.resnet18(num_classes=10)
    plan = dp.plan(model, input=(3, 224, 224), batch=256, devices="meta:8", compare=True)
    plan.peak(device=0)          # bytes; plan.table() rows (step, phase, device, category, bytes)
    run = dp.train(model, data=(images, labels), devices="host:4", epochs=2, optimizer="adamw", lr=1e-3)
    run.history                  # per-step losses and phase times; the model holds the trained weights

Every keyword is the CLI's flag of that name in snake_case, with its default, checks and messages
(docs/flags.md); docs/python.md has the rest.
"""
import os
import sys


def _choose_openblas_core():
    # Debian's OpenBLAS 0.3.21 misreads newer CPUs (AMD Zen 4) and falls back to generic kernels; it reads
    # OPENBLAS_CORETYPE once, when it loads, which is NumPy's or PyTorch's import when either came first.
    if os.environ.get("OPENBLAS_CORETYPE"):
        return
    try:
        with open("/proc/cpuinfo") as f:
            words = f.read().split()
    except OSError:
        return
    core = "SkylakeX" if "avx512f" in words else "Haswell" if "avx2" in words else None
    if core:
        os.environ["OPENBLAS_CORETYPE"] = core


_choose_openblas_core()

try:
    import numpy  # noqa: F401  (arrays in, reports and weights out)
except ImportError:
    raise ImportError(f"dp_engine needs NumPy, which this Python ({sys.executable}) does not have: "
                      "apt-get install python3-numpy for Debian's /usr/bin/python3, or pip install numpy") from None

try:
    from dp_engine import _core
except ImportError as e:  # say which Python this is and how to get the extension for it
    raise ImportError(
        f"dp_engine's extension (_core) does not load for this Python ({sys.executable}, "
        f"{sys.version.split()[0]}): {e}. It is built for Debian's /usr/bin/python3 by tools/setup.sh "
        "(pybind11-dev, python3-dev), or installed with `/usr/bin/python3 -m pip install --no-build-isolation .`; "
        "run that Python, or build for this one") from None

from dp_engine.commands import demo, devices, eval, memprof, plan, train  # noqa: E402
from dp_engine.errors import DpError, OutOfMemoryError  # noqa: E402
from dp_engine.results import Plan, Result, Run  # noqa: E402
from dp_engine.version import RELEASE  # noqa: E402

__version__ = RELEASE + "+" + _core.commit().replace("-", ".")
__all__ = ["plan", "memprof", "train", "eval", "demo", "devices", "DpError", "OutOfMemoryError", "Plan", "Result",
           "Run", "__version__"]
