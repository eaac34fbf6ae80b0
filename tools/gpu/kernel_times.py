"""Kernel times per step from Nsight Compute's CSV (ncu --csv --metrics gpu__time_duration.sum),
the largest first: where a dp step's GPU time goes (tools/gpu/profile.sh).

usage: kernel_times.py NCU_CSV STEPS
"""
import collections
import csv
import sys

# Milliseconds per unit, as Nsight Compute writes them: "nsecond" in some versions, "ns" in others
# (2025's, on the H200 run of 2026-11-26, whose profile this table's lack of "ns" lost).
UNIT = {"nsecond": 1e-6, "ns": 1e-6, "usecond": 1e-3, "us": 1e-3, "msecond": 1.0, "ms": 1.0, "second": 1e3, "s": 1e3}


def main():
    path, steps = sys.argv[1], int(sys.argv[2])
    with open(path) as f:
        lines = [l for l in f if l.startswith('"')]  # ncu's own notes are not quoted
    total = collections.defaultdict(float)
    count = collections.Counter()
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = row["Metric Unit"]
        if unit not in UNIT:
            sys.exit(f"{path}: gpu__time_duration.sum in unknown unit '{unit}' (known: {', '.join(UNIT)})")
        ms = float(row["Metric Value"].replace(",", "")) * UNIT[unit]
        name = row["Kernel Name"]
        total[name] += ms
        count[name] += 1
    if not total:
        sys.exit(f"{path}: no gpu__time_duration.sum rows")
    rows = sorted(((ms / steps, count[k] / steps, k) for k, ms in total.items()), reverse=True)
    print(f"kernel time per step: {sum(r[0] for r in rows):.3f} ms in {sum(r[1] for r in rows):.0f} kernels")
    for ms, n, key in rows[:25]:
        print(f"{ms:9.3f} ms {n:6.1f}x  {key[:110]}")


if __name__ == "__main__":
    main()
