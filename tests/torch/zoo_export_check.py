"""torchvision's classifier families as model files: each row of docs/model-format.md's zoo table
held to what happens. A family that "exports" is exported by tools/export_model.py at its native
input size and planned by dp (`dp plan --devices meta:2`: the file loads, every node's shape
checked); a family that is "refused" is refused by the exporter (exit 2) with the reason the row
gives, and one that "dp refuses" exports but dp refuses the file (exit 2) so. Training
each at 224 pixels is not done here (model_file_crosscheck.py trains the families against PyTorch
at small sizes).

usage: zoo_export_check.py DP_BINARY   (exit 77 = skipped: no torch or torchvision)
"""
import os
import re
import subprocess
import sys
import tempfile

try:
    import torch  # noqa: F401
    import torchvision  # noqa: F401
except ImportError:
    print("SKIP: PyTorch or torchvision is not installed (apt-get install python3-torch python3-torchvision)")
    sys.exit(77)

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DP = os.path.abspath(sys.argv[1])
# | Family | `model` | input | `{kwargs}` | what happens |
ROW = re.compile(r"^\| ([^|]+) \| `([a-z0-9_]+)` \| (\d+x\d+x\d+) \| `(\{[^`]*\})` \| (exports|refused: (.+)|dp refuses: (.+)) \|$")


def zoo_rows():
    rows = []
    with open(os.path.join(ROOT, "docs", "model-format.md")) as f:
        for line in f:
            m = ROW.match(line.strip())
            if m:
                rows.append(m.groups())
    return rows


def main():
    rows = zoo_rows()
    failed, passed = [], 0
    families = {r[0].split(",")[0] for r in rows}  # "GoogLeNet, auxiliary heads" is GoogLeNet
    if len(families) < 21:  # torchvision 0.14's classification families (Swin V2 counted apart)
        failed.append(f"docs/model-format.md's zoo table has {len(families)} families, not every one")
    with tempfile.TemporaryDirectory() as work:
        for family, model, shape, kwargs, outcome, reason, dp_reason in rows:
            out = os.path.join(work, model + ".json")
            p = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "export_model.py"),
                                "torchvision.models:" + model, "--kwargs", kwargs, "--input", shape, "--out", out],
                               capture_output=True, text=True, timeout=600)
            what = f"{family} ({model} at {shape})"
            if outcome == "exports" or dp_reason:
                if p.returncode != 0:
                    failed.append(f"{what}: the table says it exports; the exporter says: {p.stderr[-1500:]}")
                    continue
                q = subprocess.run([DP, "plan", "--model", out, "--devices", "meta:2", "--batch", "4"],
                                   capture_output=True, text=True, timeout=600)
                if dp_reason:
                    needle = dp_reason.replace("`", "")
                    if q.returncode != 2 or needle not in q.stderr:
                        failed.append(f"{what}: the table says dp refuses it ({needle}); dp plan exits "
                                      f"{q.returncode}: {q.stderr[-1500:]}")
                        continue
                elif q.returncode != 0:
                    failed.append(f"{what}: exported, but dp plan exits {q.returncode}: {q.stderr[-1500:]}")
                    continue
            else:
                needle = reason.replace("`", "")
                if p.returncode != 2 or needle not in p.stderr:
                    failed.append(f"{what}: the table says refused ({needle}); exit {p.returncode}: {p.stderr[-1500:]}")
                    continue
            passed += 1
            print(f"ok {what}: {outcome}")
    for f in failed:
        print("FAIL " + f)
    print(f"{passed} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
