"""dp plan against the GPU's own memory: each memprof report a GPU run recorded in
tests/fixtures/gpu-memprof (`dp memprof --devices cuda:0xN`, written by tools/gpu/verify.py) is held
to `dp plan --devices meta:N` with the same flags, on any machine.

What must agree: each device's peak of every category, and, phase by phase, each device's peak and
what it held at that peak. The workspace of a convolutional network is held only where the two
hold the same: the recorded reports predate the convolutions' workspace decided in shared code
(cuDNN's algorithms chosen to fit the layer's workspace, docs/plan.md), so until a GPU records
them again their figures are printed, plan against GPU, not held.

usage: test_plan_gpu_fixtures.py DP_BINARY
"""
import glob
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from checks import Checks, run_dp  # noqa: E402

DP = sys.argv[1]
FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "gpu-memprof")
WORKSPACE = "workspace"
c = Checks()


def meta_devices(spec):
    """cuda:0x4 -> meta:4 (the plan of as many devices)."""
    if "x" in spec:
        return "meta:" + spec.split("x")[1]
    return "meta:" + str(len(spec.split(":")[1].split(",")))


def plan_for(fixture, out):
    flags = [os.path.join(FIXTURES, f) if f.endswith(".json") else f for f in fixture["flags"]]
    rc, stdout, stderr = run_dp(DP, ["plan", "--devices", meta_devices(fixture["devices"]), "--json", out] + flags)
    return rc, stderr


paths = sorted(glob.glob(os.path.join(FIXTURES, "memprof-*.json")))
c.check("fixtures: the GPU's memprof reports are there", len(paths) >= 5, str(paths))
with tempfile.TemporaryDirectory() as tmp:
    for path in paths:
        name = os.path.basename(path)
        gpu = json.load(open(path))
        out = os.path.join(tmp, "plan.json")
        rc, err = plan_for(gpu, out)
        c.check(f"{name}: dp plan runs", rc == 0, err[-2000:])
        if rc != 0:
            continue
        plan = json.load(open(out))
        # Models without convolutions: every workspace decision is the shared code's already.
        convolutional = gpu["flags"][gpu["flags"].index("--model") + 1] not in ("mlp", "gpt")
        g_devs, p_devs = gpu["report"]["devices"], plan["devices"]
        c.check(f"{name}: as many devices", len(g_devs) == len(p_devs))
        for g, p in zip(g_devs, p_devs):
            differ = {k: (g["peak_by_category"][k], p["peak_by_category"].get(k))
                      for k in g["peak_by_category"] if (k != WORKSPACE or not convolutional)
                      and g["peak_by_category"][k] != p["peak_by_category"].get(k)}
            c.check(f"{name}: device {g['index']}: every category's peak (GPU, plan)", not differ, str(differ))
            if not convolutional:
                c.check(f"{name}: device {g['index']}: the peak and its phase",
                        (g["peak_bytes"], g["peak_phase"]) == (p["peak_bytes"], p["peak_phase"]))
            gw, pw = g["peak_by_category"][WORKSPACE], p["peak_by_category"][WORKSPACE]
            print(f"{name}: device {g['index']}: peak {g['peak_bytes']} on the GPU, {p['peak_bytes']} planned "
                  f"({p['peak_bytes'] / g['peak_bytes']:.3f}x); workspace {gw} on the GPU, {pw} planned")
        g_line, p_line = gpu["report"]["timeline"], plan["timeline"]
        c.check(f"{name}: the same phases", [(e["step"], e["phase"]) for e in g_line] ==
                [(e["step"], e["phase"]) for e in p_line])
        compared = 0
        for ge, pe in zip(g_line, p_line):
            for i, (gd, pd) in enumerate(zip(ge["devices"], pe["devices"])):
                if convolutional and gd["at_peak"][WORKSPACE] != pd["at_peak"][WORKSPACE]:
                    continue
                compared += 1
                c.check(f"{name}: step {ge['step']} {ge['phase']}, device {i}: the peak and what it held",
                        gd["peak"] == pd["peak"] and gd["at_peak"] == pd["at_peak"],
                        f"GPU {gd['peak']} {gd['at_peak']}, plan {pd['peak']} {pd['at_peak']}")
        c.check(f"{name}: phases compared", compared > 0)
c.finish()
