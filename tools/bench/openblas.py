"""The OpenBLAS kernel set for a benchmark's PyTorch (and dp, which picks the same by itself).

Debian's OpenBLAS 0.3.21 misdetects these CPUs and falls back to slow generic kernels; SkylakeX
needs AVX-512 (elsewhere it dies with an illegal instruction), Haswell needs AVX2. OpenBLAS reads
OPENBLAS_CORETYPE once, when it loads: set it in a child's environment (coretype_env), or before
this process imports torch (reexec_with_coretype).
"""
import os
import platform
import sys


def coretype():
    return "SkylakeX" if "avx512f" in open("/proc/cpuinfo").read() else "Haswell"


def coretype_env(**extra):
    """This process's environment with this CPU's kernel set (and any extra variables)."""
    return dict(os.environ, OPENBLAS_CORETYPE=coretype(), **extra)


def reexec_with_coretype():
    """Before `import torch`: start this script again with the kernel set, unless one is chosen."""
    if "OPENBLAS_CORETYPE" not in os.environ:
        os.execve(sys.executable, [sys.executable] + sys.argv, coretype_env())


def machine_line(extra=""):
    """What a benchmark prints first, for RESULTS.md: the machine (CPU model, cores, vector flags),
    the kernel set, anything `extra` adds, and the command."""
    cpu = open("/proc/cpuinfo").read()
    model = next((line.split(":", 1)[1].strip() for line in cpu.splitlines() if line.startswith("model name")), "?")
    flags = "AVX-512" if "avx512f" in cpu else "AVX2" if "avx2" in cpu else "no AVX2"
    return (f"machine: {platform.machine()}, {model}, {os.cpu_count()} cores, {flags}, OPENBLAS_CORETYPE={coretype()}"
            f"{extra}; command: {' '.join(sys.argv)}\n")
