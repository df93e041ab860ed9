#!/usr/bin/env python3
"""Writes a variational autoencoder of 28x28 images that computes its own loss, as PyTorch's VAE example does.

    /usr/bin/python3 tests/vae_model.py OUT_DIR [--hidden H] [--latent Z] [--seed S]

OUT_DIR/vae.onnx: forward(image f32[N,1,28,28]) -> loss f32[], the negative ELBO per example, averaged over the
batch: binary cross-entropy of the decoder's logits against the pixels (summed over the pixels) plus the KL
divergence of the encoder's Gaussian from N(0, 1); the latent is drawn by the reparameterisation trick
(torch.randn_like: RandomNormalLike in the export). Random weights (torch.manual_seed), opset 17.

    graphrun train OUT_DIR/vae.onnx --loss output --optimizer adam --lr 1e-3 --batch-size 128 --epochs 5

trains it on Fashion-MNIST (the model's one input takes the images; the labels are not read).
OUT_DIR/vae_module.pt holds the module's initial state, for a PyTorch run from the same weights
(bench/bench_vae.py).
"""
import argparse
import os

import torch
import torch.nn as nn
import torch.nn.functional as F


class VAE(nn.Module):
    def __init__(self, hidden=256, latent=16):
        super().__init__()
        self.enc = nn.Sequential(nn.Flatten(), nn.Linear(784, hidden), nn.ReLU())
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        self.dec = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, 784))

    def forward(self, image):
        h = self.enc(image)
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.exp(0.5 * logvar) * torch.randn_like(mu)
        logits = self.dec(z)
        n = image.shape[0]
        # F.binary_cross_entropy_with_logits(logits, x, reduction="sum"), written as softplus(l) - l x: torch 1.13
        # exports the former as Log(Sigmoid(l)), which is -inf where the sigmoid underflows (logits below -104).
        recon = torch.sum(F.softplus(logits) - logits * image.flatten(1)) / n
        kl = -0.5 * torch.sum(1 + logvar - mu * mu - torch.exp(logvar)) / n
        return recon + kl


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--latent", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(a.seed)
    m = VAE(a.hidden, a.latent)
    torch.save(m.state_dict(), os.path.join(a.out, "vae_module.pt"))
    torch.onnx.export(m, (torch.rand(2, 1, 28, 28),), os.path.join(a.out, "vae.onnx"), input_names=["image"],
                      output_names=["loss"], dynamic_axes={"image": {0: "N"}}, opset_version=17)


if __name__ == "__main__":
    main()
