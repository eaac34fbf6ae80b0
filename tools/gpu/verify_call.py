"""One call of tools/gpu/verify.py: its clock (every limit read from one deadline), its commands run
under time limits as GNU timeout runs them, its summary (one line a stage), and what the stages share
(the binaries' paths, doctest's case names). Standard library only."""
import hashlib
import os
import re
import signal
import subprocess
import time

DP = "build-gpu/dp"
GPU_TESTS = "build-gpu/tests/dp_gpu_tests"
UNIT_TESTS = "build-gpu/tests/dp_tests"


class Clock:
    """Every limit is read from one deadline (epoch seconds; 0 is none), exported as DP_DEADLINE for the
    tools that cut their own work to it (bench_gpu.py)."""

    def __init__(self, within):
        self.deadline = int(time.time()) + within if within is not None else 0
        os.environ["DP_DEADLINE"] = str(self.deadline)

    def left(self):
        """Seconds left before the deadline (a large number when there is none)."""
        return 999999 if self.deadline == 0 else self.deadline - int(time.time())

    def limit(self, cap):
        """A time limit for one command: its own cap, or what is left less a margin for the logs, if less."""
        return max(1, min(cap, self.left() - 10))


def run(cmd, limit, out=None, append=False, env=None):
    """cmd's exit status, its output (stdout and stderr) to the file out, within limit seconds as GNU
    timeout gives them: past it the command's whole process group is stopped and the status is 124.
    A command killed by a signal is 128 + the signal, as a shell reports it."""
    sink = open(out, "a" if append else "w") if out else open(os.devnull, "w")
    with sink:
        p = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            rc = p.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            stop_group(p)
            return 124
        except BaseException:
            stop_group(p)
            raise
    return rc if rc >= 0 else 128 - rc


def stop_group(p, grace=10):
    """SIGTERM to p's process group, SIGKILL if it has not ended after grace seconds."""
    try:
        os.killpg(p.pid, signal.SIGTERM)
        p.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.wait()
    except ProcessLookupError:
        p.wait()


def capture(cmd, limit=60, env=None):
    """cmd's stdout and stderr as one text ('<cmd>: not found' when it is not there)."""
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                           timeout=limit, env=env)
        return p.stdout
    except FileNotFoundError:
        return f"{cmd[0]}: not found\n"
    except subprocess.TimeoutExpired:
        return f"{cmd[0]}: no answer in {limit} s\n"


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def tail(text, n):
    """The last n lines of text, each ending in a newline (as tail -n writes them)."""
    lines = text.splitlines()[-n:]
    return "".join(line + "\n" for line in lines)


def ran_nothing(text):
    """A doctest run whose filter matched nothing ran nothing: never a pass."""
    return re.search(r"test cases: *0 \|", text) is not None


def case_filter(name):
    """doctest's -tc= for one case: a ',' there separates filters, '?' matches it."""
    return "-tc=" + name.replace(",", "?")


def doctest_cases(binary):
    """A doctest binary's case names, one per line of its listing."""
    listing = capture([binary, "--list-test-cases", "--no-intro"])
    return [line for line in listing.splitlines() if line and not line.startswith(("[doctest]", "==="))]


def sha1(text):
    return hashlib.sha1(text.encode()).hexdigest()


class Verify:
    """One call: where the logs go, the summary, the clock, the stages failed, the prime running."""

    def __init__(self, out, clock):
        self.out = out
        self.clock = clock
        self.summary = os.path.join(out, "summary.txt")
        self.failed = 0
        self.prime = None
        self.env_sourced = False
        os.makedirs(out, exist_ok=True)
        open(self.summary, "w").close()

    def path(self, name):
        return os.path.join(self.out, name)

    def note(self, line):
        print(line, flush=True)
        with open(self.summary, "a") as f:
            f.write(line + "\n")

    def result(self, stage, rc, what):
        if rc == 0:
            self.note(f"PASS {stage}: {what}")
        else:
            self.note(f"FAIL {stage} (exit {rc}): {what}")
            self.failed += 1

    def fits(self, stage, seconds):
        """A stage starts only with this many seconds left; else one SKIP line says so."""
        left = self.clock.left()
        if left >= seconds:
            return True
        self.note(f"SKIP {stage}: {left} s left before the deadline, it needs at least {seconds} s")
        return False

    def env_ready(self):
        """build-gpu/env.sh (the libraries' paths build.sh found) in this process's environment."""
        if self.env_sourced:
            return True
        if not os.path.isfile("build-gpu/env.sh"):
            return False
        dump = subprocess.run(["bash", "-c", "source build-gpu/env.sh >/dev/null && env -0"], capture_output=True)
        if dump.returncode != 0:
            return False
        for entry in dump.stdout.split(b"\0"):
            name, sep, value = entry.decode(errors="replace").partition("=")
            if sep and name not in ("_", "SHLVL", "PWD", "OLDPWD"):
                os.environ[name] = value
        self.env_sourced = True
        return True


def seconds_since(t0):
    return int(time.monotonic() - t0)
