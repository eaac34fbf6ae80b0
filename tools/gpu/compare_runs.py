"""Two dp training runs of the same model, seed and batches on different devices (cuda:0x4 against
host:4, say) compared step by step: the largest loss difference over the steps, and the largest
weight difference in the saved weights relative to the largest weight. Standard library only (the
GPU machine's python and Debian's both run it).

usage: compare_runs.py A.jsonl A.safetensors B.jsonl B.safetensors [--loss-tol 1e-3] [--weight-tol 1e-3]
                       [--calibrate C.jsonl C.safetensors D.jsonl D.safetensors [--factor 10]]
Exit 0 when both are within tolerance, 1 otherwise; prints one line per measure either way.
"""
import argparse
import array
import json
import struct
import sys


def losses(path):
    return [json.loads(l)["loss"] for l in open(path) if '"step"' in l]


def weights(path):
    with open(path, "rb") as f:
        raw = f.read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, meta in header.items():
        if name == "__metadata__" or meta["dtype"] != "F32":
            continue
        begin, end = meta["data_offsets"]
        a = array.array("f")
        a.frombytes(raw[8 + n + begin:8 + n + end])
        if sys.byteorder != "little":
            a.byteswap()
        out[name] = a
    return out


def loss_drift(ma, mb):
    """Largest |loss A - loss B| / |loss A| over the steps, and the step; None when the steps differ."""
    la, lb = losses(ma), losses(mb)
    if len(la) != len(lb) or not la:
        print(f"steps differ: {len(la)} against {len(lb)}")
        return None
    worst = max(range(len(la)), key=lambda i: abs(la[i] - lb[i]) / max(abs(la[i]), 1e-12))
    return abs(la[worst] - lb[worst]) / max(abs(la[worst]), 1e-12), worst, la[worst], lb[worst], len(la)


def weight_drift(pa, pb):
    """Largest |w A - w B| over all tensors / the largest |w A|, the tensor, the scale; None on a mismatch."""
    wa, wb = weights(pa), weights(pb)
    if wa.keys() != wb.keys():
        print(f"weights: different tensors ({sorted(wa.keys() ^ wb.keys())[:5]})")
        return None
    scale = max(max((abs(v) for v in t), default=0.0) for t in wa.values()) or 1.0
    diff, where = 0.0, ""
    for name in wa:
        if len(wa[name]) != len(wb[name]):
            print(f"weights: {name} has {len(wa[name])} values against {len(wb[name])}")
            return None
        d = max((abs(x - y) for x, y in zip(wa[name], wb[name])), default=0.0)
        if d >= diff:
            diff, where = d, name
    return diff / scale, where, scale, len(wa)


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
