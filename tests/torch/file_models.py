"""PyTorch models that dp runs from model files (tools/export_model.py), for the cross-checks:
torchvision's own classifiers and a hand-written module with the graph's joins."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Joins(nn.Module):
    """A residual add, a channel concatenation of two branches, a grouped and a dilated convolution,
    functional relu and flatten, and a module path two levels deep: what a graph (not a chain) of
    modules needs."""

    def __init__(self, classes=10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8))
        self.left = nn.Conv2d(8, 8, 3, 1, 2, dilation=2, groups=2)
        self.right = nn.Sequential(nn.Conv2d(8, 4, 1), nn.ReLU(), nn.Conv2d(4, 8, 3, 2, 1))
        self.down = nn.MaxPool2d(2, 2)
        self.head = nn.ModuleDict({"norm": nn.BatchNorm2d(16), "fc": nn.Linear(16 * 16 * 16, classes)})

    def forward(self, x):
        x = F.relu(self.stem(x))
        y = x + self.left(x)                      # residual add: x read twice
        z = torch.cat([self.down(y), self.right(x)], dim=1)  # channel cat of two branches
        z = F.relu(self.head["norm"](z))
        return self.head["fc"](torch.flatten(z, 1))


class Gates(nn.Module):
    """Squeeze-and-excitation (x.mean over the plane, a gate per channel multiplied in) and a
    product of two branches of one shape."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, 2, 1)
        self.squeeze = nn.Conv2d(8, 4, 1)
        self.excite = nn.Conv2d(4, 8, 1)
        self.other = nn.Conv2d(8, 8, 3, 1, 1)
        self.fc = nn.Linear(8, classes)

    def forward(self, x):
        x = F.relu(self.conv(x))
        s = x.mean((2, 3), keepdim=True)
        x = x * torch.sigmoid(self.excite(F.relu(self.squeeze(s))))   # [N, 8, 16, 16] * [N, 8, 1, 1]
        x = x * torch.tanh(self.other(x))                                # one shape
        return self.fc(torch.mean(x, dim=[2, 3]))


class Norms(nn.Module):
    """BatchNorm2d without affine, and without running statistics."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, 2, 1)
        self.plain = nn.BatchNorm2d(6, affine=False)
        self.conv2 = nn.Conv2d(6, 6, 3, 2, 1)
        self.batch_only = nn.BatchNorm2d(6, track_running_stats=False, momentum=0.3)
        self.fc = nn.Linear(6 * 8 * 8, classes)

    def forward(self, x):
        x = F.relu(self.plain(self.conv(x)))
        x = F.relu(self.batch_only(self.conv2(x)))
        return self.fc(torch.flatten(x, 1))


class Pools(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.conv = nn.Conv2d(3, 6, 3, 1, 1)
        self.pool = nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False)
        self.conv2 = nn.Conv2d(8, 6, 3, 1, 1)
        self.adapt = nn.AdaptiveAvgPool2d((3, 2))
        self.fc = nn.Linear(36, classes)

    def forward(self, x):
        x = self.pool(F.relu(self.conv(x)))                 # 32 -> 16
        x = F.pad(x, (0, 0, 0, 0, 1, 1))                    # 6 -> 8 channels: a zero plane either side
        x = F.pad(F.relu(self.conv2(x)), (1, 0, 2, 1))      # 16x16 -> 19x17: zero rows and a column
        x = F.avg_pool2d(x, 2)                              # 19x17 -> 9x8
        x = F.max_pool2d(x, 3, stride=1, padding=1)         # 9x8 -> 9x8, functional
        return self.fc(torch.flatten(self.adapt(x), 1))    # 9x8 -> 3x2


# Token models: nanoGPT's GPT as its model.py writes it (tests/torch/nanogpt_model.py), tied
# (lm_head.weight is transformer.wte.weight) and with its causal-mask buffers; the vocabulary is
# crosscheck.py's token files'.
TOKEN_MODELS = {
    "nanogpt_tied": dict(block_size=16, vocab_size=128, n_layer=2, n_head=2, n_embd=32),
    "nanogpt_nobias": dict(block_size=16, vocab_size=128, n_layer=2, n_head=2, n_embd=32, bias=False),
}


def token_context(name):
    """A token model's sequence length; None for an image model."""
    return TOKEN_MODELS[name]["block_size"] if name in TOKEN_MODELS else None


def make(name):
    import torchvision
    if name in TOKEN_MODELS:
        import nanogpt_model
        return nanogpt_model.make(**TOKEN_MODELS[name])
    if name == "joins":
        return Joins()
    if name == "tv_resnet18":
        return torchvision.models.resnet18(num_classes=10)
    if name == "tv_resnet50":
        return torchvision.models.resnet50(num_classes=10)
    if name == "tv_squeezenet1_1":  # its classifier's Dropout(0.5) at p = 0: PyTorch's masks are not dp's
        model = torchvision.models.squeezenet1_1(num_classes=10)
        model.classifier[0].p = 0.0
        return model
    if name == "tv_mobilenet_v2":  # depthwise convolutions, ReLU6; its Dropout(0.2) at p = 0
        model = torchvision.models.mobilenet_v2(num_classes=10)
        model.classifier[0].p = 0.0
        return model
    if name == "tv_mobilenet_v3_small":  # Hardswish, Hardsigmoid in squeeze-and-excitation; Dropout(0.2) at p = 0
        model = torchvision.models.mobilenet_v3_small(num_classes=10)
        model.classifier[2].p = 0.0
        return model
    if name == "tv_efficientnet_b0":  # SiLU, squeeze-and-excitation, stochastic depth and Dropout(0.2) in training
        return torchvision.models.efficientnet_b0(num_classes=10)
    if name == "tv_inception_v3":  # 1x7 and 7x1 convolutions, F.max_pool2d; no auxiliary head; Dropout(0.5)
        return torchvision.models.inception_v3(num_classes=10, aux_logits=False, init_weights=False)
    if name == "tv_densenet121":  # dense blocks' channel cat, transitions' average pooling
        return torchvision.models.densenet121(num_classes=10)
    if name == "tiny_activations":
        return nn.Sequential(nn.Conv2d(3, 6, 3, 2, 1), nn.ReLU6(), nn.Conv2d(6, 6, 3, 2, 1), nn.SiLU(),
                             nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 12),
                             nn.Sigmoid(), nn.Linear(12, 10))
    if name == "norms":
        return Norms()
    if name == "gates":
        return Gates()
    if name == "pools":  # AvgPool2d (padding, ceil_mode, count_include_pad False), F.pad, F.avg_pool2d, adaptive 3x2
        return Pools()
    if name == "tv_resnext50_32x4d":  # grouped 3x3 convolutions (32 groups) in ResNet's bottlenecks
        return torchvision.models.resnext50_32x4d(num_classes=10)
    if name == "tv_alexnet":  # large kernels and strides, overlapping max-pools; its Dropouts at p = 0
        return torchvision.models.alexnet(num_classes=10, dropout=0.0)
    if name == "tv_efficientnet_v2_s":  # fused MBConv blocks, SiLU, stochastic depth (dp's draws) and Dropout
        return torchvision.models.efficientnet_v2_s(num_classes=10)
    if name == "tv_wide_resnet50_2":  # ResNet-50's bottlenecks twice as wide
        return torchvision.models.wide_resnet50_2(num_classes=10)
    if name == "tv_vgg11_bn":  # VGG with BatchNorm; its classifier's Dropouts at p = 0
        return torchvision.models.vgg11_bn(num_classes=10, dropout=0.0)
    if name == "tv_mnasnet0_5":  # inverted residuals at width 0.5; its Dropout(0.2) at p = 0
        return torchvision.models.mnasnet0_5(num_classes=10, dropout=0.0)
    if name == "tv_regnet_x_400mf":  # grouped bottlenecks
        return torchvision.models.regnet_x_400mf(num_classes=10)
    if name == "tv_googlenet":  # Inception blocks' four-branch cat, ceil_mode pools; no auxiliary heads
        return torchvision.models.googlenet(num_classes=10, aux_logits=False, init_weights=False, dropout=0.0)
    if name == "tv_shufflenet_v2_x0_5":  # channel shuffle: view, transpose, view; chunk into two halves
        return torchvision.models.shufflenet_v2_x0_5(num_classes=10)
    if name == "tv_vit_b_16":  # ViT-B/16 itself (at 3x224x224: by hand, not in the suite's time)
        model = torchvision.models.vit_b_16(num_classes=10)
        with torch.no_grad():  # its head starts at zero: no gradient would reach the body in step one
            nn.init.normal_(model.heads.head.weight, std=0.02)
        return model
    if name == "tv_convnext_tiny":  # ConvNeXt-T itself (at 3x224x224: by hand); stochastic depth off
        return torchvision.models.convnext_tiny(num_classes=10, stochastic_depth_prob=0.0)
    if name == "tv_swin_t":  # Swin-T itself (at 3x224x224: by hand), stochastic depth drawing dp's masks
        return torchvision.models.swin_t(num_classes=10)
    if name == "tv_swin_v2_t":  # Swin V2-T itself (at 3x256x256: by hand), stochastic depth drawing dp's masks
        return torchvision.models.swin_v2_t(num_classes=10)
    if name == "tv_maxvit_t":  # MaxViT-T itself (at 3x224x224: by hand), stochastic depth drawing dp's masks
        return torchvision.models.maxvit_t(num_classes=10)
    if name == "vit_tiny":  # torchvision's ViT at 3x32x32: class token, position embedding, MultiheadAttention
        from torchvision.models.vision_transformer import VisionTransformer
        model = VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
                                  num_classes=10)
        with torch.no_grad():  # its head starts at zero: no gradient would reach the body in step one
            nn.init.normal_(model.heads.head.weight, std=0.1)
            nn.init.normal_(model.class_token, std=0.1)
        return model
    if name == "convnext_small":  # torchvision's ConvNeXt, two stages: permutes, channels-last LayerNorm,
        # LayerNorm2d (F.layer_norm of its own weight), layer scale (a parameter used directly)
        from torchvision.models.convnext import CNBlockConfig, ConvNeXt
        return ConvNeXt([CNBlockConfig(16, 32, 2), CNBlockConfig(32, None, 1)], stochastic_depth_prob=0.0,
                        layer_scale=0.5, num_classes=10)
    if name == "swin_small":  # torchvision's Swin at 3x32x32: 8x8 then 4x4 tokens in windows of 3 (padded to 9x9
        # and 6x6, shifted by 1: the mask), relative position bias, patch merging, stochastic depth
        from torchvision.models.swin_transformer import SwinTransformer
        return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=[3, 3],
                               stochastic_depth_prob=0.2, num_classes=10)
    if name == "swin_v2_small":  # torchvision's Swin V2 at 3x32x32: cosine attention (a logit scale per head),
        # the bias from cpb_mlp, post-norm blocks, PatchMergingV2, windows of 3 (padded, shifted by 1: the mask)
        from torchvision.models.swin_transformer import PatchMergingV2, SwinTransformer, SwinTransformerBlockV2
        return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 4], window_size=[3, 3],
                               stochastic_depth_prob=0.2, num_classes=10, block=SwinTransformerBlockV2,
                               downsample_layer=PatchMergingV2)
    if name == "maxvit_small":  # torchvision's MaxViT at 3x32x32: MBConv, window and grid partitions of 2x2,
        # relative positional attention, BatchNorm at momentum 0.99
        from torchvision.models.maxvit import MaxVit
        return MaxVit(input_size=(32, 32), stem_channels=8, partition_size=2, block_channels=[16, 32],
                      block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.2, num_classes=10)
    if name == "resnet8_twin":
        import reference
        return reference.make_model("resnet8")
    raise ValueError(name)
