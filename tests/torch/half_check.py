"""dp's bfloat16 and float16 rounding against PyTorch's .to(torch.bfloat16) and .half() on a
million float32 values: random bit patterns over the whole range (subnormals, NaNs, infinities
included), values around every float16 and bfloat16 rounding boundary, and special cases. Writes
the vectors and runs dp_tests' comparison case with them.

usage: half_check.py DP_TESTS_BINARY   (exit 77 = skipped: no torch)
"""
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError:
    print("SKIP: PyTorch is not installed (apt-get install python3-torch)")
    sys.exit(77)


def main():
    g = torch.Generator().manual_seed(3)
    random_bits = torch.randint(-2**31, 2**31, (600000,), generator=g, dtype=torch.int64).to(torch.int32)
    # Every float16 value and the midpoints between neighbours (ties), and the same for bfloat16.
    h = torch.arange(0, 2**16, dtype=torch.int32).to(torch.int16).view(torch.float16).float()
    hb = torch.arange(0, 2**16, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).float()
    finite_h, finite_b = h[torch.isfinite(h)], hb[torch.isfinite(hb)]
    mids_h = (finite_h.double()[:-1] + finite_h.double()[1:]) / 2
    mids_b = (finite_b.double()[:-1] + finite_b.double()[1:]) / 2
    values = torch.cat([random_bits.view(torch.float32), h, hb, mids_h.float(), mids_b.float(),
                        torch.tensor([0.0, -0.0, float("inf"), -float("inf"), float("nan"), 65504.0, 65520.0,
                                      65519.996, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 1e-45, 3.4e38])])
    bf = values.to(torch.bfloat16).view(torch.int16).numpy().astype("<u2")
    hf = values.half().view(torch.int16).numpy().astype("<u2")
    bits = values.view(torch.int32).numpy().astype("<u4")
    with tempfile.NamedTemporaryFile(suffix=".bin", delete=False) as f:
        rec = np.zeros(len(bits), dtype=[("x", "<u4"), ("bf", "<u2"), ("hf", "<u2")])
        rec["x"], rec["bf"], rec["hf"] = bits, bf, hf
        f.write(rec.tobytes())
        path = f.name
    try:
        p = subprocess.run([os.path.abspath(sys.argv[1]), "-tc=16-bit conversions match PyTorch*", "-s"],
                           env=dict(os.environ, DP_HALF_VECTORS=path), capture_output=True, text=True)
        print(p.stdout[-2000:])
        ok = p.returncode == 0 and "1 passed" in p.stdout
        print(f"{len(bits)} values: {'all equal to PyTorch' if ok else 'MISMATCH'}")
        sys.exit(0 if ok else 1)
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
