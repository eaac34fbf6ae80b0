"""Images per second from an image folder: dp's loader (build/folder_speed: decoding ahead on its
threads, RandomResizedCrop + flip, normalised batches) against PyTorch's DataLoader(ImageFolder,
num_workers=2) with the same transforms, on the same files: a folder of mixed-size JPEGs generated
here (2000 by default). Reports each side's images/s, their ratio, and peak resident memory.

usage: bench_image_folder.py [--images N] [--size S] [--batch B] [--threads T] [--repeats R]
"""
import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from openblas import machine_line, reexec_with_coretype  # noqa: E402

reexec_with_coretype()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from torchvision import datasets, transforms  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def make_folder(root, images, seed=1):
    """`images` JPEGs of 10 classes, each 160-640 px a side (photo-like: smooth fields and noise)."""
    rng = np.random.default_rng(seed)
    for i in range(images):
        c = i % 10
        os.makedirs(os.path.join(root, f"class{c}"), exist_ok=True)
        h, w = rng.integers(160, 641, 2)
        y, x = np.mgrid[0:h, 0:w]
        img = np.stack([(x * (c + 1) // 3 + y) % 256, (y * 2 + c * 20) % 256, (x + y * c) % 256], axis=-1)
        img = np.clip(img + rng.normal(0, 12, img.shape), 0, 255).astype(np.uint8)
        Image.fromarray(img).save(os.path.join(root, f"class{c}", f"{i:05d}.jpg"), quality=90)


def torch_rate(root, size, batch, workers):
    tf = transforms.Compose([transforms.RandomResizedCrop(size), transforms.RandomHorizontalFlip(), transforms.ToTensor(),
                             transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
    loader = torch.utils.data.DataLoader(datasets.ImageFolder(root, tf), batch_size=batch, shuffle=True,
                                         num_workers=workers)
    t0, n = time.perf_counter(), 0
    for x, _ in loader:
        n += x.shape[0]
    return n / (time.perf_counter() - t0)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    print(machine_line(f"; folder of {a.images} JPEGs, 160-640 px, at {a.size}, batch {a.batch}"))
    binary = os.path.join(ROOT, "build", "folder_speed")
    with tempfile.TemporaryDirectory() as tmp:
        make_folder(tmp, a.images)
        dp_rates, torch_rates, dp_rss = [], [], 0
        for _ in range(a.repeats):  # interleaved: the machine's drift falls on both
            out = subprocess.run([binary, tmp, str(a.size), str(a.batch), str(a.threads), "1"], check=True,
                                 capture_output=True, text=True).stdout
            dp_rates.append(float(out.split("augment 1: ")[1].split(" images/s")[0]))
            dp_rss = max(dp_rss, float(out.split("peak resident ")[1].split(" MiB")[0]))
            torch_rates.append(torch_rate(tmp, a.size, a.batch, a.threads))
        torch_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # with PyTorch itself loaded
        dp_med, torch_med = np.median(dp_rates), np.median(torch_rates)
        print(f"dp: {dp_med:.1f} images/s ({a.threads} loader threads), peak resident {dp_rss:.0f} MiB")
        print(f"PyTorch DataLoader(ImageFolder, num_workers={a.threads}): {torch_med:.1f} images/s, "
              f"peak resident of its main process {torch_rss:.0f} MiB (its workers besides)")
        print(f"ratio dp / PyTorch: {dp_med / torch_med:.2f}x (medians of {a.repeats} interleaved runs)")


if __name__ == "__main__":
    main()
