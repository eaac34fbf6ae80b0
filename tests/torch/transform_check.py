"""dp's image decoding against PIL (Image.open(...).convert("RGB"/"L")) and its transforms against
torchvision's on tensors (F.resized_crop and F.resize + F.center_crop, bilinear, antialias=True) for
the same boxes: images of many sizes (1x1 up, portrait and landscape), PNG (RGB, gray, palette,
RGBA, 16-bit) and JPEG. Writes the cases and PIL's and torchvision's outputs, and runs dp_tests'
comparison case with them: every decoded pixel equal, every transformed pixel within one level.

usage: transform_check.py DP_TESTS_BINARY   (exit 77 = skipped: no torchvision)
"""
import os
import random
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torchvision.transforms.functional as F
    from PIL import Image
except ImportError:
    print("SKIP: PyTorch, torchvision or PIL is not installed (apt-get install python3-torchvision)")
    sys.exit(77)


def smooth_and_noisy(rng, h, w):
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([(x * 7 + y * 3) % 256, (x * 2 + y * 11) % 256, ((x - y) * 5) % 256], axis=-1)
    noise = rng.integers(0, 256, (h, w, 3))
    mix = np.where(rng.random((h, w, 1)) < 0.3, noise, base)
    return mix.astype(np.uint8)


def main():
    rng = np.random.default_rng(7)
    pick = random.Random(7)
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        def out(name, array):
            path = os.path.join(tmp, name)
            np.ascontiguousarray(array, dtype=np.uint8).tofile(path)
            return path

        sizes = [(1, 1), (2, 3), (17, 5), (64, 48), (48, 64), (233, 157), (300, 400), (128, 128)]
        for k, (h, w) in enumerate(sizes):
            rgb = smooth_and_noisy(rng, h, w)
            files = []
            for fmt in ("png", "jpg", "gray.png", "palette.png", "rgba.png", "16.png"):
                path = os.path.join(tmp, f"img{k}.{fmt}")
                if fmt == "png":
                    Image.fromarray(rgb).save(path)
                elif fmt == "jpg":
                    Image.fromarray(rgb).save(path, quality=90)
                elif fmt == "gray.png":
                    Image.fromarray(rgb[:, :, 0]).save(path)
                elif fmt == "palette.png":
                    Image.fromarray(rgb).convert("P", palette=Image.ADAPTIVE, colors=64).save(path)
                elif fmt == "rgba.png":
                    alpha = rng.integers(0, 256, (h, w, 1)).astype(np.uint8)
                    Image.fromarray(np.concatenate([rgb, alpha], axis=2), "RGBA").save(path)
                else:  # 16-bit RGB: PIL reads the high byte of each sample
                    import struct
                    import zlib
                    raw = b"".join(b"\x00" + (rgb[r].astype(">u2") * 257 + rng.integers(0, 256, (w, 3)).astype(">u2"))
                                   .astype(">u2").tobytes() for r in range(h))
                    def chunk(tag, data):
                        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))
                    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0)) +
                           chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
                    open(path, "wb").write(png)
                files.append(path)
            for path in files:
                for channels, mode in ((3, "RGB"), (1, "L")):
                    decoded = np.array(Image.open(path).convert(mode))
                    planes = decoded.reshape(decoded.shape[0], decoded.shape[1], channels).transpose(2, 0, 1)
                    lines.append(f"decode {path} {channels} {out(f'd{len(lines)}.bin', planes)}")
            # The transforms on the RGB PNG's pixels (exact input), for boxes and sizes like training's.
            path = files[0]
            t = torch.from_numpy(rgb).permute(2, 0, 1).contiguous()
            for _ in range(6):
                bh, bw = pick.randint(1, h), pick.randint(1, w)
                top, left = pick.randint(0, h - bh), pick.randint(0, w - bw)
                oh, ow = pick.choice([(224, 224), (32, 32), (7, 13), (h, w), (2 * h + 1, w // 2 + 1)])
                got = F.resized_crop(t, top, left, bh, bw, [oh, ow], antialias=True)
                lines.append(f"crop {path} 3 {top} {left} {bh} {bw} {oh} {ow} {out(f'c{len(lines)}.bin', got.numpy())}")
            for short, (oh, ow) in ((256, (224, 224)), (36, (32, 32)), (max(1, min(h, w) // 2), (5, 9))):
                got = F.center_crop(F.resize(t, short, antialias=True), [oh, ow])
                lines.append(f"eval {path} 3 {short} {oh} {ow} {out(f'e{len(lines)}.bin', got.numpy())}")
        manifest = os.path.join(tmp, "manifest.txt")
        open(manifest, "w").write("\n".join(lines) + "\n")
        p = subprocess.run([os.path.abspath(sys.argv[1]), "-tc=images and transforms match PIL and torchvision*", "-s"],
                           env=dict(os.environ, DP_TRANSFORM_VECTORS=manifest), capture_output=True, text=True)
        print(p.stdout[-3000:], p.stderr[-2000:])
        ok = p.returncode == 0 and "1 passed" in p.stdout
        print(f"{len(lines)} cases: {'as PIL and torchvision' if ok else 'MISMATCH'}")
        sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
