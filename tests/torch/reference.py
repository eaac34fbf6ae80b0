"""PyTorch reference of dp-engine's faithful DataParallel step, on the CPU.

nn.DataParallel needs GPUs, so this emulates exactly what it computes: each chunk runs through a
replica (replica 0 is the master module, the others deep copies), BatchNorm normalises with each
chunk's own statistics, only replica 0's running-stat update survives, and the gradients of the
other replicas are added into the master's, as DataParallel's reduce-add does.
"""
import math
import contextlib
import copy
import gzip
import struct
import time

import torch
import torch.nn as nn

import hash_dropout


def cifar_resnet(blocks, widths, num_classes=10):
    """torchvision's ResNet with the CIFAR stem (conv1 3x3 stride 1, maxpool = Identity), built from
    torchvision's own BasicBlock so that names, shapes and initialisation are torchvision's."""
    import torchvision
    from torchvision.models.resnet import BasicBlock, conv1x1

    if list(blocks) == [2, 2, 2, 2] and list(widths) == [64, 128, 256, 512]:
        model = torchvision.models.resnet18(num_classes=num_classes)
        model.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
        model.maxpool = nn.Identity()
        return model

    class CifarResNet(nn.Module):  # torchvision's ResNet.forward, with any widths
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(widths[0])
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.Identity()
            inplanes = widths[0]
            for i, (n, w) in enumerate(zip(blocks, widths)):
                layers = []
                for b in range(n):
                    stride = 2 if i > 0 and b == 0 else 1
                    down = None
                    if stride != 1 or inplanes != w:
                        down = nn.Sequential(conv1x1(inplanes, w, stride), nn.BatchNorm2d(w))
                    layers.append(BasicBlock(inplanes, w, stride, down))
                    inplanes = w
                setattr(self, f"layer{i + 1}", nn.Sequential(*layers))
            self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
            self.fc = nn.Linear(inplanes, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return CifarResNet()


class CausalSelfAttention(nn.Module):
    """nanoGPT's: q, k, v from c_attn in that order, H heads, scores / sqrt(C/H), causal softmax;
    dropout on the probabilities (site `site`) and after c_proj (site + 1), with dp's masks."""

    def __init__(self, dim, heads, dropout=0.0, site=0):
        super().__init__()
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.resid_dropout = hash_dropout.Dropout(dropout, site + 1)
        self.heads, self.dropout, self.site = heads, dropout, site

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(torch.tril(torch.ones(T, T, dtype=torch.bool, device=x.device)) == 0, float("-inf"))
        att = torch.softmax(att, dim=-1)
        if self.training and self.dropout > 0:
            att = hash_dropout.apply(att, self.site, self.dropout)
        y = att @ v
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class MLP(nn.Module):
    def __init__(self, dim, dropout=0.0, site=0):
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim)
        self.gelu = nn.GELU()  # exact (erf)
        self.c_proj = nn.Linear(4 * dim, dim)
        self.dropout = hash_dropout.Dropout(dropout, site)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    """Block i's dropout sites are 3i+1 (attention probabilities), 3i+2 and 3i+3, as dp numbers them."""

    def __init__(self, dim, heads, dropout=0.0, first_site=1):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, dropout, first_site)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = MLP(dim, dropout, first_site + 2)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's GPT with its state-dict names, lm_head untied; nanoGPT's init. Its dropout draws
    dp's masks (hash_dropout): set hash_dropout.Pass before each replica's forward."""

    def __init__(self, vocab, context, layers, heads, dim, dropout=0.0):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, dim), wpe=nn.Embedding(context, dim), drop=hash_dropout.Dropout(dropout, 0),
            h=nn.ModuleList([Block(dim, heads, dropout, 3 * i + 1) for i in range(layers)]), ln_f=nn.LayerNorm(dim)))
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            elif name.endswith("weight") and p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias") and "ln_" not in name:
                nn.init.zeros_(p)

    def forward(self, idx):
        T = idx.size(1)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T, device=idx.device)))
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))


# dp's GPT at its defaults on its generated byte corpus (vocabulary 256).
GPT_DEFAULTS = dict(vocab=256, context=128, layers=4, heads=4, dim=256)


def matrix_decay_groups(model, weight_decay):
    """nanoGPT's configure_optimizers, as dp's --weight-decay-params matrices (the GPT's default):
    weight decay on the tensors of 2+ dimensions only."""
    return [{"params": [p for p in model.parameters() if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in model.parameters() if p.dim() < 2], "weight_decay": 0.0}]


def make_model(name, gpt=None):
    if name == "gpt":
        return GPT(**gpt)
    if name == "resnet18":
        return cifar_resnet([2, 2, 2, 2], [64, 128, 256, 512])
    if name == "resnet8":
        return cifar_resnet([1, 1, 1, 1], [16, 32, 64, 128])
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(),
                             nn.Linear(256, 10))
    if name == "convnet":
        return nn.Sequential(nn.Conv2d(1, 16, 5, 1, 2), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2, 2),
                             nn.Conv2d(16, 32, 5, 1, 2), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2, 2),
                             nn.Flatten(), nn.Linear(1568, 10))
    raise ValueError(name)


def chunk_sizes(split, batch, n):
    """dp-engine's --split rules (PyTorch chunk() for even)."""
    if split == "even":
        c = -(-batch // n)
        out, left = [], batch
        for _ in range(n):
            take = min(c, left)
            out.append(take)
            left -= take
        return out
    mode, body = split.split(":")
    vals = [float(v) for v in body.split(",")]
    if mode == "gpu0":
        k = min(int(vals[0]), batch)
        rest = batch - k
        return [k] + [rest // (n - 1) + (1 if i < rest % (n - 1) else 0) for i in range(n - 1)]
    weights = vals + [0.0] * (n - len(vals))
    total = sum(weights)
    exact = [w / total * batch for w in weights]
    out = [int(e) for e in exact]
    order = sorted(range(n), key=lambda i: -(exact[i] - out[i]))  # stable: ties to lower index
    for k in range(batch - sum(out)):
        out[order[k % n]] += 1
    return out


def write_idx(images, labels, img_path, lbl_path):
    n, r, c = images.shape
    with gzip.open(img_path, "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, r, c) + images.numpy().astype("uint8").tobytes())
    with gzip.open(lbl_path, "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + labels.numpy().astype("uint8").tobytes())


def random_mnist_dir(path, n, test_n, generator):
    """n random 28x28 images (skewed dark, like digits) with labels in path as MNIST's four gzip
    IDX files, the first test_n doubling as the test set; returns (images, labels)."""
    import os
    images = (torch.rand(n, 28, 28, generator=generator) ** 3 * 255).to(torch.uint8)
    labels = torch.randint(0, 10, (n,), generator=generator)
    os.makedirs(path)
    write_idx(images, labels, os.path.join(path, "train-images-idx3-ubyte.gz"),
              os.path.join(path, "train-labels-idx1-ubyte.gz"))
    write_idx(images[:test_n], labels[:test_n], os.path.join(path, "t10k-images-idx3-ubyte.gz"),
              os.path.join(path, "t10k-labels-idx1-ubyte.gz"))
    return images, labels


def normalise(images_u8):
    """MNIST: [N, 28, 28] -> [N, 1, 28, 28]; CIFAR-10: [N, 3, 32, 32] per channel."""
    x = images_u8.float() / 255.0
    if x.dim() == 3:
        return ((x - 0.1307) / 0.3081).unsqueeze(1)
    mean = torch.tensor([0.4914, 0.4822, 0.4465]).view(1, 3, 1, 1)
    std = torch.tensor([0.2470, 0.2435, 0.2616]).view(1, 3, 1, 1)
    return (x - mean) / std


def write_cifar(images, labels, path):
    """CIFAR-10 binary records: a label byte, then the R, G, B planes."""
    with open(path, "wb") as f:
        for img, lbl in zip(images, labels):
            f.write(bytes([int(lbl)]) + img.numpy().astype("uint8").tobytes())


def dp_step(model, opt, x, y, sizes, before_update=None, autocast=None, on_logits=None):
    """One faithful DataParallel step; returns the gathered-batch loss. before_update runs on the
    reduced gradients (clipping). autocast: a dtype to run the replicas' forward and the loss
    under CPU autocast (torch.bfloat16); on_logits sees the gathered logits."""
    opt.zero_grad()
    loss = dp_forward_backward(model, x, y, sizes, autocast=autocast, on_logits=on_logits)
    if before_update:
        before_update()
    opt.step()
    return loss


def dp_accumulated_step(model, opt, micro, sizes_of, before_update=None, label_smoothing=0.0, dropout_key=0):
    """One optimizer step over micro-batches [(x, y), ...] with gradient accumulation: each through
    DataParallel's forward and backward (chunks sizes_of(len(y))), its loss weighted by its share of
    every cross-entropy row, the gradients summed in .grad; then one update. Returns the loss over
    all of them. label_smoothing: CrossEntropyLoss's. dropout_key: the step's (each sample's mask by
    its index in the step's whole batch, over the micro-batches)."""
    opt.zero_grad()
    rows = sum(y.numel() for _, y in micro)
    firsts = [sum(len(y) for _, y in micro[:k]) for k in range(len(micro))]
    loss = sum(dp_forward_backward(model, x, y, sizes_of(len(y)), weight=y.numel() / rows,
                                   label_smoothing=label_smoothing, dropout_key=dropout_key, first_sample=first)
               for (x, y), first in zip(micro, firsts))
    if before_update:
        before_update()
    opt.step()
    return loss


def dp_forward_backward(model, x, y, sizes, weight=1.0, autocast=None, on_logits=None, label_smoothing=0.0,
                        dropout_key=0, first_sample=0):
    """DataParallel's forward, loss (times weight) and backward, the replicas' gradients added into
    the master's .grad; returns the weighted loss. dropout_key: the step's (dp's masks, by each
    sample's index in the step's whole batch, x's first being first_sample)."""
    outs, replicas, start = [], [], 0
    context = torch.autocast("cpu", dtype=autocast) if autocast is not None else contextlib.nullcontext()
    with context:
        for r, size in enumerate(sizes):
            if size == 0:
                continue
            # Replica 0 is the master itself (its running-stat update survives); the others are
            # copies whose buffer updates are thrown away, as DataParallel's replicas are.
            replica = model if r == 0 else copy.deepcopy(model)
            replicas.append(replica)
            hash_dropout.Pass.key, hash_dropout.Pass.first_sample = dropout_key, first_sample + start
            outs.append(replica(x[start:start + size]))
            start += size
        logits = torch.cat(outs)
        # A row per sample, or per token for a language model ([B, T, V] logits, [B, T] targets).
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1),
                                           label_smoothing=label_smoothing) * weight
    if on_logits:
        on_logits(logits.detach())
    loss.backward()
    with torch.no_grad():  # reduce-add: the master gradient is the sum over replicas
        for replica in replicas:
            if replica is model:
                continue
            for p, q in zip(model.parameters(), replica.parameters()):
                p.grad = q.grad.clone() if p.grad is None else p.grad + q.grad
    return loss.item()


def lr_at(s, total, lr, schedule="constant", warmup=0, min_lr=0.0):
    """dp-engine's --lr-schedule for step index s (0 for the first) of `total` steps."""
    import math
    if s < warmup:
        return lr * (s + 1) / warmup
    if schedule == "cosine":
        return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * (s - warmup) / max(1, total - warmup)))
    if schedule.startswith("step:"):
        n, g = schedule[5:].split(",")
        return lr * float(g) ** ((s - warmup) // int(n))
    return lr


def timed_lm_steps(model, opt, vocab, context, batch, steps, warmup=3):
    """PyTorch's side of the GPT benchmarks: `steps` training steps of a language model on
    consecutive windows of random tokens; samples/s over the steps after the first `warmup`."""
    data = torch.randint(0, vocab, (batch * steps * context + 1,))
    model.train()
    for s in range(steps):
        if s == warmup:
            t0 = time.perf_counter()
        starts = torch.arange(batch) * context + s * batch * context
        x = torch.stack([data[a:a + context] for a in starts])
        y = torch.stack([data[a + 1:a + context + 1] for a in starts])
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x).view(-1, vocab), y.view(-1))
        loss.backward()
        opt.step()
    return batch * (steps - warmup) / (time.perf_counter() - t0)
