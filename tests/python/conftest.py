"""The Python package's tests (pytest): dp_engine from build/python (PYTHONPATH, set by ctest), against the
dp binary of the same build (DP_BINARY) where a test compares the two."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "torch"))  # nanogpt_model.py, st_io.py


@pytest.fixture(scope="session")
def dp_binary():
    path = os.environ.get("DP_BINARY")
    if not path or not os.path.exists(path):
        pytest.skip("DP_BINARY names no dp binary (ctest sets it)")
    return path


@pytest.fixture(scope="session")
def cli(dp_binary):
    """Runs the dp binary: its CompletedProcess (text), checked or not."""
    def run(*args, check=True):
        p = subprocess.run([dp_binary, *map(str, args)], capture_output=True, text=True, timeout=600)
        if check and p.returncode != 0:
            raise AssertionError(f"dp {' '.join(map(str, args))}: exit {p.returncode}\n{p.stderr}")
        return p
    return run


def file_bytes(path):
    with open(path, "rb") as f:
        return f.read()
