"""What a Python user expects of dp_engine beyond the results: the GIL released while steps run, Ctrl-C a
KeyboardInterrupt after the step in flight with the checkpoint written, a progress bar, OpenBLAS left as
it was found, and a clear message from the wrong interpreter."""
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import dp_engine as dp
from dp_engine import _core

PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(dp.__file__)))


def test_other_python_threads_run_while_dp_trains():
    ticks = []
    stop = threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.005)

    thread = threading.Thread(target=tick)
    thread.start()
    t0 = time.monotonic()
    dp.train("convnet", devices="host:2", batch=64, steps=6, generated_size=512)
    took = time.monotonic() - t0
    stop.set()
    thread.join()
    during = [t for t in ticks if t0 < t < t0 + took]
    assert took > 0.2 and len(during) > took / 0.05, (took, len(during))  # a tick each 5 ms, never held up


def test_blas_threads_are_the_callers_after_a_run():
    before = _core.blas_threads()
    dp.plan("mlp", devices="meta:2")
    assert _core.blas_threads() == before
    assert _core.blas_core().lower() not in ("prescott", "core2", "generic"), _core.blas_core()


def script(tmp_path, body):
    path = tmp_path / "run.py"
    path.write_text(textwrap.dedent(body))
    env = dict(os.environ, PYTHONPATH=PACKAGE)
    return path, env


def test_ctrl_c_ends_after_the_step_in_flight_with_a_checkpoint(tmp_path):
    path, env = script(tmp_path, f"""
        import sys, dp_engine as dp
        try:
            dp.train("convnet", devices="host:2", batch=32, steps=100000, generated_size=256,
                     checkpoint={str(tmp_path / 'ckpt')!r}, checkpoint_every=1000000, metrics={str(tmp_path / 'm.jsonl')!r})
        except KeyboardInterrupt as e:
            print("KeyboardInterrupt:", e)
            sys.exit(5)
    """)
    p = subprocess.Popen([sys.executable, str(path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    metrics = tmp_path / "m.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (metrics.exists() and metrics.read_text().count("\n") >= 3):
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 5 and "KeyboardInterrupt: dp train interrupted after its step in flight" in out, (out, err)
    assert "interrupted (SIGINT) after step" in err and os.listdir(tmp_path / "ckpt"), err
    steps = [line for line in metrics.read_text().splitlines() if '"step"' in line]
    assert 3 <= len(steps) < 100000


def test_a_progress_bar_when_asked(tmp_path):
    pytest.importorskip("tqdm")
    path, env = script(tmp_path, """
        import dp_engine as dp
        dp.train("mlp", devices="host:1", batch=32, steps=5, generated_size=256, progress=True)
    """)
    p = subprocess.run([sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0 and "dp train" in p.stderr and "5/5" in p.stderr and "loss=" in p.stderr, p.stderr[-2000:]


def test_the_wrong_interpreter_is_told_which_and_how(tmp_path):
    other = next((p for p in ("/usr/local/bin/python3", os.path.expanduser("~/.pyenv/shims/python3"))
                  if os.path.exists(p) and os.path.realpath(p) != os.path.realpath(sys.executable)), None)
    if other is None:
        pytest.skip("no second Python on this machine")
    p = subprocess.run([other, "-c", "import dp_engine"], env=dict(os.environ, PYTHONPATH=PACKAGE), capture_output=True,
                       text=True)
    if p.returncode == 0:
        pytest.skip(f"{other} loads the package too (the same Python version, with NumPy)")
    # one line naming that interpreter, what it lacks and what to do; no traceback into the package
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: ") and "this Python (" in last and "/usr/bin/python3" in last, p.stderr[-1500:]
    assert "numpy" in last.lower() or "does not load" in last
