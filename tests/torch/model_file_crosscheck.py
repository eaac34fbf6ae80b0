"""Model files against PyTorch: each model exported with tools/export_model.py, trained by dp from
the module's own weights (--init) and by the PyTorch reference of the DataParallel step
(crosscheck.py's), per-step losses, gradient norms and every weight and buffer compared; the saved
weights load into the original module with strict=True.

usage: model_file_crosscheck.py DP_BINARY [--heavy]   (exit 77 = skipped: no torch or torchvision)
  --heavy  instead, the cases too heavy for the suite's time: ViT-B/16, ConvNeXt-T, Swin-T and
           MaxViT-T at their native 3x224x224, one AdamW update each; VGG-11 (129M parameters)
"""
import sys

try:
    import torch  # noqa: F401
    import torchvision  # noqa: F401
except ImportError:
    print("SKIP: PyTorch or torchvision is not installed (apt-get install python3-torch python3-torchvision)")
    sys.exit(77)

import crosscheck

SGD = ["--lr", "0.02", "--momentum", "0.9"]
ADAMW = ["--optimizer", "adamw", "--lr", "0.001", "--momentum", "0"]
CASES = [
    # model, devices, batch, split, steps, flags (CIFAR-shaped 3x32x32 samples)
    ("file:resnet8_twin", 3, 11, "chunks:5,4,2", 3, SGD + ["--weight-decay", "0.0005"]),
    ("file:joins", 3, 11, "chunks:5,4,2", 3, SGD),
    ("file:joins", 4, 12, "even", 3, ADAMW),
    # torchvision's stem takes 32x32 down to 1x1 at layer4, where BatchNorm normalises each
    # chunk's few values: a second step there amplifies a rounding at the start to 0.4% of the
    # loss and a few percent of the weights (PyTorch's own float32 runs, from starts one rounding
    # apart), so no comparison after it could tell dp's arithmetic from the BLAS kernels'. One
    # update, with chunks of 8 or more, is well posed: its loss and every weight and buffer after it.
    ("file:tv_resnet18", 3, 27, "chunks:8,10,9", 1, SGD),
    ("file:tv_resnet18", 4, 32, "even", 1, ADAMW),
    # At 3x64x64 from a float32 tensor file (model@64: the samples PyTorch gets, exactly). Three
    # steps are not well posed there either (ResNet-50: PyTorch's float32 runs from starts one
    # rounding apart end 0.5 apart in some weight), so one update, with chunks of 8 or more.
    ("file:tv_resnet50@64", 3, 27, "chunks:8,10,9", 1, ["--lr", "0.002", "--momentum", "0.9"]),
    ("file:tv_densenet121@64", 3, 27, "chunks:10,8,9", 1, ["--lr", "0.002", "--momentum", "0.9"]),
    # SqueezeNet 1.1: Fire modules' channel cat, ceil_mode max-pooling, a convolution as classifier.
    ("file:tv_squeezenet1_1", 3, 14, "chunks:6,5,3", 3, SGD),
    ("file:tv_squeezenet1_1", 4, 16, "even", 3, ADAMW),
    # MobileNetV2: depthwise (groups = channels) and pointwise convolutions, ReLU6; one update, as above.
    ("file:tv_mobilenet_v2@64", 3, 27, "chunks:8,10,9", 1, ["--lr", "0.002", "--momentum", "0.9"]),
    ("file:tv_mobilenet_v2", 4, 32, "even", 1, ["--optimizer", "adamw", "--lr", "0.0003", "--momentum", "0"]),
    # MobileNetV3: Hardswish, and Hardsigmoid gating its squeeze-and-excitation blocks.
    ("file:tv_mobilenet_v3_small@64", 3, 27, "chunks:8,10,9", 1, ["--lr", "0.002", "--momentum", "0.9"]),
    # EfficientNet-B0 in training: SiLU, squeeze-and-excitation gates, stochastic depth (a draw a
    # sample, up to p = 0.2) and the classifier's Dropout(0.2), PyTorch's drawing dp's masks; one update.
    ("file:tv_efficientnet_b0@64", 3, 27, "chunks:8,10,9", 1, ["--lr", "0.002", "--momentum", "0.9"]),
    # Inception v3 without its auxiliary head, at 3x80x80 (it takes 75 and more): convolutions of
    # 1x7 and 7x1 (padding (0, 3) and (3, 0)), F.max_pool2d, F.avg_pool2d, Dropout(0.5); one update.
    ("file:tv_inception_v3@80", 3, 27, "chunks:8,10,9", 1, ["--lr", "0.002", "--momentum", "0.9"]),
    # AvgPool2d with padding, ceil_mode and count_include_pad False; F.pad with zeros (channels either
    # side, rows and a column); F.avg_pool2d of an odd size; F.max_pool2d; AdaptiveAvgPool2d((3, 2)).
    ("file:pools", 3, 13, "chunks:6,4,3", 3, ["--lr", "0.1", "--momentum", "0.9"]),
    # Squeeze-and-excitation: a mean over each plane, a per-channel gate multiplied in; a product.
    ("file:gates", 3, 13, "chunks:6,4,3", 3, ["--lr", "0.1", "--momentum", "0.9"]),
    ("file:gates", 2, 12, "even", 3, ADAMW),
    # BatchNorm2d without affine, and without running statistics.
    ("file:norms", 3, 13, "chunks:6,4,3", 3, ["--lr", "0.05", "--momentum", "0.9"]),
    # ResNeXt (grouped 3x3 convolutions, 32 groups) and AlexNet (11x11 stride 4, overlapping max-pools,
    # its classifier's Dropouts at p = 0) at 3x64x64 from tensor files; one update. (ResNeXt at 32x32
    # is not well posed: PyTorch's own spread after one update is 0.07 of a weight.)
    ("file:tv_resnext50_32x4d@64", 3, 27, "chunks:8,10,9", 1, ["--lr", "0.002", "--momentum", "0.9"]),
    ("file:tv_alexnet@64", 3, 27, "chunks:8,10,9", 1, ["--lr", "0.002", "--momentum", "0.9"]),
    # Wide ResNet-50 and EfficientNetV2-S (fused MBConv, stochastic depth drawing dp's masks) at
    # 3x64x64; one update.
    ("file:tv_wide_resnet50_2@64", 3, 27, "chunks:8,10,9", 1, ["--lr", "0.002", "--momentum", "0.9"]),
    ("file:tv_efficientnet_v2_s@64", 3, 27, "chunks:8,10,9", 1, ["--lr", "0.002", "--momentum", "0.9"]),
    # MNASNet (inverted residuals, width 0.5) and RegNetX (grouped bottlenecks) at 3x64x64: one
    # update. (RegNetX at 3x32x32 is not well posed even so: PyTorch's own float32 spread after one
    # update is 0.14 of a weight.)
    ("file:tv_mnasnet0_5@64", 3, 27, "chunks:8,10,9", 1, ["--lr", "0.002", "--momentum", "0.9"]),
    ("file:tv_regnet_x_400mf@64", 3, 27, "chunks:8,10,9", 1, ["--lr", "0.002", "--momentum", "0.9"]),
    # GoogLeNet: Inception blocks' four-branch cat, ceil_mode pooling; no auxiliary heads; one update.
    ("file:tv_googlenet", 3, 27, "chunks:8,10,9", 1, SGD),
    # ShuffleNetV2: its channel shuffle (a view, transpose(1, 2), a view) and x.chunk(2, dim=1); one
    # update, as ResNet-18's (its stem takes 32x32 down to 1x1 too).
    ("file:tv_shufflenet_v2_x0_5", 3, 27, "chunks:8,10,9", 1, SGD),
    # torchvision's VisionTransformer at 3x32x32 (2 layers, width 32): its class token and position
    # embedding (parameters used directly), expand, cat, MultiheadAttention, x[:, 0].
    ("file:vit_tiny", 3, 11, "chunks:5,4,2", 3, ADAMW),
    # torchvision's ConvNeXt (two stages): permutes, LayerNorm over channels last, LayerNorm2d
    # (F.layer_norm of its own weight and bias), a layer scale multiplied in (a parameter used directly).
    ("file:convnext_small", 3, 11, "chunks:5,4,2", 3, SGD),
    # torchvision's Swin at 3x32x32 (two stages, windows of 3: padded, shifted by 1, masked): its
    # relative position bias table, patch merging, stochastic depth called twice a block (a site a call).
    ("file:swin_small", 3, 11, "chunks:5,4,2", 3, ADAMW),
    # ... at 3x36x36: 9x9 tokens, which its patch merging zero-pads to 10x10 (F.pad's pad nodes).
    ("file:swin_small@36", 3, 11, "chunks:5,4,2", 1, SGD),
    # torchvision's Swin V2 at 3x32x32: cosine attention with a logit scale per head, the bias from
    # cpb_mlp (16·sigmoid), the silent key bias, post-norm blocks, PatchMergingV2.
    ("file:swin_v2_small", 3, 11, "chunks:5,4,2", 3, SGD),
    # torchvision's MaxViT at 3x32x32: MBConv, window and grid partitions, relative positional
    # attention, BatchNorm at momentum 0.99, stochastic depth; one update.
    ("file:maxvit_small", 3, 27, "chunks:8,10,9", 1, ADAMW),
    # ReLU6, SiLU, Tanh and Sigmoid.
    ("file:tiny_activations", 3, 13, "chunks:6,4,3", 3, ["--lr", "0.1", "--momentum", "0.9"]),
    # nanoGPT's model.py GPT as it is: lm_head tied to wte (one parameter, its gradient the sum of the
    # embedding's and the head's), the causal-mask buffers kept as state; and with bias=False
    # (LayerNorm's F.layer_norm with bias None, Linears without biases). AdamW decays the matrices.
    ("file:nanogpt_tied", 3, 10, "chunks:5,3,2", 3, ["--optimizer", "adamw", "--lr", "0.003", "--momentum", "0"]),
    ("file:nanogpt_nobias", 2, 8, "even", 3, ["--optimizer", "sgd", "--lr", "0.5", "--momentum", "0.9"]),
]

# By hand (--heavy): the transformers at their native size, from float32 tensor files (Swin-T's
# 7x7 windows over 56, 28, 14 and 7 tokens a side: shifted but for the last, one window); VGG.
HEAVY = [
    ("file:tv_vit_b_16@224", 3, 6, "chunks:3,2,1", 1, ["--optimizer", "adamw", "--lr", "0.0003", "--momentum", "0"]),
    ("file:tv_convnext_tiny@224", 3, 6, "chunks:3,2,1", 1, ["--optimizer", "adamw", "--lr", "0.0003", "--momentum", "0"]),
    ("file:tv_vgg11_bn", 3, 27, "chunks:8,10,9", 1, SGD),
    ("file:tv_swin_t@224", 3, 6, "chunks:3,2,1", 1, ["--optimizer", "adamw", "--lr", "0.0003", "--momentum", "0"]),
    ("file:tv_swin_v2_t@256", 3, 6, "chunks:3,2,1", 1, ["--optimizer", "adamw", "--lr", "0.0003", "--momentum", "0"]),
    ("file:tv_maxvit_t@224", 3, 6, "chunks:3,2,1", 1, ["--optimizer", "adamw", "--lr", "0.0003", "--momentum", "0"]),
]

if __name__ == "__main__":
    heavy = "--heavy" in sys.argv
    if heavy:
        sys.argv.remove("--heavy")
    crosscheck.main(HEAVY if heavy else CASES, continue_checks=False, cifar_samples=128)
