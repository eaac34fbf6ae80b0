"""dp-engine's dropout masks, drawn in numpy exactly as kernels/dropout_mask.hpp draws them, so a
PyTorch model can drop the very elements dp drops (PyTorch's own generator could not).

A step's key comes from (seed, optimizer step) (runtime/random.cpp); a sample's state from (key,
site, the sample's index in the step's whole batch, over its micro-batches); element e is kept when the 24 high
bits of splitmix64's e-th output from that state are at or above round(p·2^24), and then scaled by
float32's 1/(1 − p).
"""
import math

import numpy as np
import torch
import torch.nn as nn

GAMMA = 0x9E3779B97F4A7C15
MASK64 = (1 << 64) - 1
DROPOUT_PURPOSE = 6  # runtime/random.hpp's RandomPurpose::Dropout


def splitmix64(x):
    """On a Python int, or elementwise on a numpy uint64 array (wrapping as C++ does)."""
    if isinstance(x, np.ndarray):
        with np.errstate(over="ignore"):
            x = x + np.uint64(GAMMA)
            x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
            x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
            return x ^ (x >> np.uint64(31))
    x = (x + GAMMA) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def dropout_key(seed, step):
    return splitmix64(splitmix64(splitmix64(seed) ^ DROPOUT_PURPOSE) ^ step)


def factors(key, site, p, first_sample, samples, per_sample):
    """[samples, per_sample] float32: 1/(1 − p) where kept, 0 where dropped."""
    p32 = np.float32(p)
    threshold = math.floor(float(p32) * 16777216.0 + 0.5)  # std::lround of a positive double
    scale = np.float32(1) / (np.float32(1) - p32)
    site_state = splitmix64(key ^ site)
    states = splitmix64(np.array([site_state ^ (first_sample + s) for s in range(samples)], dtype=np.uint64))
    with np.errstate(over="ignore"):
        counters = states[:, None] + np.arange(per_sample, dtype=np.uint64)[None, :] * np.uint64(GAMMA)
    draws = splitmix64(counters) >> np.uint64(40)
    return torch.from_numpy(np.where(draws >= threshold, scale, np.float32(0)).astype(np.float32))


class Pass:
    """The pass being run: set before each replica's forward (its key, its first sample)."""
    key = 0
    first_sample = 0


def apply(x, site, p, whole_samples=False):
    """x ⊙ the factors of `site` over each sample of x (dim 0), in x's dtype. whole_samples:
    stochastic depth (mode "row"), each sample scaled by its element 0's factor."""
    per_sample = 1 if whole_samples else x[0].numel()
    f = factors(Pass.key, site, p, Pass.first_sample, x.size(0), per_sample)
    return x * f.view([x.size(0)] + [1] * (x.dim() - 1) if whole_samples else x.shape).to(x.dtype)


class Dropout(nn.Module):
    """nn.Dropout(p) drawing dp's masks at `site`; whole_samples: torchvision's StochasticDepth(p, "row").
    `site` a list: a module a forward calls more than once (Swin's stochastic depth, after the
    attention and after the MLP), a site for each call in turn, as dp numbers a node each."""

    def __init__(self, p, site, whole_samples=False):
        super().__init__()
        self.p, self.whole_samples = p, whole_samples
        self.sites, self.calls = (list(site) if isinstance(site, (list, tuple)) else [site]), 0

    def forward(self, x):
        site = self.sites[self.calls % len(self.sites)]
        self.calls += 1
        return apply(x, site, self.p, self.whole_samples) if self.training and self.p > 0 else x


def with_dp_masks(model, example):
    """The model with each nn.Dropout and torchvision StochasticDepth replaced by one drawing dp's
    masks, numbered as dp numbers a model file's dropout sites: in the order a forward calls them
    (`example`, one input, finds it; a module the forward never calls, such as EfficientNet's
    stochastic depth in a block without a residual, has no site and stays as it is)."""
    import torchvision
    kinds = (nn.Dropout, torchvision.ops.StochasticDepth)
    paths = {child: path for path, child in model.named_modules() if type(child) in kinds}
    called = []  # every call, in order: the sites
    hooks = [m.register_forward_pre_hook(lambda m, _: called.append(m)) for m in paths]
    was_training = model.training
    model.eval()  # nothing updated: BatchNorm's running statistics stay
    with torch.no_grad():
        model(example)
    model.train(was_training)
    for h in hooks:
        h.remove()
    for child in dict.fromkeys(called):
        sites = [site for site, m in enumerate(called) if m is child]
        if type(child) is nn.Dropout:
            twin = Dropout(child.p, sites)
        else:
            if child.mode != "row":
                raise ValueError("dp runs stochastic depth in mode row only")
            twin = Dropout(child.p, sites, whole_samples=True)
        parent_path, _, name = paths[child].rpartition(".")
        setattr(model.get_submodule(parent_path), name, twin)
    return model
