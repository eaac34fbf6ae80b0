"""What the CLI test scripts share: a tally of named checks (failures printed with their detail,
the closing line "N passed, N failed"; ctest reads the exit code), running dp, and writing small
IDX data sets."""
import gzip
import os
import struct
import subprocess
import sys


class Checks:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name, cond, detail=""):
        if cond:
            self.passed += 1
        else:
            self.failed += 1
            print(f"FAIL {name} {detail}")

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        sys.exit(1 if self.failed else 0)


def run_dp(dp, args, timeout=300, env=None):
    """dp's exit code, stdout and stderr (env: variables set for this run, beside the inherited ones)."""
    p = subprocess.run([dp] + args, capture_output=True, text=True, errors="replace", timeout=timeout,
                       env=dict(os.environ, **env) if env else None)
    return p.returncode, p.stdout, p.stderr


def losses(metrics_path):
    """The per-step losses of a --metrics file (JSON lines; epoch rows left out)."""
    import json
    return [json.loads(line)["loss"] for line in open(metrics_path) if '"step"' in line]


def expect(checks, dp, name, args, code, needle):
    """dp exits with `code` and says `needle` on stderr."""
    rc, out, err = run_dp(dp, args)
    checks.check(name, rc == code and needle in err, f"exit {rc} (want {code}), stderr:\n{err}\n(want {needle!r})")


class Cli(Checks):
    """A CLI test script's tally and the dp binary it tests (the script's first argument)."""

    def __init__(self, timeout=300):
        super().__init__()
        self.dp = os.path.abspath(sys.argv[1])
        self.timeout = timeout

    def run(self, args, timeout=None, env=None):
        """dp's exit code, stdout and stderr."""
        return run_dp(self.dp, args, timeout or self.timeout, env)

    def expect(self, name, args, code, needle):
        """dp exits with `code` and says `needle` on stderr."""
        expect(self, self.dp, name, args, code, needle)


def weights(path):
    """A safetensors file's float32 tensors as flat lists, by name."""
    import json
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    out = {}
    for k, v in header.items():
        if k == "__metadata__" or v["dtype"] != "F32":
            continue
        a, b = v["data_offsets"]
        out[k] = struct.unpack(f"<{(b - a) // 4}f", raw[8 + n + a:8 + n + b])
    return out


def mnist_like_dir(parent, train, test):
    """A directory `data` in parent with n deterministic MNIST-style training and test samples."""
    data = os.path.join(parent, "data")
    os.makedirs(data)
    write_mnist_like(data, "train", train)
    write_mnist_like(data, "t10k", test)
    return data


def write_idx(d, prefix, images, labels, count=None, magic=0x803, rows=28, level=9):
    """A gzip IDX pair in d: {prefix}-images-idx3-ubyte.gz and {prefix}-labels-idx1-ubyte.gz
    (level: gzip's compression level; 1 for a whole data set written in a hurry)."""
    n = len(labels) if count is None else count
    with gzip.open(os.path.join(d, f"{prefix}-images-idx3-ubyte.gz"), "wb", compresslevel=level) as f:
        f.write(struct.pack(">IIII", magic, n, rows, 28) + images)
    with gzip.open(os.path.join(d, f"{prefix}-labels-idx1-ubyte.gz"), "wb", compresslevel=level) as f:
        f.write(struct.pack(">II", 0x801, len(labels)) + bytes(labels))


def write_mnist_like(d, prefix, n):
    """n deterministic 28x28 samples with labels cycling through the ten classes."""
    write_idx(d, prefix, bytes((i * 7 + i // 784) % 256 for i in range(n * 784)), [(i * 3) % 10 for i in range(n)])
