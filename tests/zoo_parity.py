#!/usr/bin/python3
"""Small torchvision models (random weights) exported the way users export them, with PyTorch's answers:
the reference of tests/zoo_test.cc and of a by-hand check of the zoo.

usage: zoo_parity.py MODEL OUT_DIR [--opset N] [--size S] [--batch N] [--seed S] [--functions]
MODEL: vit (a 2-layer VisionTransformer), text / text_causal (TextClassifier on token ids, --size the length), bag
(nn.EmbeddingBag in its three modes on token ids, see BagClassifier), convnext (a 2-stage ConvNeXt), shufflenet (shufflenet_v2_x0_5),
unet (a small segmentation UNet, per-pixel labels [N,S,S]), stn and stn_* (spatial transformers, GridSample's modes: see
STN_MODELS), lrn (a CNN with nn.LocalResponseNorm), glow (an invertible 1x1
convolution and its log-determinant), lstm / gru / rnn / lstm1 / gru1 / rnn_relu1 (recurrent classifiers
reading the image row by row, see RowSequence), upsampling (a DCGAN-style decoder), pooling_heads (GlobalMaxPool,
TopK, CumSum, Trilu and boolean indexing heads, see PoolingHeads), scripted_loops (torch.jit.script loops over rows and a
counter, see ScriptedLoops), roi_pool (a Fast R-CNN-style head, torchvision.ops.roi_pool: see RoiPoolHead), or any torchvision.models builder name (random weights;
GoogLeNet and Inception without auxiliary heads, torchvision's ViTs at image_size S). Writes OUT_DIR/train.onnx
(training-mode export, no constant folding), eval.onnx (eval mode), image.npy (f32 [N,3,S,S]; tokens.npy, i64 [N,S], for text), labels.npy
(i64 [N]), logits.npy (eval-mode output), buffers.txt (the float buffers exported as initializers: to freeze), train_logits.npy and loss.npy (training mode: the output and its mean
cross-entropy), one <parameter>.npy per
trainable parameter (its gradient), params.txt listing them, float32_errors.txt (each gradient's
error in torch's own float32, relative to its scale floored at 1e-3 of the largest) and relu_float32_errors.txt (each
ReLU of the training export, by its input's name there: torch float32's largest absolute error on that input against
torch float64, the training-mode forward; not written when torch's ReLU calls and the export's Relu nodes do not pair
up one to one: their counts, and their shapes where ONNX shape inference knows them). Torch computes in float64 from
the float32 weights and batch; results are stored as f32.
"""
import argparse
from typing import List
import copy
import functools
import os

import numpy as np
import torch
import torch.nn.functional as F
import onnx
import torchvision
from torchvision.models.convnext import CNBlockConfig, ConvNeXt
from torchvision.models.vision_transformer import VisionTransformer
from torch.overrides import TorchFunctionMode


class UNet(torch.nn.Module):
    """A small UNet as users write one: Conv + GroupNorm (InstanceNorm in the middle) + ReLU blocks, MaxPool down,
    up by every interpolation torch exports (nearest x2, nn.Upsample bilinear x2, bilinear to a size with
    align_corners), Concat skips, a 1x1 head: 10 classes per pixel."""

    def __init__(self, c=4, classes=10):
        super().__init__()
        nn = torch.nn

        def block(i, o, norm=None):
            return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), norm or nn.GroupNorm(2, o), nn.ReLU())
        self.d1, self.d2, self.d3 = block(3, c), block(c, 2 * c), block(2 * c, 2 * c)
        self.mid = block(2 * c, 2 * c, nn.InstanceNorm2d(2 * c, affine=True))
        self.pool = nn.MaxPool2d(2)
        self.up = nn.Upsample(scale_factor=2, mode='bilinear')
        self.u3, self.u2, self.u1 = block(4 * c, 2 * c), block(4 * c, c), block(2 * c, c)
        self.head = nn.Conv2d(c, classes, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(self.pool(a))
        d = self.d3(self.pool(b))
        m = self.mid(self.pool(d))
        u = self.u3(torch.cat([F.interpolate(m, scale_factor=2, mode='nearest'), d], 1))
        u = self.u2(torch.cat([self.up(u), b], 1))
        u = self.u1(torch.cat([F.interpolate(u, size=a.shape[2:], mode='bilinear', align_corners=True), a], 1))
        return self.head(u)


class RowSequence(torch.nn.Module):
    """A sequence classifier reading an image row by row (time = rows, features = channels x columns), as
    users try recurrent nets on MNIST: nn.LSTM, nn.GRU or nn.RNN, the last step, a Linear head."""

    def __init__(self, cell, size, hidden=8, layers=2, bidirectional=True, batch_first=True, classes=10):
        super().__init__()
        self.batch_first = batch_first
        self.rnn = cell(3 * size, hidden, num_layers=layers, bidirectional=bidirectional, batch_first=batch_first)
        self.head = torch.nn.Linear(hidden * (2 if bidirectional else 1), classes)

    def forward(self, x):
        seq = x.permute(0, 2, 1, 3).flatten(2)  # [N, rows, 3 * columns]
        if not self.batch_first:
            seq = seq.transpose(0, 1)
        y, _ = self.rnn(seq)
        return self.head(y[:, -1] if self.batch_first else y[-1])


class AttentionReader(torch.nn.Module):
    """A seq2seq-style reader as users wrote them when opset 9 was torch's default: the image zero-padded by F.pad
    (a constant Pad without `value` at opset 9), read row by row by a GRU, then a GRUCell decoder attends over the
    rows for a few steps (dot scores, softmax over the rows, the context and the state joined by
    torch.cat(..., -1), a Concat with axis -1 that opset 9 does not allow), a Linear head on the last state."""

    def __init__(self, size, hidden=8, steps=3, classes=10):
        super().__init__()
        self.steps = steps
        self.enc = torch.nn.GRU(3 * (size + 2), hidden, batch_first=True)
        self.dec = torch.nn.GRUCell(2 * hidden, hidden)
        self.head = torch.nn.Linear(hidden, classes)

    def forward(self, x):
        seq = F.pad(x, (1, 1, 2, 0)).permute(0, 2, 1, 3).flatten(2)  # [N, rows + 2, 3 * (columns + 2)]
        e, h = self.enc(seq)
        h = h[0]
        for _ in range(self.steps):
            a = torch.softmax((e @ h.unsqueeze(-1)).squeeze(-1), -1)
            c = (a.unsqueeze(-1) * e).sum(1)
            h = self.dec(torch.cat([c, h], -1), h)
        return self.head(h)


class UpsamplingNet(torch.nn.Module):
    """A DCGAN-style decoder inside a classifier, as users write generators and segmentation decoders: strided Conv
    down, ConvTranspose2d up (stride 2, padding 1, output_padding 1: the size doubles), BatchNorm, LeakyReLU, a
    grouped ConvTranspose2d, Tanh, then a pooled Linear head."""

    def __init__(self, classes=10):
        super().__init__()
        nn = torch.nn
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.LeakyReLU(0.2),
                                  nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1), nn.BatchNorm2d(6),
                                  nn.LeakyReLU(0.2), nn.ConvTranspose2d(6, 4, 4, stride=2, padding=1, groups=2),
                                  nn.Tanh(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, classes))

    def forward(self, x):
        return self.body(x)


class PoolingHeads(torch.nn.Module):
    """A CNN with the pooling heads users write for variable-sized images: nn.AdaptiveMaxPool2d(1) (GlobalMaxPool),
    k-max pooling over the positions (topk), a cumulative sum over the channels (cumsum), the upper triangle of the
    channels' Gram matrix (torch.triu, Trilu) and the positions picked by a data-dependent mask (boolean indexing:
    NonZero and GatherND), then a Linear head."""

    def __init__(self, classes=10):
        super().__init__()
        nn = torch.nn
        self.body = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.gmp = nn.AdaptiveMaxPool2d(1)
        self.head = nn.Linear(8 * 4 + 1, classes)

    def forward(self, x):
        h = self.body(x)  # [N, 8, H, W]
        flat = h.flatten(2)  # [N, 8, HW]
        g = self.gmp(h).flatten(1)
        k = flat.topk(3, dim=2).values.mean(2)
        c = torch.cumsum(g, dim=1) / 8
        gram = torch.triu(flat @ flat.transpose(1, 2) / flat.shape[2])  # [N, 8, 8]
        t = gram.sum(2)
        m = flat[flat > flat.mean()]  # the positions above the mean, over the whole batch
        s = (m.sum() / flat.numel()).expand(x.shape[0], 1)
        return self.head(torch.cat([g, k, c, t, s], 1))


class RoiPoolHead(torch.nn.Module):
    """A Fast R-CNN-style head: a convolution's feature map at half the image's size, torchvision.ops.roi_pool (ONNX
    MaxRoiPool) of three fixed regions of each image (a buffer of [batch_index, x1, y1, x2, y2] in image pixels,
    spatial_scale 1/2; one region reaches past the image, one is thinner than a bin), ReLU, a Linear classifier of
    each pooled region, averaged over an image's regions."""

    def __init__(self, size, batch, classes=10):
        super().__init__()
        nn = torch.nn
        self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
        boxes = [[1.3, 2.2, 0.6 * size, 0.7 * size], [0.25 * size, 0.1 * size, 1.2 * size, 0.9 * size],
                 [0.4 * size, 0.3 * size, 0.45 * size, 0.8 * size]]
        self.register_buffer('rois', torch.tensor([[float(n)] + b for n in range(batch) for b in boxes]))
        self.regions = len(boxes)
        self.head = nn.Linear(8 * 3 * 3, classes)

    def forward(self, x):
        f = self.conv(x)
        p = torch.relu(torchvision.ops.roi_pool(f, self.rois, (3, 3), 0.5))  # [N * regions, 8, 3, 3]
        return self.head(p.flatten(1)).reshape(x.shape[0], self.regions, -1).mean(1)


@torch.jit.script
def scan_rows(x: torch.Tensor, w: torch.Tensor, u: torch.Tensor, b: torch.Tensor):
    h = x.new_zeros((x.size(0), w.size(0)))
    states: List[torch.Tensor] = []
    for t in range(x.size(2)):
        h = torch.tanh(torch.nn.functional.linear(h, w, b) + torch.matmul(x[:, :, t].flatten(1), u))
        states.append(h)
    return 0.5 * h + 0.5 * torch.stack(states, 1).amax(1)


@torch.jit.script
def settle(h: torch.Tensor):
    i = 0
    while i < 3:
        h = h * 0.5 + torch.sin(h)
        i += 1
    return h


class ScriptedLoops(torch.nn.Module):
    """A CNN whose features a scripted recurrent cell reads row by row (`for t in range(x.size(2))`, a Loop over a
    static shape) keeping its states in a list (SequenceInsert per row, then torch.stack: ConcatFromSequence), then a
    scripted `while i < 3` refinement over a counter (a Loop whose condition the counter decides), then a Linear
    head: the Loops and lists torch.jit.script writes, which graphrun unrolls and resolves when loading."""

    def __init__(self, size, classes=10, hidden=12):
        super().__init__()
        nn = torch.nn
        self.conv = nn.Conv2d(3, 4, 3, padding=1, stride=2)
        self.w = nn.Parameter(torch.randn(hidden, hidden) * 0.3)
        self.b = nn.Parameter(torch.zeros(hidden))
        self.u = nn.Parameter(torch.randn(4 * ((size + 1) // 2), hidden) * 0.3)
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.head(settle(scan_rows(torch.relu(self.conv(x)), self.w, self.u, self.b)))


class BagClassifier(torch.nn.Module):
    """A bag-of-words classifier as in PyTorch's text classification tutorial: nn.EmbeddingBag over each row of
    token ids [N, T] (torch exports each as a Loop over the bags), in its three modes side by side, then a Linear
    head."""

    def __init__(self, vocab=50, d=8, classes=10):
        super().__init__()
        nn = torch.nn
        self.bags = nn.ModuleList([nn.EmbeddingBag(vocab, d, mode=m) for m in ('mean', 'max', 'sum')])
        self.head = nn.Linear(3 * d, classes)

    def forward(self, tokens):
        return self.head(torch.cat([bag(tokens) for bag in self.bags], 1))


class TextClassifier(torch.nn.Module):
    """A text classifier as users write one: token ids [N, T] (0 pads), nn.Embedding with padding_idx, a learned
    position embedding, nn.TransformerEncoder (batch_first) told the padding by src_key_padding_mask, the mean over
    the real tokens, a Linear head. post-norm with GELU, or pre-norm with ReLU and a causal mask as well."""

    def __init__(self, seq, causal=False, vocab=50, d=16, heads=2, layers=2, classes=10):
        super().__init__()
        nn = torch.nn
        self.causal = causal
        self.emb = nn.Embedding(vocab, d, padding_idx=0)
        self.pos = nn.Parameter(torch.randn(1, seq, d) * 0.1)
        layer = nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, activation='relu' if causal else 'gelu',
                                           batch_first=True, norm_first=causal)
        self.enc = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(d, classes)

    def forward(self, tokens):
        pad = tokens == 0
        t = tokens.shape[1]
        mask = torch.nn.Transformer.generate_square_subsequent_mask(t) if self.causal else None
        h = self.enc(self.emb(tokens) + self.pos[:, :t], mask=mask, src_key_padding_mask=pad)
        keep = (~pad).unsqueeze(-1).to(h.dtype)
        return self.head((h * keep).sum(1) / keep.sum(1).clamp(min=1))


class SpatialTransformer(torch.nn.Module):
    """The spatial transformer network of PyTorch's tutorial, as users export it: a localisation net predicts an
    affine theta (bias near, not at, the identity: the samples fall between pixels and some outside the image), the
    grid is base @ theta^T by hand (torch 1.13 cannot export F.affine_grid), F.grid_sample resamples the image
    (mode, padding_mode and align_corners as given), a small CNN classifies."""

    def __init__(self, size, mode='bilinear', padding_mode='zeros', align_corners=False, classes=10):
        super().__init__()
        nn = torch.nn
        self.mode, self.padding_mode, self.align_corners = mode, padding_mode, align_corners
        self.loc = nn.Sequential(nn.Conv2d(3, 8, 5), nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(8, 10, 3), nn.ReLU(),
                                 nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(40, 16), nn.ReLU(), nn.Linear(16, 6))
        with torch.no_grad():
            self.loc[-1].weight.mul_(0.5)
            self.loc[-1].bias.copy_(torch.tensor([1.15, 0.2, 0.07, -0.15, 1.1, -0.05]))
        # Pixel centres in [-1, 1], as F.affine_grid places them.
        c = torch.linspace(-1, 1, size) if align_corners else (torch.arange(size) * 2 + 1) / size - 1
        ys, xs = torch.meshgrid(c, c, indexing='ij')
        self.register_buffer('base', torch.stack([xs, ys, torch.ones_like(xs)], -1).reshape(-1, 3))
        self.size = size
        self.head = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                                  nn.Linear(8, classes))

    def forward(self, x):
        theta = self.loc(x).view(-1, 2, 3)
        grid = (self.base.to(x.dtype) @ theta.transpose(1, 2)).view(-1, self.size, self.size, 2)
        x = F.grid_sample(x, grid, mode=self.mode, padding_mode=self.padding_mode, align_corners=self.align_corners)
        return self.head(x)


class TutorialSpatialTransformer(torch.nn.Module):
    """PyTorch's spatial transformer tutorial as users start it: the localisation net's last layer zeroed and its bias
    the identity, so the grid is the pixel centres themselves (computed in float32: within a float's rounding of the
    bilinear kernel's corners), the zoo's 3 channels."""

    def __init__(self, size, classes=10):
        super().__init__()
        nn = torch.nn
        self.size = size
        self.loc = nn.Sequential(nn.Conv2d(3, 8, 7), nn.MaxPool2d(2), nn.ReLU(), nn.Conv2d(8, 10, 5), nn.MaxPool2d(2),
                                 nn.ReLU(), nn.Flatten(), nn.Linear(10 * (((size - 6) // 2 - 4) // 2) ** 2, 32), nn.ReLU(),
                                 nn.Linear(32, 6))
        with torch.no_grad():
            self.loc[-1].weight.zero_()
            self.loc[-1].bias.copy_(torch.tensor([1., 0, 0, 0, 1, 0]))
        c = (torch.arange(size) * 2 + 1) / size - 1
        ys, xs = torch.meshgrid(c, c, indexing='ij')
        self.register_buffer('base', torch.stack([xs, ys, torch.ones_like(xs)], -1).reshape(-1, 3))
        self.cls = nn.Sequential(nn.Conv2d(3, 10, 5), nn.MaxPool2d(2), nn.ReLU(), nn.Flatten(),
                                 nn.Linear(10 * ((size - 4) // 2) ** 2, classes))

    def forward(self, x):
        grid = (self.base.to(x.dtype) @ self.loc(x).view(-1, 2, 3).transpose(1, 2)).view(-1, self.size, self.size, 2)
        return self.cls(F.grid_sample(x, grid, align_corners=False))


class LrnNet(torch.nn.Module):
    """An AlexNet-style CNN with nn.LocalResponseNorm after its convolutions (as AlexNet and GoogLeNet v1 have them;
    alpha large enough to matter): torch exports LRN's padding of the channel axis from Constants through
    ConstantOfShape, Slice and Transpose, and its squeeze as an If on the padded shape."""

    def __init__(self, classes=10):
        super().__init__()
        nn = torch.nn
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.LocalResponseNorm(3, alpha=0.1),
                                      nn.MaxPool2d(2), nn.Conv2d(8, 12, 3, padding=1), nn.ReLU(),
                                      nn.LocalResponseNorm(4, alpha=0.2, beta=0.6, k=2.0))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(12, classes))

    def forward(self, x):
        return self.head(self.features(x))


class GlowStep(torch.nn.Module):
    """A Glow-style flow step as users write one: an invertible 1x1 convolution whose weight starts orthogonal with
    determinant +1, its log-determinant times the pixel count (torch.logdet, exported as Log(Det)) added to the
    logits as Glow adds it to the log-likelihood, then a small classifier head."""

    def __init__(self, size, c=3, classes=10):
        super().__init__()
        q, _ = torch.linalg.qr(torch.randn(c, c))
        if torch.det(q) < 0:
            q[0] = -q[0]
        self.w = torch.nn.Parameter(q + 0.1 * torch.randn(c, c))  # near, not at, orthogonal
        self.pixels = size * size
        self.head = torch.nn.Sequential(torch.nn.Conv2d(c, 8, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                                        torch.nn.Flatten(), torch.nn.Linear(8, classes))

    def forward(self, x):
        z = F.conv2d(x, self.w.view(self.w.shape[0], self.w.shape[1], 1, 1))
        return self.head(z) + 1e-3 * self.pixels * torch.logdet(self.w)


# The spatial transformers: GridSample's modes, paddings and corner conventions.
STN_MODELS = {
    'stn': dict(),
    'stn_bicubic_reflection': dict(mode='bicubic', padding_mode='reflection', align_corners=True),
    'stn_bilinear_reflection': dict(padding_mode='reflection'),
    'stn_bicubic_border': dict(mode='bicubic', padding_mode='border'),
    'stn_nearest_border': dict(mode='nearest', padding_mode='border', align_corners=True),
}

TEXT_MODELS = ('text', 'text_causal', 'bag')


def tokens(rng, batch, seq, vocab=50):
    """Token ids [batch, seq] of lengths from seq // 3 to seq (row 0 full, the last row the shortest), 0 after."""
    ids = rng.integers(1, vocab, size=(batch, seq)).astype(np.int64)
    for i in range(1, batch):
        ids[i, max(1, seq // 3 + (batch - 1 - i) * (seq - seq // 3) // batch):] = 0
    return ids


def build(name, size, batch):
    if name == 'roi_pool':
        return RoiPoolHead(size, batch)
    if name == 'bag':  # size: the sequence length
        return BagClassifier()
    if name in TEXT_MODELS:  # size: the sequence length
        return TextClassifier(size, causal=name == 'text_causal')
    if name == 'lstm':  # 2 layers, bidirectional, batch_first
        return RowSequence(torch.nn.LSTM, size)
    if name == 'gru':  # 2 layers, bidirectional, time first
        return RowSequence(torch.nn.GRU, size, batch_first=False)
    if name == 'rnn':  # 2 layers, bidirectional, batch_first, tanh
        return RowSequence(torch.nn.RNN, size)
    if name == 'rnn_relu1':  # 1 layer, one direction, time first, relu
        return RowSequence(functools.partial(torch.nn.RNN, nonlinearity='relu'), size, layers=1, bidirectional=False,
                           batch_first=False)
    if name == 'lstm1':  # 1 layer, one direction, time first
        return RowSequence(torch.nn.LSTM, size, layers=1, bidirectional=False, batch_first=False)
    if name == 'gru1':  # 1 layer, one direction, batch_first
        return RowSequence(torch.nn.GRU, size, layers=1, bidirectional=False)
    if name == 'upsampling':
        return UpsamplingNet()
    if name == 'pooling_heads':
        return PoolingHeads()
    if name == 'scripted_loops':
        return ScriptedLoops(size)
    if name == 'stn_tutorial':
        return TutorialSpatialTransformer(size)
    if name == 'attention':
        return AttentionReader(size)
    if name == 'unet':
        return UNet()
    if name == 'lrn':
        return LrnNet()
    if name == 'glow':
        return GlowStep(size)
    if name in STN_MODELS:
        return SpatialTransformer(size, **STN_MODELS[name])
    if name == 'vit':
        return VisionTransformer(image_size=size, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16,
                                 mlp_dim=32, num_classes=10)
    if name == 'convnext':
        return ConvNeXt([CNBlockConfig(8, 16, 1), CNBlockConfig(16, None, 1)], stochastic_depth_prob=0.0,
                        num_classes=10)
    if name == 'shufflenet':
        return torchvision.models.shufflenet_v2_x0_5(num_classes=10)
    return getattr(torchvision.models, name)(num_classes=10, **SMALL_INPUT_SETTINGS.get(name, lambda size: {})(size))


# What some builders need to export at a small input: the auxiliary heads off (they exist only in training mode and
# would be a second output), the ViT's position embedding sized to the image.
SMALL_INPUT_SETTINGS = {
    'googlenet': lambda size: dict(aux_logits=False, init_weights=True),
    'inception_v3': lambda size: dict(aux_logits=False, init_weights=True),
    **{vit: (lambda size: dict(image_size=size)) for vit in ('vit_b_16', 'vit_b_32', 'vit_l_16', 'vit_l_32', 'vit_h_14')},
}


def randomize(model, seed):
    """Zero-initialised weights (heads, class tokens) get small random values, so every gradient flows;
    Dropout and stochastic depth are off, so training-mode outputs are deterministic."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if torch.count_nonzero(p) == 0:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
        if hasattr(m, 'stochastic_depth_prob'):
            m.stochastic_depth_prob = 0.0
        if type(m).__name__ == 'StochasticDepth':
            m.p = 0.0


class ReluInputs(TorchFunctionMode):
    """Every ReLU call's input, in call order, taken before the call (so in-place ReLUs are seen too): nn.ReLU,
    F.relu and torch.relu alike. With reference (the float64 run's inputs), keeps instead each input's largest
    absolute difference from the reference's, so no float32 activation is held."""
    CALLS = {F.relu, F.relu_, torch.relu, torch.relu_, torch.Tensor.relu, torch.Tensor.relu_}

    def __init__(self, reference=None):
        super().__init__()
        self.reference, self.seen = reference, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in self.CALLS:
            x = args[0].detach().double()
            if self.reference is None:
                self.seen.append(x.clone())
            else:
                i = len(self.seen)
                ref = self.reference[i] if i < len(self.reference) else None
                self.seen.append((tuple(x.shape), float((x - ref).abs().max()) if ref is not None and
                                  ref.shape == x.shape else None))
        return func(*args, **kwargs)


def relu_inputs(onnx_path):
    """The export's Relu nodes' inputs in node order (a trace's order: torch's call order) with their shapes."""
    m = onnx.shape_inference.infer_shapes(onnx.load(onnx_path))
    shapes = {v.name: tuple(d.dim_value if d.HasField('dim_value') else None for d in v.type.tensor_type.shape.dim)
              for v in list(m.graph.value_info) + list(m.graph.input) if v.type.tensor_type.HasField('shape')}
    return [(n.input[0], shapes.get(n.input[0])) for n in m.graph.node if n.op_type == 'Relu']


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('model')
    ap.add_argument('out_dir')
    ap.add_argument('--opset', type=int, default=17)
    ap.add_argument('--size', type=int, default=32)
    ap.add_argument('--batch', type=int, default=2)
    ap.add_argument('--seed', type=int, default=1)
    ap.add_argument('--functions', action='store_true',
                    help="export every module as a model-local function (torch's export_modules_as_functions)")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    model = build(a.model, a.size, a.batch)
    randomize(model, a.seed)
    os.makedirs(a.out_dir, exist_ok=True)

    rng = np.random.default_rng(a.seed)
    if a.model in TEXT_MODELS:
        input_name, image = 'tokens', tokens(rng, a.batch, a.size)
    else:
        input_name, image = 'image', rng.standard_normal((a.batch, 3, a.size, a.size)).astype(np.float32)
    per_pixel = (a.size, a.size) if a.model == 'unet' else ()
    labels = rng.integers(0, 10, size=(a.batch,) + per_pixel).astype(np.int64)
    x = torch.from_numpy(image)
    x64 = x.double() if x.is_floating_point() else x
    common = dict(opset_version=a.opset, input_names=[input_name], output_names=['logits'], do_constant_folding=False,
                  export_modules_as_functions=a.functions)
    # Module-function exports each take a fresh copy: torch 1.13 leaves hooks on the model that fail the next export.
    fresh = (lambda: copy.deepcopy(model)) if a.functions else (lambda: model)
    model.train()
    torch.onnx.export(fresh(), x, os.path.join(a.out_dir, 'train.onnx'), training=torch.onnx.TrainingMode.TRAINING,
                      **common)
    model.eval()
    torch.onnx.export(fresh(), x, os.path.join(a.out_dir, 'eval.onnx'), **common)
    if a.functions:  # torch keeps its own output name there: named 'logits' as in the other exports
        for name in ('train.onnx', 'eval.onnx'):
            m = onnx.load(os.path.join(a.out_dir, name))
            old = m.graph.output[0].name
            assert m.functions, 'export_modules_as_functions wrote no function'
            for n in m.graph.node:
                n.output[:] = ['logits' if o == old else o for o in n.output]
            m.graph.output[0].name = 'logits'
            onnx.save(m, os.path.join(a.out_dir, name))

    model32 = copy.deepcopy(model)  # torch's own float32 error sets the tolerance of each gradient
    model = model.double()
    with torch.no_grad():
        np.save(os.path.join(a.out_dir, 'logits.npy'), model(x64).numpy().astype(np.float32))
    model.train()
    relus64 = ReluInputs()
    with relus64:
        train_logits = model(x64)
    np.save(os.path.join(a.out_dir, 'train_logits.npy'), train_logits.detach().numpy().astype(np.float32))
    loss = F.cross_entropy(train_logits, torch.from_numpy(labels))
    loss.backward()
    np.save(os.path.join(a.out_dir, input_name + '.npy'), image)
    np.save(os.path.join(a.out_dir, 'labels.npy'), labels)
    np.save(os.path.join(a.out_dir, 'loss.npy'), np.array(loss.item(), dtype=np.float32))
    names = []
    for pname, p in model.named_parameters():
        np.save(os.path.join(a.out_dir, pname + '.npy'), p.grad.numpy().astype(np.float32))
        names.append(pname)
    with open(os.path.join(a.out_dir, 'params.txt'), 'w') as f:
        f.write('\n'.join(names) + '\n')
    # The buffers the export keeps as float initializers (an STN's base grid; not BatchNorm's running statistics,
    # which graphrun knows as state): a user passes them to --freeze, and so does the test.
    exported_inits = {t.name for t in onnx.load(os.path.join(a.out_dir, 'train.onnx')).graph.initializer}
    with open(os.path.join(a.out_dir, 'buffers.txt'), 'w') as f:
        for bname, b in model.named_buffers():
            if b.is_floating_point() and bname in exported_inits and not bname.endswith(('running_mean', 'running_var')):
                f.write(bname + '\n')
    model32.train()
    relus32 = ReluInputs(reference=relus64.seen)
    with relus32:
        logits32 = model32(x)
    F.cross_entropy(logits32, torch.from_numpy(labels)).backward()
    g64 = {n: p.grad for n, p in model.named_parameters()}
    top = max(float(g.abs().max()) for g in g64.values())
    with open(os.path.join(a.out_dir, 'float32_errors.txt'), 'w') as f:
        for n, p in model32.named_parameters():
            scale = max(float(g64[n].abs().max()), 1e-3 * top)
            f.write(f'{n} {float((p.grad.double() - g64[n]).abs().max()) / scale:.6g}\n')
    # Torch float32's own error on each ReLU's input: the bound of the same-branch rule (bench/zoo_survey.py) on a
    # float32 pre-activation that lands on the other side of 0 than float64's. Paired with the export's Relu nodes by
    # order, every shape ONNX's shape inference knows checked; any mismatch and no file (the survey then holds flips
    # to its fixed bound).
    exported = relu_inputs(os.path.join(a.out_dir, 'train.onnx'))
    path = os.path.join(a.out_dir, 'relu_float32_errors.txt')
    if os.path.exists(path):
        os.remove(path)
    def same_shape(onnx_shape, torch_shape):  # dims shape inference could not give match any
        return onnx_shape is None or (len(onnx_shape) == len(torch_shape) and
                                      all(a is None or a == b for a, b in zip(onnx_shape, torch_shape)))
    if len(exported) == len(relus32.seen) and all(err is not None and same_shape(shape, torch_shape)
                                                  for (_, shape), (torch_shape, err) in zip(exported, relus32.seen)):
        with open(path, 'w') as f:
            for (name, _), (_, err) in zip(exported, relus32.seen):
                f.write(f'{name} {err:.6g}\n')
    else:
        print(f'zoo_parity: {len(relus32.seen)} ReLU calls in torch, {len(exported)} Relu nodes in the export, not '
              'paired one to one: no relu_float32_errors.txt')


if __name__ == '__main__':
    main()
