"""Two dp training runs of the same model, seed and batches on different devices (cuda:0x4 against
host:4, say) compared step by step: the largest loss difference over the steps, and the largest
weight difference in the saved weights relative to the largest weight. Standard library only (the
GPU machine's python and Debian's both run it).

usage: compare_runs.py A.jsonl A.safetensors B.jsonl B.safetensors [--loss-tol 1e-3] [--weight-tol 1e-3]
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("metrics_a")
    ap.add_argument("weights_a")
    ap.add_argument("metrics_b")
    ap.add_argument("weights_b")
    ap.add_argument("--loss-tol", type=float, default=1e-3, help="largest |loss A - loss B| / |loss A|")
    ap.add_argument("--weight-tol", type=float, default=1e-3, help="largest |w A - w B| / largest |w A|")
    a = ap.parse_args()
    la, lb = losses(a.metrics_a), losses(a.metrics_b)
    ok = True
    if len(la) != len(lb) or not la:
        print(f"steps differ: {len(la)} against {len(lb)}")
        return 1
    loss_rel = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(la, lb))
    worst = max(range(len(la)), key=lambda i: abs(la[i] - lb[i]))
    print(f"loss: {len(la)} steps, largest relative difference {loss_rel:.2e} (step {worst + 1}: {la[worst]:.6f} "
          f"against {lb[worst]:.6f}), tolerance {a.loss_tol:g}")
    ok &= loss_rel <= a.loss_tol
    wa, wb = weights(a.weights_a), weights(a.weights_b)
    if wa.keys() != wb.keys():
        print(f"weights: different tensors ({sorted(wa.keys() ^ wb.keys())[:5]})")
        return 1
    scale = max(max((abs(v) for v in t), default=0.0) for t in wa.values()) or 1.0
    diff, where = 0.0, ""
    for name in wa:
        if len(wa[name]) != len(wb[name]):
            print(f"weights: {name} has {len(wa[name])} values against {len(wb[name])}")
            return 1
        d = max((abs(x - y) for x, y in zip(wa[name], wb[name])), default=0.0)
        if d >= diff:
            diff, where = d, name
    print(f"weights: {len(wa)} tensors, largest difference {diff:.2e} ({where}) = {diff / scale:.2e} of the largest "
          f"weight {scale:.3g}, tolerance {a.weight_tol:g}")
    ok &= diff / scale <= a.weight_tol
    print("within tolerance" if ok else "NOT within tolerance")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
