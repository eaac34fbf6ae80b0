"""Where DataParallel's overhead goes: the mean time of each phase of a step over steps FIRST..,
for runs of the same model and global batch on different devices (`dp train --metrics`), side by
side, with samples/s (tools/gpu/profile.sh, for cuda:0x1 against cuda:0x4).

`--step-time FIRST METRICS.jsonl` prints only the mean wall-clock time per step (profile.sh's, per
`--cudnn` choice), from the same computation.

usage: phase_table.py [--step-time] FIRST LABEL=METRICS.jsonl [LABEL=METRICS.jsonl ...]
"""
import json
import sys

ORDER = ["load", "scatter", "replicate", "forward", "gather", "loss", "backward", "reduce", "update"]


def steps_from(path, first):
    """The steps from FIRST on, and the run's wall clock (time_s) when the step before ended."""
    rows = [json.loads(line) for line in open(path) if '"step"' in line]
    before = [r["time_s"] for r in rows if r["step"] == first - 1]
    rows = [r for r in rows if r["step"] >= first]
    if not rows:
        sys.exit(f"{path}: no steps from {first} on")
    return rows, before[0] if before else 0.0


def mean_step_ms(rows, start):
    """Wall-clock time per step, the work between steps (loading the next batch) included."""
    return 1e3 * (rows[-1]["time_s"] - start) / len(rows)


def mean_phases(path, first):
    rows, start = steps_from(path, first)
    phases = {p: sum(r["phase_ms"][p] for r in rows) / len(rows) for p in rows[0]["phase_ms"]}
    step_ms = mean_step_ms(rows, start)
    return phases, step_ms, sum(rows[0]["chunks"]) * 1e3 / step_ms


def main():
    usage = __doc__.strip().splitlines()[-1]
    if sys.argv[1:2] == ["--step-time"]:
        if len(sys.argv) != 4 or not sys.argv[2].isdigit():
            sys.exit(usage)
        first = int(sys.argv[2])
        print(f"{mean_step_ms(*steps_from(sys.argv[3], first)):.3f} ms per step (steps {first} on)")
        return
    if len(sys.argv) < 3 or not sys.argv[1].isdigit() or any("=" not in a for a in sys.argv[2:]):
        sys.exit(usage)
    first = int(sys.argv[1])
    runs = [(a.split("=", 1)[0], mean_phases(a.split("=", 1)[1], first)) for a in sys.argv[2:]]
    print("| phase (ms per step, steps %d on) | %s |" % (first, " | ".join(label for label, _ in runs)))
    print("|---" * (len(runs) + 1) + "|")
    names = runs[0][1][0]
    for p in [p for p in ORDER if p in names] + sorted(p for p in names if p not in ORDER):
        print(f"| {p} | " + " | ".join(f"{r[0][p]:.3f}" for _, r in runs) + " |")
    print("| step | " + " | ".join(f"{r[1]:.3f}" for _, r in runs) + " |")
    print("| samples/s | " + " | ".join(f"{r[2]:.0f}" for _, r in runs) + " |")


if __name__ == "__main__":
    main()
