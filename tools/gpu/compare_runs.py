"""Two dp training runs of the same model, seed and batches on different devices (cuda:0x4 against
host:4, say) compared step by step: the largest loss difference over the steps, and the largest
weight difference in the saved weights relative to the largest weight. Standard library only (the
GPU machine's python and Debian's both run it; numpy, where it is there, for speed).

update_drift() compares one update instead (tools/gpu/capabilities.py's model file check): what each
run changed from where it started, tensor by tensor, each relative to its own largest change, so a
small tensor's update counts as much as a large one's.

usage: compare_runs.py A.jsonl A.safetensors B.jsonl B.safetensors [--loss-tol 1e-3] [--weight-tol 1e-3]
                       [--calibrate C.jsonl C.safetensors D.jsonl D.safetensors [--factor 10]]
Exit 0 when both are within tolerance, 1 otherwise; prints one line per measure either way.
"""
import argparse
import json
import math
import sys

import weights_file


def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if '"step"' in l]


def weights(path):
    return weights_file.read(path)[0]


def loss_drift(ma, mb):
    """Largest |loss A - loss B| / |loss A| over the steps, and the step; None when the steps differ."""
    la, lb = losses(ma), losses(mb)
    if len(la) != len(lb) or not la:
        print(f"steps differ: {len(la)} against {len(lb)}")
        return None
    worst = max(range(len(la)), key=lambda i: abs(la[i] - lb[i]) / max(abs(la[i]), 1e-12))
    return abs(la[worst] - lb[worst]) / max(abs(la[worst]), 1e-12), worst, la[worst], lb[worst], len(la)


def _largest(values):
    return float(max(abs(values.max()), abs(values.min()))) if hasattr(values, "max") and len(values) else \
        max((abs(v) for v in values), default=0.0)


def _largest_difference(x, y):
    if hasattr(x, "max"):
        return float(abs(x - y).max()) if len(x) else 0.0
    return max((abs(p - q) for p, q in zip(x, y)), default=0.0)


def weight_drift(pa, pb):
    """Largest |w A - w B| over all tensors / the largest |w A|, the tensor, the scale; None on a mismatch."""
    wa, wb = weights(pa), weights(pb)
    if wa.keys() != wb.keys():
        print(f"weights: different tensors ({sorted(wa.keys() ^ wb.keys())[:5]})")
        return None
    scale = max(_largest(t) for t in wa.values()) or 1.0
    diff, where = 0.0, ""
    for name in wa:
        if len(wa[name]) != len(wb[name]):
            print(f"weights: {name} has {len(wa[name])} values against {len(wb[name])}")
            return None
        d = _largest_difference(wa[name], wb[name])
        if d >= diff:
            diff, where = d, name
    return diff / scale, where, scale, len(wa)


def _norm(values):
    return math.sqrt(float((values * values).sum())) if hasattr(values, "sum") else math.sqrt(sum(v * v for v in values))


def update_drift(after_a, init_a, after_b, init_b):
    """One update compared: for every float tensor, |(A - A0) - (B - B0)| / |A - A0| in the Euclidean norm
    (each run against its own start, each tensor against its own change, so a small tensor counts as
    much as a large one); the worst tensor's (relative difference, name, tensor count); every other
    tensor (int64 counters) must be equal. An error text on a mismatch.
    The norm, not the largest element: in a network of ReLUs and max pools a rounding moves a few
    units across a kink, which moves a few elements of a gradient far while the rest stay put."""
    (a1, a_other), (a0, _) = weights_file.read(after_a), weights_file.read(init_a)
    (b1, b_other), (b0, _) = weights_file.read(after_b), weights_file.read(init_b)
    if not (a1.keys() == a0.keys() == b1.keys() == b0.keys()) or a_other.keys() != b_other.keys():
        return f"different tensors: {sorted((a1.keys() ^ b1.keys()) | (a_other.keys() ^ b_other.keys()))[:5]}"
    for name in a_other:
        if a_other[name] != b_other[name]:
            return f"{name} differs (compared exactly)"
    worst, where = 0.0, ""
    for name in sorted(a1):
        if not len(a1[name]) == len(a0[name]) == len(b1[name]) == len(b0[name]):
            return f"{name}: different sizes"
        if hasattr(a1[name], "sum"):
            da, dd = a1[name] - a0[name], (a1[name] - a0[name]) - (b1[name] - b0[name])
        else:
            da = [x - y for x, y in zip(a1[name], a0[name])]
            dd = [x - y - (p - q) for x, y, p, q in zip(a1[name], a0[name], b1[name], b0[name])]
        scale, diff = _norm(da), _norm(dd)
        rel = (0.0 if diff == 0.0 else math.inf) if scale == 0.0 else diff / scale  # A left it alone: B must too
        if rel >= worst:
            worst, where = rel, name
    return worst, where, len(a1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("metrics_a")
    ap.add_argument("weights_a")
    ap.add_argument("metrics_b")
    ap.add_argument("weights_b")
    ap.add_argument("--loss-tol", type=float, default=1e-3, help="largest |loss A - loss B| / |loss A|")
    ap.add_argument("--weight-tol", type=float, default=1e-3, help="largest |w A - w B| / largest |w A|")
    ap.add_argument("--calibrate", nargs=4, metavar=("C.jsonl", "C.safetensors", "D.jsonl", "D.safetensors"),
                    help="two runs that differ only in the order of their float sums (host:4 with 1 and 2 threads "
                         "per device): training magnifies last-bit differences step by step, so each tolerance "
                         "becomes the larger of its own and --factor times this pair's drift")
    ap.add_argument("--factor", type=float, default=10.0)
    a = ap.parse_args()
    loss_tol, weight_tol = a.loss_tol, a.weight_tol
    if a.calibrate:
        cl, cw = loss_drift(a.calibrate[0], a.calibrate[2]), weight_drift(a.calibrate[1], a.calibrate[3])
        if cl is None or cw is None:
            return 1
        loss_tol, weight_tol = max(loss_tol, a.factor * cl[0]), max(weight_tol, a.factor * cw[0])
        print(f"calibration (summation order alone): loss drift {cl[0]:.2e}, weight drift {cw[0]:.2e}; "
              f"tolerances {loss_tol:.2g} and {weight_tol:.2g} ({a.factor:g}x, at least the given ones)")
    ld, wd = loss_drift(a.metrics_a, a.metrics_b), weight_drift(a.weights_a, a.weights_b)
    if ld is None or wd is None:
        return 1
    rel, worst, x, y, steps = ld
    print(f"loss: {steps} steps, largest relative difference {rel:.2e} (step {worst + 1}: {x:.6f} against {y:.6f}), "
          f"tolerance {loss_tol:.2g}")
    wrel, where, scale, count = wd
    print(f"weights: {count} tensors, largest difference {wrel * scale:.2e} ({where}) = {wrel:.2e} of the largest "
          f"weight {scale:.3g}, tolerance {weight_tol:.2g}")
    ok = rel <= loss_tol and wrel <= weight_tol
    print("within tolerance" if ok else "NOT within tolerance")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
