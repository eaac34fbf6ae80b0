"""One image folder, trained by dp and by PyTorch alike: accuracy on its val/ after a few epochs,
over several seeds each, so the difference can be read against the seed spread. The folder is
generated here: 10 classes of shapes (a disc, a square, a bar, …) in a class colour family, drawn
at random sizes and places on noisy backgrounds, 64-160 px, as JPEG and PNG. Both sides: resnet8
(dp's built-in; the twin in tests/torch/reference.py) at 3x32x32, SGD lr 0.05 momentum 0.9,
batch 32, RandomResizedCrop(32) + flip for training, Resize(37) + CenterCrop(32) for evaluation,
ImageNet's normalisation.

usage: bench_accuracy_folder.py [--seeds N] [--epochs E] [--per-class K]
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from openblas import machine_line, reexec_with_coretype  # noqa: E402

reexec_with_coretype()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image, ImageDraw  # noqa: E402
from torchvision import datasets, transforms  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tests", "torch"))
import reference  # noqa: E402


def draw(rng, c, size):
    """Class c: its shape, in its colour family, on a noisy background."""
    w, h = size
    img = Image.fromarray(rng.integers(0, 120, (h, w, 3)).astype(np.uint8))
    d = ImageDraw.Draw(img)
    colour = tuple(int(v) for v in np.clip(np.array([(c * 70) % 256, (c * 130) % 256, (c * 40 + 100) % 256])
                                           + rng.integers(-30, 30, 3), 0, 255))
    s = int(min(w, h) * rng.uniform(0.4, 0.8))
    x, y = int(rng.integers(0, w - s + 1)), int(rng.integers(0, h - s + 1))
    box = [x, y, x + s, y + s]
    shape = c % 5
    if shape == 0:
        d.ellipse(box, fill=colour)
    elif shape == 1:
        d.rectangle(box, fill=colour)
    elif shape == 2:
        d.rectangle([x, y + s // 3, x + s, y + 2 * s // 3], fill=colour)
    elif shape == 3:
        d.polygon([(x + s // 2, y), (x, y + s), (x + s, y + s)], fill=colour)
    else:
        d.rectangle([x + s // 3, y, x + 2 * s // 3, y + s], fill=colour)
    return img


def make_folder(root, per_class, seed):
    rng = np.random.default_rng(seed)
    for split, count in (("train", per_class), ("val", max(per_class // 4, 5))):
        for c in range(10):
            os.makedirs(os.path.join(root, split, f"c{c}"), exist_ok=True)
            for i in range(count):
                img = draw(rng, c, tuple(int(v) for v in rng.integers(64, 161, 2)))
                img.save(os.path.join(root, split, f"c{c}", f"{i}.{'jpg' if i % 2 else 'png'}"))


def dp_accuracy(root, seed, epochs):
    out = subprocess.run([os.path.join(ROOT, "build", "dp"), "train", "--model", "resnet8", "--data", root,
                          "--devices", "host:2", "--batch", "32", "--lr", "0.05", "--momentum", "0.9", "--augment",
                          "--epochs", str(epochs), "--eval", "--seed", str(seed)],
                         check=True, capture_output=True, text=True)
    line = [x for x in (out.stdout + out.stderr).splitlines() if "test accuracy" in x][-1]
    return float(line.split("test accuracy")[1].split("%")[0])


def torch_accuracy(root, seed, epochs):
    torch.manual_seed(seed)
    norm = transforms.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    train = datasets.ImageFolder(os.path.join(root, "train"), transforms.Compose(
        [transforms.RandomResizedCrop(32), transforms.RandomHorizontalFlip(), transforms.ToTensor(), norm]))
    val = datasets.ImageFolder(os.path.join(root, "val"), transforms.Compose(
        [transforms.Resize(37), transforms.CenterCrop(32), transforms.ToTensor(), norm]))
    model = reference.make_model("resnet8")
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for _ in range(epochs):
        model.train()
        for x, y in torch.utils.data.DataLoader(train, batch_size=32, shuffle=True, num_workers=2):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
    model.eval()
    hits = total = 0
    with torch.no_grad():
        for x, y in torch.utils.data.DataLoader(val, batch_size=64):
            hits += (model(x).argmax(1) == y).sum().item()
            total += len(y)
    return 100.0 * hits / total


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--per-class", type=int, default=80)
    a = p.parse_args()
    print(machine_line(f"; resnet8 on a generated 10-class folder, {a.per_class} training images a class, "
                       f"{a.epochs} epochs"))
    with tempfile.TemporaryDirectory() as tmp:
        make_folder(tmp, a.per_class, 1)
        dp_runs, torch_runs = [], []
        for seed in range(a.seeds):
            dp_runs.append(dp_accuracy(tmp, seed, a.epochs))
            torch_runs.append(torch_accuracy(tmp, seed, a.epochs))
            print(f"seed {seed}: dp {dp_runs[-1]:.1f}%, PyTorch {torch_runs[-1]:.1f}%", flush=True)
    spread = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0  # noqa: E731
    print(f"dp: {statistics.mean(dp_runs):.1f}% ± {spread(dp_runs):.1f}; PyTorch: {statistics.mean(torch_runs):.1f}% "
          f"± {spread(torch_runs):.1f} (mean ± standard deviation over {a.seeds} seeds)")


if __name__ == "__main__":
    main()
