#!/usr/bin/python3
"""Export real ONNX models plus torch-computed reference outputs.

Run with the Debian system interpreter (see scripts/install-export-deps.sh):

    /usr/bin/python3 scripts/export_models.py --size small|full --out DIR [--only NAME,NAME]

For every selected architecture this writes

    DIR/<name>/model.onnx
    DIR/<name>/test_data_set_0/input_<i>.pb    (serialized onnx.TensorProto)
    DIR/<name>/test_data_set_0/output_<k>.pb   (serialized onnx.TensorProto)

i.e. the layout of ONNX's own backend test data. Weights are random but
deterministic (torch.manual_seed(0) before building each model, then all
degenerate constant-initialised parameters such as zero biases, unit norm
scales, BatchNorm running statistics, ViT's zero classifier head and
ConvNeXt's 1e-6 layer scale are re-drawn from the same seeded generator so
that every parameter actually influences the reference outputs). Inputs come
from a fixed-seed torch.Generator. Models run in eval mode, batch 1, float32;
the reference outputs are computed by torch under torch.no_grad().
Export uses opset 17 with constant folding. bert_functions is bert exported with
export_modules_as_functions: its encoder layers, their attention, LayerNorms and GELUs become
model-local functions (nested, with attributes), as torch.onnx writes modules as functions.
gated_block is scripted (torch.jit.script) before export, so its data-dependent `if` becomes an
ONNX If whose condition is computed from an input at run time; it has two data sets,
test_data_set_0 taking the then branch and test_data_set_1 the else branch.
scan_recurrence is scripted too: its time loop becomes an ONNX Loop that carries the [T, D] buffer of
hidden states and writes one row of it per step (h[t] = ...: a ScatterND), reading the row before.
recurrent_stack chains torch's LSTM, GRU (linear_before_reset) and RNN layers without initial
states, as torch exports them: ONNX LSTM, GRU and RNN nodes.
"""

import argparse
import collections
import math
import os
import sys
import time
import warnings

import numpy as np
import onnx
from onnx import numpy_helper
import torch
import torch.nn as nn
import torch.nn.functional as F
import torchvision
from torchvision.models import convnext as tv_convnext
from torchvision.models import efficientnet as tv_efficientnet
from torchvision.models import mobilenetv2 as tv_mobilenetv2
from torchvision.models import resnet as tv_resnet
from torchvision.models import swin_transformer as tv_swin
from torchvision.models import vision_transformer as tv_vit

OPSET = 17
INPUT_SEED = 1234

SMALL_NAMES = ["bert", "vit", "swin_t", "resnet_small", "mobilenet_v2",
               "efficientnet_b0", "convnext_t", "nerf_mlp", "cnn_small", "unet_small", "bert_functions", "gated_block",
               "scan_recurrence", "recurrent_stack", "memory_bound"]
FULL_NAMES = ["bert", "vit", "swin_t", "resnet18", "resnet50", "mobilenet_v2",
              "efficientnet_b0", "convnext_t", "nerf_mlp", "detector_416", "memory_bound"]


# --------------------------------------------------------------------------
# Models written in this script
# --------------------------------------------------------------------------

class BertSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        assert hidden % heads == 0
        self.heads = heads
        self.head_dim = hidden // heads
        self.scale = 1.0 / math.sqrt(self.head_dim)
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, hidden)

    def _split(self, x):
        b, s = x.size(0), x.size(1)
        # [B, S, H*D] -> [B, S, H, D] -> [B, H, S, D]
        return x.view(b, s, self.heads, self.head_dim).transpose(1, 2)

    def forward(self, x, add_mask):
        b, s = x.size(0), x.size(1)
        q = self._split(self.query(x))
        k = self._split(self.key(x))
        v = self._split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) * self.scale
        scores = scores + add_mask                       # [B,H,S,S] + [B,1,1,S]
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v)                      # [B,H,S,D]
        ctx = ctx.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)
        return self.out(ctx)


class BertLayer(nn.Module):
    def __init__(self, hidden, heads, ffn, eps=1e-12):
        super().__init__()
        self.attn = BertSelfAttention(hidden, heads)
        self.attn_norm = nn.LayerNorm(hidden, eps=eps)
        self.ffn_in = nn.Linear(hidden, ffn)
        self.act = nn.GELU()  # exact (erf) form
        self.ffn_out = nn.Linear(ffn, hidden)
        self.ffn_norm = nn.LayerNorm(hidden, eps=eps)

    def forward(self, x, add_mask):
        x = self.attn_norm(x + self.attn(x, add_mask))
        x = self.ffn_norm(x + self.ffn_out(self.act(self.ffn_in(x))))
        return x


class BertEncoder(nn.Module):
    def __init__(self, layers, hidden, heads, ffn, vocab, max_pos=512, eps=1e-12):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab, hidden)
        self.pos_emb = nn.Embedding(max_pos, hidden)
        self.register_buffer("position_ids", torch.arange(max_pos).unsqueeze(0), persistent=False)
        self.emb_norm = nn.LayerNorm(hidden, eps=eps)
        self.layers = nn.ModuleList([BertLayer(hidden, heads, ffn, eps) for _ in range(layers)])

    def forward(self, input_ids, attention_mask):
        s = input_ids.size(1)
        pos = self.position_ids[:, :s]
        x = self.tok_emb(input_ids) + self.pos_emb(pos)
        x = self.emb_norm(x)
        # additive mask: 0 where attended, -10000 where masked; [B,1,1,S]
        add_mask = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        for layer in self.layers:
            x = layer(x, add_mask)
        return x


class MemoryBound(nn.Module):
    """Memory-bound work at sizes where a launch costs little beside its traffic (the race's
    effective-bandwidth check, issue 27): an element-wise chain, a LayerNorm and a softmax along
    the rows, a transpose and a mean. Every output is materialized, so each kernel of a plan reads
    and writes whole tensors."""

    def __init__(self, hidden):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x, r):
        h = F.gelu(x + r) * 0.5 + x
        p = torch.softmax(self.norm(h) * 0.125, dim=-1)
        m = p.transpose(1, 2).contiguous().mean(dim=-1)
        return h, p, m


class Contractions(nn.Module):
    """Independent matrix products x_i @ w_i at the shapes of the race's transformers (the race's
    contractions-against-the-library check, issue 27: each product its own group, so a tune
    measures the generated forms and cuBLASLt's on the same shape). Weights of deviation
    1 / sqrt(K), as a trained layer's, drawn from `gen`."""

    def __init__(self, shapes, gen):
        super().__init__()
        self.weights = nn.ParameterList(
            [nn.Parameter(torch.randn(k, n, generator=gen) / k ** 0.5) for _, k, n in shapes])

    def forward(self, *xs):
        return tuple(x @ w for x, w in zip(xs, self.weights))


class NerfMLP(nn.Module):
    """The original NeRF MLP (Mildenhall et al. 2020), positional encoding inside."""

    def __init__(self, width=256, depth=8, l_xyz=10, l_dir=4, skip=4):
        super().__init__()
        self.skip = skip
        self.register_buffer("freq_xyz", 2.0 ** torch.arange(l_xyz, dtype=torch.float32))
        self.register_buffer("freq_dir", 2.0 ** torch.arange(l_dir, dtype=torch.float32))
        in_xyz = 3 + 3 * 2 * l_xyz
        in_dir = 3 + 3 * 2 * l_dir
        layers = [nn.Linear(in_xyz, width)]
        for i in range(depth - 1):
            layers.append(nn.Linear(width + in_xyz if i == skip else width, width))
        self.pts_linears = nn.ModuleList(layers)
        self.sigma_linear = nn.Linear(width, 1)
        self.feature_linear = nn.Linear(width, width)
        self.views_linear = nn.Linear(width + in_dir, width // 2)
        self.rgb_linear = nn.Linear(width // 2, 3)
        # He init keeps activations from vanishing through the 8 ReLU layers
        # (torch's default Linear init would make the outputs nearly constant).
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.kaiming_uniform_(m.weight, nonlinearity="relu")

    @staticmethod
    def encode(x, freqs):
        # [x, sin(2^0 x), cos(2^0 x), sin(2^1 x), cos(2^1 x), ...]
        n = x.shape[0]
        scaled = x[:, None, :] * freqs[None, :, None]                  # [N, L, 3]
        enc = torch.stack([torch.sin(scaled), torch.cos(scaled)], 2)   # [N, L, 2, 3]
        return torch.cat([x, enc.reshape(n, -1)], dim=-1)

    def forward(self, xyz, dirs):
        pts = self.encode(xyz, self.freq_xyz)
        views = self.encode(dirs, self.freq_dir)
        h = pts
        for i, layer in enumerate(self.pts_linears):
            h = F.relu(layer(h))
            if i == self.skip:
                h = torch.cat([pts, h], dim=-1)
        sigma = F.relu(self.sigma_linear(h))
        feat = self.feature_linear(h)
        h = F.relu(self.views_linear(torch.cat([feat, views], dim=-1)))
        rgb = torch.sigmoid(self.rgb_linear(h))
        return rgb, sigma


class GatedBlock(nn.Module):
    """A pre-norm residual block whose body an input gate picks at run time: an MLP when the
    gate sums above zero, a cheap SiLU-like path otherwise (scripted: the `if` is an ONNX If)."""

    def __init__(self, dim):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)

    def forward(self, x, gate):
        h = self.norm(x)
        if bool(gate.sum() > 0):
            y = self.fc2(torch.relu(self.fc1(h)))
        else:
            y = torch.sigmoid(h) * h
        return x + y


class ScanRecurrence(nn.Module):
    """An Elman recurrence over the rows of x, each step's hidden state written into a buffer of
    all of them (scripted: the loop is an ONNX Loop carrying the buffer, updated a row a step)."""

    def __init__(self, dim):
        super().__init__()
        self.inp = nn.Linear(dim, dim)
        self.rec = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        h = torch.zeros_like(x)
        h[0] = torch.tanh(self.inp(x[0]))
        for t in range(1, x.shape[0]):
            h[t] = torch.tanh(self.inp(x[t]) + self.rec(h[t - 1]))
        return h


class RecurrentStack(nn.Module):
    """An LSTM, a GRU and an Elman RNN in a row over a [T, B, I] sequence, zero initial states."""

    def __init__(self, inp, hidden, out):
        super().__init__()
        self.lstm = nn.LSTM(inp, hidden)
        self.gru = nn.GRU(hidden, hidden)
        self.rnn = nn.RNN(hidden, out)

    def forward(self, x):
        y, _ = self.lstm(x)
        y, _ = self.gru(y)
        y, _ = self.rnn(y)
        return y


def _conv_bn_silu(c1, c2, k=1, s=1):
    return nn.Sequential(nn.Conv2d(c1, c2, k, s, k // 2, bias=False), nn.BatchNorm2d(c2), nn.SiLU())


class _Bottleneck(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.a, self.b = _conv_bn_silu(c, c, 3), _conv_bn_silu(c, c, 3)

    def forward(self, x):
        return x + self.b(self.a(x))


class _C2f(nn.Module):
    """YOLOv8's cross-stage block: a 1x1 conv split in two, bottlenecks on one half, all concatenated."""

    def __init__(self, c1, c2, n=1):
        super().__init__()
        self.c = c2 // 2
        self.cv1, self.cv2 = _conv_bn_silu(c1, 2 * self.c), _conv_bn_silu((2 + n) * self.c, c2)
        self.m = nn.ModuleList(_Bottleneck(self.c) for _ in range(n))

    def forward(self, x):
        y = list(self.cv1(x).chunk(2, 1))
        for m in self.m:
            y.append(m(y[-1]))
        return self.cv2(torch.cat(y, 1))


class _SPPF(nn.Module):
    def __init__(self, c1, c2):
        super().__init__()
        c = c1 // 2
        self.cv1, self.cv2, self.m = _conv_bn_silu(c1, c), _conv_bn_silu(c * 4, c2), nn.MaxPool2d(5, 1, 2)

    def forward(self, x):
        x = self.cv1(x)
        y1 = self.m(x)
        y2 = self.m(y1)
        return self.cv2(torch.cat([x, y1, y2, self.m(y2)], 1))


class Detector(nn.Module):
    """A YOLOv8n-shaped detector (written here: backbone of C2f blocks and SPPF, an upsampling and
    downsampling neck, three 84-channel heads flattened and concatenated; no NMS), the 416 x 416
    detector issue 31's host-speed goal names."""

    def __init__(self):
        super().__init__()
        self.b0 = nn.Sequential(_conv_bn_silu(3, 16, 3, 2), _conv_bn_silu(16, 32, 3, 2), _C2f(32, 32))
        self.b1 = nn.Sequential(_conv_bn_silu(32, 64, 3, 2), _C2f(64, 64, 2))
        self.b2 = nn.Sequential(_conv_bn_silu(64, 128, 3, 2), _C2f(128, 128, 2))
        self.b3 = nn.Sequential(_conv_bn_silu(128, 256, 3, 2), _C2f(256, 256), _SPPF(256, 256))
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.n1, self.n2 = _C2f(384, 128), _C2f(192, 64)
        self.d1, self.n3 = _conv_bn_silu(64, 64, 3, 2), _C2f(192, 128)
        self.d2, self.n4 = _conv_bn_silu(128, 128, 3, 2), _C2f(384, 256)
        self.heads = nn.ModuleList(nn.Sequential(_conv_bn_silu(c, 64, 3), nn.Conv2d(64, 84, 1)) for c in (64, 128, 256))

    def forward(self, x):
        p2 = self.b1(self.b0(x))
        p3 = self.b2(p2)
        p4 = self.b3(p3)
        a = self.n1(torch.cat([self.up(p4), p3], 1))
        b = self.n2(torch.cat([self.up(a), p2], 1))
        c = self.n3(torch.cat([self.d1(b), a], 1))
        d = self.n4(torch.cat([self.d2(c), p4], 1))
        return torch.cat([h(t).flatten(2) for h, t in zip(self.heads, (b, c, d))], 2)


class CnnSmall(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 16, 3, padding=1, groups=16, bias=False), nn.BatchNorm2d(16),
            nn.ReLU6(inplace=True),
            nn.AvgPool2d(2),
        )
        self.flatten = nn.Flatten()
        self.fc = nn.Linear(16 * 4 * 4, num_classes)

    def forward(self, x):
        return self.fc(self.flatten(self.features(x)))


class UNetSmall(nn.Module):
    """A two-level U-Net decoder path (segmentation, super-resolution, diffusion models): strided
    convolutions down, ConvTranspose2d up (stride 2 with output_padding, a grouped one, and one
    with dilation and asymmetric output padding), skip connections concatenated."""

    def __init__(self, width=8):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(3, width, 3, padding=1), nn.ReLU(inplace=True))
        self.enc2 = nn.Sequential(nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.ReLU(inplace=True))
        self.mid = nn.Sequential(nn.Conv2d(2 * width, 2 * width, 3, stride=2, padding=1), nn.ReLU(inplace=True))
        self.up2 = nn.ConvTranspose2d(2 * width, 2 * width, 3, stride=2, padding=1, output_padding=1, groups=2)
        self.dec2 = nn.Sequential(nn.Conv2d(4 * width, width, 3, padding=1), nn.ReLU(inplace=True))
        self.up1 = nn.ConvTranspose2d(width, width, 4, stride=2, padding=1, bias=False)
        self.head = nn.ConvTranspose2d(2 * width, 2, 3, stride=1, padding=2, dilation=2)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(e1)
        d2 = self.dec2(torch.cat([self.up2(self.mid(e2)), e2], dim=1))
        return self.head(torch.cat([self.up1(d2), e1], dim=1))


class ResNetNarrow(tv_resnet.ResNet):
    """torchvision's ResNet with configurable stage widths (its __init__ hard-codes
    64/128/256/512). Reuses torchvision's BasicBlock, _make_layer and forward."""

    def __init__(self, block, layers, widths, num_classes=10):
        nn.Module.__init__(self)
        self._norm_layer = nn.BatchNorm2d
        self.inplanes = widths[0]
        self.dilation = 1
        self.groups = 1
        self.base_width = 64
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, widths[0], layers[0])
        self.layer2 = self._make_layer(block, widths[1], layers[1], stride=2)
        self.layer3 = self._make_layer(block, widths[2], layers[2], stride=2)
        self.layer4 = self._make_layer(block, widths[3], layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[3] * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")


# --------------------------------------------------------------------------
# Parameter randomisation / inputs
# --------------------------------------------------------------------------

@torch.no_grad()
def randomize_degenerate_params(model):
    """Re-draw parameters/buffers that default-initialise to a constant (zero
    biases, unit norm weights, BN running stats, ViT's zero head and class
    token, ConvNeXt's 1e-6 layer scale) so they are exercised by the test
    data. Uses the global torch RNG (seeded before model construction)."""
    for name, t in list(model.named_parameters()) + list(model.named_buffers()):
        if not t.is_floating_point() or t.numel() == 0:
            continue
        if name.endswith("layer_scale"):
            t.copy_(torch.empty_like(t).uniform_(0.1, 0.3))
            continue
        if name.endswith("position_ids") or name.startswith("freq_"):
            continue
        flat = t.reshape(-1)
        if not bool((flat == flat[0]).all()):
            continue
        c = float(flat[0])
        if c == 1.0:   # norm scales, running_var
            t.copy_(torch.empty_like(t).uniform_(0.5, 1.5))
        elif c == 0.0:  # biases, running_mean, class token, zero-init heads
            t.copy_(torch.randn_like(t) * 0.1)


@torch.no_grad()
def calibrate_batchnorm(model, inputs):
    """Set BatchNorm running statistics to the actual statistics of the
    activations on a (different, fixed-seed) calibration batch, so eval-mode
    BN really normalises and the outputs keep a sane magnitude."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return
    for bn in bns:
        bn.reset_running_stats()
        bn.momentum = None  # cumulative average over the calibration pass
    # A batch of 16 (BN needs >1 value per channel even where spatial dims are 1x1).
    calib = []
    gen = torch.Generator().manual_seed(INPUT_SEED + 1)
    for t in inputs:
        assert t.is_floating_point()
        calib.append(torch.randn((16,) + tuple(t.shape[1:]), generator=gen))
    model.train()
    for m in model.modules():  # dropout / stochastic depth off during calibration
        if not isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.training = False
    model(*calib)
    model.eval()


def make_gen():
    return torch.Generator().manual_seed(INPUT_SEED)


def image_input(hw, gen):
    return (torch.randn(1, 3, hw, hw, generator=gen),)


# --------------------------------------------------------------------------
# Model registry: each builder returns a dict with
#   model, inputs (tuple), input_names, output_names, dynamic_axes (or None)
# --------------------------------------------------------------------------

def build_bert(size):
    if size == "full":
        cfg = dict(layers=12, hidden=768, heads=12, ffn=3072, vocab=30522)
        seq = 128
    else:
        cfg = dict(layers=2, hidden=64, heads=4, ffn=128, vocab=100)
        seq = 16
    model = BertEncoder(**cfg, max_pos=512 if size == "full" else 64)
    gen = make_gen()
    input_ids = torch.randint(0, cfg["vocab"], (1, seq), generator=gen, dtype=torch.int64)
    attention_mask = torch.ones(1, seq, dtype=torch.int64)
    attention_mask[:, seq - max(2, seq // 8):] = 0
    dyn = None
    if size == "small":
        dyn = {"input_ids": {0: "batch", 1: "seq"},
               "attention_mask": {0: "batch", 1: "seq"},
               "last_hidden_state": {0: "batch", 1: "seq"}}
    return dict(model=model, inputs=(input_ids, attention_mask),
                input_names=["input_ids", "attention_mask"],
                output_names=["last_hidden_state"], dynamic_axes=dyn)


def build_bert_functions(size):
    spec = build_bert(size)
    spec["functions"] = {BertLayer, BertSelfAttention, nn.LayerNorm, nn.GELU}
    return spec


def _image_model(model, hw):
    return dict(model=model, inputs=image_input(hw, make_gen()), input_names=["input"],
                output_names=["logits"], dynamic_axes=None)


def build_vit(size):
    if size == "full":
        return _image_model(torchvision.models.vit_b_16(), 224)
    return _image_model(tv_vit.VisionTransformer(image_size=32, patch_size=8, num_layers=2,
                                                 num_heads=2, hidden_dim=32, mlp_dim=64,
                                                 num_classes=10), 32)


def build_swin_t(size):
    if size == "full":
        return _image_model(torchvision.models.swin_t(), 224)
    return _image_model(tv_swin.SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2],
                                                num_heads=[2, 2], window_size=[4, 4],
                                                num_classes=10), 32)


def build_resnet18(size):
    return _image_model(torchvision.models.resnet18(), 224)


def build_resnet50(size):
    return _image_model(torchvision.models.resnet50(), 224)


def build_resnet_small(size):
    # torchvision.models.resnet.ResNet(BasicBlock, [1,1,1,1], num_classes=10) has
    # hard-coded 64..512 widths (~19 MB of weights); same structure, narrow stages.
    return _image_model(ResNetNarrow(tv_resnet.BasicBlock, [1, 1, 1, 1], [8, 16, 32, 64],
                                     num_classes=10), 32)


def build_mobilenet_v2(size):
    if size == "full":
        return _image_model(torchvision.models.mobilenet_v2(), 224)
    return _image_model(tv_mobilenetv2.MobileNetV2(width_mult=0.25, num_classes=10), 32)


def build_efficientnet_b0(size):
    if size == "full":
        return _image_model(torchvision.models.efficientnet_b0(), 224)
    # Three MBConv stages (torchvision's MBConvConfig) with tiny channels.
    mb = tv_efficientnet.MBConvConfig
    setting = [
        mb(1, 3, 1, 8, 8, 1),    # expand_ratio, kernel, stride, in, out, num_layers
        mb(6, 3, 2, 8, 16, 2),
        mb(6, 5, 2, 16, 24, 1),
    ]
    return _image_model(tv_efficientnet.EfficientNet(setting, dropout=0.2, num_classes=10,
                                                     last_channel=64), 32)


def build_convnext_t(size):
    if size == "full":
        return _image_model(torchvision.models.convnext_tiny(), 224)
    cfg = tv_convnext.CNBlockConfig
    setting = [cfg(16, 32, 1), cfg(32, None, 1)]
    return _image_model(tv_convnext.ConvNeXt(setting, num_classes=10), 32)


def build_nerf_mlp(size):
    n, width = (4096, 256) if size == "full" else (64, 32)
    model = NerfMLP(width=width)
    gen = make_gen()
    xyz = torch.rand(n, 3, generator=gen) * 4.0 - 2.0
    dirs = torch.randn(n, 3, generator=gen)
    dirs = dirs / dirs.norm(dim=-1, keepdim=True)
    return dict(model=model, inputs=(xyz, dirs), input_names=["xyz", "dirs"],
                output_names=["rgb", "sigma"], dynamic_axes=None)


def build_memory_bound(size):
    batch, rows, hidden = (8, 4096, 1024) if size == "full" else (2, 16, 64)
    gen = make_gen()
    x = torch.randn(batch, rows, hidden, generator=gen)
    r = torch.randn(batch, rows, hidden, generator=gen)
    return dict(model=MemoryBound(hidden), inputs=(x, r), input_names=["x", "residual"],
                output_names=["h", "p", "m"], dynamic_axes=None)


# (M, K, N): issue 27's 2,048 x 1,024 x 4,096 example, the LLaMA-shaped decoder's FFN products at its
# 512-token prefill (up 2,048 -> 5,632, down 5,632 -> 2,048), BERT-base's FFN at sequence 128
# (768 -> 3,072 -> 768); small: odd extents of the same kinds.
CONTRACTIONS = {"full": [(2048, 1024, 4096), (512, 2048, 5632), (512, 5632, 2048), (128, 768, 3072), (128, 3072, 768)],
                "small": [(40, 72, 136), (24, 200, 64)]}


def build_contractions(size):
    shapes = CONTRACTIONS["full" if size == "full" else "small"]
    gen = make_gen()
    model = Contractions(shapes, gen)
    xs = tuple(torch.randn(m, k, generator=gen) for m, k, _ in shapes)
    return dict(model=model, inputs=xs, input_names=[f"x{i}" for i in range(len(shapes))],
                output_names=[f"y{i}" for i in range(len(shapes))], dynamic_axes=None)


def build_gated_block(size):
    gen = make_gen()
    x = torch.randn(1, 8, 32, generator=gen)
    return dict(model=GatedBlock(32), inputs=(x, torch.tensor([0.5])), more_inputs=[(x, torch.tensor([-0.5]))],
                input_names=["x", "gate"], output_names=["y"], dynamic_axes=None, script=True)


def build_scan_recurrence(size):
    x = torch.randn(12, 256, generator=make_gen())
    return dict(model=ScanRecurrence(256), inputs=(x,), input_names=["x"], output_names=["h"], dynamic_axes=None,
                script=True)


def build_recurrent_stack(size):
    x = torch.randn(12, 3, 32, generator=make_gen())
    return dict(model=RecurrentStack(32, 48, 32), inputs=(x,), input_names=["x"], output_names=["y"], dynamic_axes=None)


def build_detector_416(size):
    spec = _image_model(Detector(), 416)
    spec["input_names"], spec["output_names"] = ["images"], ["preds"]
    return spec


def build_cnn_small(size):
    return _image_model(CnnSmall(num_classes=10), 16)


def build_unet_small(size):
    return dict(model=UNetSmall(), inputs=image_input(16, make_gen()), input_names=["input"],
                output_names=["mask"], dynamic_axes=None)


BUILDERS = {
    "bert": build_bert,
    "bert_functions": build_bert_functions,
    "vit": build_vit,
    "swin_t": build_swin_t,
    "resnet18": build_resnet18,
    "resnet50": build_resnet50,
    "resnet_small": build_resnet_small,
    "mobilenet_v2": build_mobilenet_v2,
    "efficientnet_b0": build_efficientnet_b0,
    "convnext_t": build_convnext_t,
    "nerf_mlp": build_nerf_mlp,
    "cnn_small": build_cnn_small,
    "unet_small": build_unet_small,
    "gated_block": build_gated_block,
    "scan_recurrence": build_scan_recurrence,
    "recurrent_stack": build_recurrent_stack,
    "detector_416": build_detector_416,
    "memory_bound": build_memory_bound,
    "contractions": build_contractions,
}


# --------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------

def all_nodes(graph):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from all_nodes(attr.g)
            elif attr.type == onnx.AttributeProto.GRAPHS:
                for g in attr.graphs:
                    yield from all_nodes(g)


def write_tensor(path, array, name):
    tensor = numpy_helper.from_array(np.ascontiguousarray(array), name=name)
    with open(path, "wb") as f:
        f.write(tensor.SerializeToString())


def fix_output_shapes(m, outs):
    """Static export: makes the graph's outputs carry the concrete shapes of the outputs `outs`
    (the exporter's shape inference leaves e.g. swin_t's batch dim symbolic). Returns whether
    anything changed."""
    fixed = False
    for vi, o in zip(m.graph.output, outs):
        dims = vi.type.tensor_type.shape.dim
        if [d.dim_value if d.HasField("dim_value") else None for d in dims] != list(o.shape):
            del dims[:]
            for v in o.shape:
                dims.add().dim_value = v
            fixed = True
    return fixed


def export_one(name, size, out_dir):
    t0 = time.time()
    torch.manual_seed(0)
    spec = BUILDERS[name](size)
    model = spec["model"]
    inputs = spec["inputs"]
    randomize_degenerate_params(model)
    calibrate_batchnorm(model, inputs)
    model.eval()

    data_sets = [inputs] + spec.get("more_inputs", [])
    all_outs = []
    for set_inputs in data_sets:
        with torch.no_grad():
            outs = model(*set_inputs)
        if isinstance(outs, torch.Tensor):
            outs = (outs,)
        outs = tuple(outs)
        assert len(outs) == len(spec["output_names"]), name
        for o in outs:
            if not torch.isfinite(o).all():
                raise RuntimeError(f"{name}: non-finite reference output")
        all_outs.append(outs)
    outs = all_outs[0]

    model_dir = os.path.join(out_dir, name)
    for k in range(len(data_sets)):
        data_dir = os.path.join(model_dir, f"test_data_set_{k}")
        os.makedirs(data_dir, exist_ok=True)
        for stale in os.listdir(data_dir):
            if stale.endswith(".pb"):
                os.remove(os.path.join(data_dir, stale))
    onnx_path = os.path.join(model_dir, "model.onnx")

    # Parameters keep requires_grad=True during export, so nn.MultiheadAttention
    # (vit) takes its decomposed path rather than the aten::_native_multi_head_attention
    # fast path, which has no ONNX symbolic.
    torch.onnx.export(
        torch.jit.script(model) if spec.get("script") else model, inputs, onnx_path,
        opset_version=OPSET,
        do_constant_folding=True,
        input_names=spec["input_names"],
        output_names=spec["output_names"],
        dynamic_axes=spec["dynamic_axes"],
        export_modules_as_functions=spec.get("functions", False),
    )

    m = onnx.load(onnx_path)
    if spec.get("functions") and [o.name for o in m.graph.output] != spec["output_names"]:
        # torch 1.13 leaves output_names unapplied where a module exported as a function makes the
        # graph's output: the call's output is renamed here.
        for out, want in zip(m.graph.output, spec["output_names"]):
            for n in m.graph.node:
                n.output[:] = [want if o == out.name else o for o in n.output]
            out.name = want
        onnx.save(m, onnx_path)
    if spec["dynamic_axes"] is None:
        if fix_output_shapes(m, outs):
            onnx.save(m, onnx_path)
    onnx.checker.check_model(onnx_path)
    graph_inputs = [i.name for i in m.graph.input]
    graph_outputs = [o.name for o in m.graph.output]
    if graph_inputs != spec["input_names"]:
        raise RuntimeError(f"{name}: graph inputs {graph_inputs} != {spec['input_names']}")
    if graph_outputs != spec["output_names"]:
        raise RuntimeError(f"{name}: graph outputs {graph_outputs} != {spec['output_names']}")

    for s, (set_inputs, set_outs) in enumerate(zip(data_sets, all_outs)):
        data_dir = os.path.join(model_dir, f"test_data_set_{s}")
        for i, (n, t) in enumerate(zip(graph_inputs, set_inputs)):
            write_tensor(os.path.join(data_dir, f"input_{i}.pb"), t.detach().numpy(), n)
        for k, (n, t) in enumerate(zip(graph_outputs, set_outs)):
            write_tensor(os.path.join(data_dir, f"output_{k}.pb"), t.detach().numpy(), n)

    nodes = list(all_nodes(m.graph))
    hist = collections.Counter(n.op_type for n in nodes)
    domains = sorted({n.domain or "ai.onnx" for n in nodes})
    dt = time.time() - t0
    size_b = os.path.getsize(onnx_path)
    top = ", ".join(f"{op}:{c}" for op, c in hist.most_common(6))
    print(f"{name:16s} {size_b / 1e6:9.3f} MB  {len(nodes):5d} nodes  [{top}{', ...' if len(hist) > 6 else ''}]"
          f"  {dt:6.1f} s", flush=True)
    return dict(name=name, ops=sorted(hist), domains=domains, size=size_b, nodes=len(nodes),
                seconds=dt, out_shapes=[tuple(o.shape) for o in outs])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", choices=["small", "full"], required=True)
    ap.add_argument("--out", required=True, help="output directory")
    ap.add_argument("--only", default="", help="comma-separated model names (default: all for --size)")
    ap.add_argument("--verbose", action="store_true", help="show torch export warnings")
    args = ap.parse_args(argv)

    valid = SMALL_NAMES if args.size == "small" else FULL_NAMES
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(valid)
    bad = [n for n in names if n not in valid]
    if bad:
        ap.error(f"not valid for --size {args.size}: {', '.join(bad)} (valid: {', '.join(valid)})")

    if not args.verbose:
        warnings.filterwarnings("ignore")
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    os.makedirs(args.out, exist_ok=True)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, onnx {onnx.__version__}, "
          f"opset {OPSET}, size {args.size}", flush=True)

    results, failed = [], []
    for n in names:
        try:
            results.append(export_one(n, args.size, args.out))
        except Exception as e:  # keep going; report at the end
            print(f"{n:16s} FAILED: {type(e).__name__}: {e}", flush=True)
            failed.append(n)

    print("\nop types per model (all nodes in domain(s) shown):")
    for r in results:
        print(f"  {r['name']} [{', '.join(r['domains'])}]: {' '.join(r['ops'])}")
    union = sorted({op for r in results for op in r["ops"]})
    print(f"  union ({len(union)}): {' '.join(union)}")
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
