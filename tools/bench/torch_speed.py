"""PyTorch eager's training speed on one device, the comparison run for dp on the same device
(tools/bench/bench_gpu.py): the same model (tests/torch/reference.py), batch, optimizer (SGD, lr
0.05, momentum 0.9, dp's defaults) and loss, on random inputs already on the device (several
batches in rotation, so no step re-reads one batch from the cache), TF32 off unless --tf32.

usage: torch_speed.py --model resnet18 --batch 256 [--device cuda] [--steps 50] [--warmup 10]
                      [--precision fp32|bf16] [--tf32] [--deterministic] [--profile N]
Prints one JSON line: samples_per_s over the steps after the warm-up, the device's name and the
PyTorch version. On a GPU the timing waits for the device (torch.cuda.synchronize) at both ends.
--deterministic takes cuDNN's deterministic algorithms only (as dp does); --profile N then profiles
N more steps with torch.profiler and prints, before the JSON line, the GPU kernel time per step of each
kernel (tools/gpu/profile.sh sets it beside dp's own kernel times).
"""
import argparse
import json
import os
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "torch"))
import reference as ref  # noqa: E402

INPUT_SHAPES = {"mlp": (1, 28, 28), "convnet": (1, 28, 28), "resnet8": (3, 32, 32), "resnet18": (3, 32, 32)}
ROTATION = 4  # distinct batches cycled through


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, choices=sorted(INPUT_SHAPES))
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"])
    ap.add_argument("--tf32", action="store_true")
    ap.add_argument("--deterministic", action="store_true", help="cuDNN's deterministic algorithms only")
    ap.add_argument("--profile", type=int, default=0, help="then profile this many steps, print kernel times")
    ap.add_argument("--threads", type=int, default=0, help="CPU only: torch.set_num_threads (0: PyTorch's default)")
    a = ap.parse_args()
    if a.steps <= 0 or a.warmup < 0 or a.batch <= 0:
        ap.error("--steps and --batch must be positive, --warmup not negative")
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = a.tf32
        torch.backends.cudnn.allow_tf32 = a.tf32
        torch.backends.cudnn.benchmark = False  # dp asks cuDNN's heuristic, it does not time algorithms
        torch.backends.cudnn.deterministic = a.deterministic
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = ref.make_model(a.model).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    xs = [torch.randn(a.batch, *INPUT_SHAPES[a.model], device=device) for _ in range(ROTATION)]
    ys = [torch.randint(0, 10, (a.batch,), device=device) for _ in range(ROTATION)]
    model.train()

    def step(i):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = loss_fn(model(xs[i % ROTATION]), ys[i % ROTATION])
        loss.backward()
        opt.step()
        return loss

    for i in range(a.warmup):
        step(i)
    if cuda:
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for i in range(a.steps):
        loss = step(i)
    if cuda:
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - t0
    if a.profile:
        profile(step, a.profile, cuda)
    print(json.dumps({"framework": "pytorch " + torch.__version__, "model": a.model, "batch": a.batch,
                      "device": torch.cuda.get_device_name(device) if cuda else "cpu", "precision": a.precision,
                      "tf32": a.tf32, "steps": a.steps, "samples_per_s": a.batch * a.steps / elapsed,
                      "last_loss": loss.item()}))


def profile(step, steps, cuda):
    """GPU kernel time per step of each kernel over `steps` steps, the largest first."""
    from torch.profiler import ProfilerActivity, profile as torch_profile
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with torch_profile(activities=acts) as prof:
        for i in range(steps):
            step(i)
        if cuda:
            torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = getattr(e, "self_cuda_time_total", 0)
        if t > 0 and str(getattr(e, "device_type", "")).endswith("CUDA"):
            rows.append((t / steps / 1000.0, e.count / steps, e.key))
    rows.sort(reverse=True)
    print(f"kernel time per step: {sum(r[0] for r in rows):.3f} ms in {sum(r[1] for r in rows):.0f} kernels")
    for ms, n, key in rows[:25]:
        print(f"{ms:9.3f} ms {n:6.1f}x  {key[:110]}")


if __name__ == "__main__":
    main()
