"""Running dp from a benchmark and reading what it reports: how a benchmark starts (its arguments,
the OpenBLAS core type, the machine line), the metrics rows of `dp train`, its samples/s over the
steps after a warm-up, and the JSON of `dp memprof`."""
import argparse
import json
import os
import subprocess
import tempfile

from openblas import coretype_env, machine_line


def start(repeats=3, add=None):
    """What a benchmark begins with: its arguments (--dp, --repeats, and those `add` puts on the
    parser), the environment that names OpenBLAS's core type for this CPU, and dp's absolute path;
    the machine line is printed first."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--dp", default="build/dp")
    ap.add_argument("--repeats", type=int, default=repeats)
    if add:
        add(ap)
    a = ap.parse_args()
    print(machine_line())
    return a, coretype_env(), os.path.abspath(a.dp)


def train_rows(cmd, env):
    """Every metrics row (steps and evaluations) of `cmd`, a `dp train` command line."""
    with tempfile.NamedTemporaryFile(suffix=".jsonl") as m:
        subprocess.run(cmd + ["--metrics", m.name], check=True, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return [json.loads(line) for line in open(m.name)]


def samples_per_s(cmd, env, warmup=3):
    """`dp train`'s samples over the steps' own time, the first `warmup` steps not counted."""
    rows = [r for r in train_rows(cmd, env) if "step" in r][warmup:]
    return sum(sum(r["chunks"]) for r in rows) / sum(sum(r["chunks"]) / r["samples_per_s"] for r in rows)


def memprof(cmd, env):
    """The JSON report of `cmd`, a `dp memprof` command line."""
    with tempfile.NamedTemporaryFile(suffix=".json") as j:
        subprocess.run(cmd + ["--json", j.name], check=True, env=env, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        return json.load(open(j.name))
