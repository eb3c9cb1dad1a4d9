"""Class-conditional image generators trained on D_G only: a DCGAN and a VAE.

Both work on uint8 ``(n, C, H, W)`` records of any small size (the networks work on a
``4 * ceil(H / 4)`` canvas and crop), sample labels i.i.d. from D_G's label distribution and
condition on them, so every synthetic record comes with a label (no separate labeler).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.panoramia.components import (
    GENERATORS,
    AuditContext,
    Records,
    TrainedGenerator,
)
from panoramia_fl.audit.panoramia.pairing import PairedDraw


def to_unit(x: np.ndarray) -> torch.Tensor:
    """uint8 images -> float in [-1, 1]."""
    return torch.as_tensor(np.asarray(x, dtype=np.float32) / 127.5 - 1.0)


def to_uint8(x: torch.Tensor) -> np.ndarray:
    """[-1, 1] floats -> uint8 images (the records' format)."""
    return np.clip(np.rint((x.detach().cpu().numpy() + 1.0) * 127.5), 0, 255).astype(np.uint8)


class _Decoder(nn.Module):
    """(noise, one-hot label) -> image on a 4*base canvas, cropped to (C, H, W)."""

    def __init__(
        self, latent: int, num_classes: int, shape: tuple[int, int, int], width: int = 64
    ) -> None:
        super().__init__()
        self.shape = shape
        self.base = math.ceil(max(shape[1], shape[2]) / 4)
        self.fc = nn.Sequential(
            nn.Linear(latent + num_classes, 2 * width * self.base**2),
            nn.BatchNorm1d(2 * width * self.base**2),
            nn.ReLU(),
        )
        self.width = width
        self.up = nn.Sequential(
            nn.ConvTranspose2d(2 * width, width, 4, 2, 1),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.ConvTranspose2d(width, shape[0], 4, 2, 1),
            nn.Tanh(),
        )

    def forward(self, z: torch.Tensor, y_hot: torch.Tensor) -> torch.Tensor:
        h = self.fc(torch.cat([z, y_hot], 1)).view(-1, 2 * self.width, self.base, self.base)
        out = self.up(h)
        return out[:, :, : self.shape[1], : self.shape[2]]


class _Encoder(nn.Module):
    """(image, label maps) -> flat features; used by the discriminator and the VAE."""

    def __init__(
        self, shape: tuple[int, int, int], num_classes: int, width: int = 64, norm: bool = False
    ) -> None:
        super().__init__()
        side = 4 * math.ceil(max(shape[1], shape[2]) / 4)
        self.pad = (0, side - shape[2], 0, side - shape[1])
        self.net = nn.Sequential(
            nn.Conv2d(shape[0] + num_classes, width, 4, 2, 1),
            nn.LeakyReLU(0.2),
            nn.Conv2d(width, 2 * width, 4, 2, 1),
            nn.BatchNorm2d(2 * width) if norm else nn.Identity(),
            nn.LeakyReLU(0.2),
            nn.Flatten(),
        )
        self.out_dim = 2 * width * (side // 4) ** 2

    def forward(self, x: torch.Tensor, y_hot: torch.Tensor) -> torch.Tensor:
        x = F.pad(x, self.pad)
        maps = y_hot[:, :, None, None].expand(-1, -1, x.shape[2], x.shape[3])
        return self.net(torch.cat([x, maps], 1))


class _ConditionalImageGenerator(TrainedGenerator):
    """Shared plumbing: label distribution, batching, sampling."""

    kind = "base"

    def __init__(self, config: AuditConfig, context: AuditContext) -> None:
        g = config.generator
        self.epochs = g.epochs
        self.batch_size = g.batch_size
        self.lr = g.learning_rate
        self.latent = g.latent_dim
        self.num_classes = max(1, context.task.num_classes)
        self.device = context.device
        self.decoder: _Decoder | None = None
        self.label_p: np.ndarray | None = None

    def _prepare(self, d_g: Records) -> tuple[torch.Tensor, torch.Tensor]:
        if d_g.x.ndim != 4:
            raise ValueError(f"image generator needs (n, C, H, W) records, got {d_g.x.shape}")
        if len(d_g) < 2:
            raise ValueError(f"image generator needs at least 2 records in D_G, got {len(d_g)}")
        y = np.zeros(len(d_g), dtype=np.int64) if d_g.y is None else d_g.y.astype(np.int64)
        counts = np.bincount(y, minlength=self.num_classes).astype(float)
        self.label_p = counts / counts.sum()
        _, c, h, w = d_g.x.shape
        self.shape = (int(c), int(h), int(w))
        return to_unit(d_g.x), torch.as_tensor(y)

    def _hot(self, y: torch.Tensor) -> torch.Tensor:
        return F.one_hot(y, self.num_classes).float()

    def _batches(
        self, x: torch.Tensor, y: torch.Tensor, shuffle: torch.Generator
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """Every epoch's shuffled batches of images and one-hot labels; a batch of one record
        is skipped (batch statistics need two)."""
        for _ in range(self.epochs):
            order = torch.randperm(len(x), generator=shuffle).to(self.device)
            for idx in order.split(self.batch_size):
                if len(idx) >= 2:
                    yield x[idx], self._hot(y[idx])

    def sample(self, n: int, *, seed: int) -> Records:
        if self.label_p is None:
            raise RuntimeError(f"{self.kind} generator: sample called before fit")
        rng = np.random.default_rng([seed, 0x5A3])
        y = rng.choice(self.num_classes, size=n, p=self.label_p).astype(np.int64)
        return Records(self._decode(y, rng), y)

    def sample_labels(self, labels: np.ndarray, *, seed: int) -> PairedDraw:
        """A sample conditioned on each slot's label (label pairing)."""
        y = np.asarray(labels, dtype=np.int64)
        x = self._decode(y, np.random.default_rng([seed, 0x5A4]))
        return PairedDraw(Records(x, y), np.arange(len(y)))

    @torch.no_grad()
    def _decode(self, y: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        if self.decoder is None:
            raise RuntimeError(f"{self.kind} generator: sample called before fit")
        gen = torch.Generator().manual_seed(int(rng.integers(2**31)))
        self.decoder.eval()
        out = []
        for i in range(0, len(y), 512):
            yb = torch.as_tensor(y[i : i + 512])
            z = torch.randn(len(yb), self.latent, generator=gen)
            out.append(to_uint8(self.decoder(z.to(self.device), self._hot(yb).to(self.device))))
        return np.concatenate(out) if out else np.zeros((0, *self.shape), np.uint8)


class ConditionalGan(_ConditionalImageGenerator):
    """Class-conditional DCGAN (non-saturating loss, label maps into the discriminator)."""

    kind = "cgan"

    def fit(self, d_g: Records, *, seed: int) -> dict[str, float]:
        torch.manual_seed(seed)
        # On the device once per fit: no batch is copied from the host. Noise is still drawn
        # on the host, from the seeded generator, so every device sees the same draws.
        x, y = (t.to(self.device) for t in self._prepare(d_g))
        gen_net = _Decoder(self.latent, self.num_classes, self.shape).to(self.device)
        disc_body = _Encoder(self.shape, self.num_classes).to(self.device)
        disc_head = nn.Linear(disc_body.out_dim, 1).to(self.device)
        disc_params = list(disc_body.parameters()) + list(disc_head.parameters())
        opt_g = torch.optim.Adam(gen_net.parameters(), lr=self.lr, betas=(0.5, 0.999))
        opt_d = torch.optim.Adam(disc_params, lr=self.lr, betas=(0.5, 0.999))
        shuffle = torch.Generator().manual_seed(seed)
        g_losses, d_losses = [], []
        start = time.perf_counter()
        for real, hot in self._batches(x, y, shuffle):
            z = torch.randn(len(real), self.latent, generator=shuffle).to(self.device)
            fake = gen_net(z, hot)
            # Discriminator: real -> 1 (one-sided smoothing 0.9), fake -> 0.
            d_real = disc_head(disc_body(real, hot)).squeeze(1)
            d_fake = disc_head(disc_body(fake.detach(), hot)).squeeze(1)
            d_loss = F.binary_cross_entropy_with_logits(
                d_real, torch.full_like(d_real, 0.9)
            ) + F.binary_cross_entropy_with_logits(d_fake, torch.zeros_like(d_fake))
            opt_d.zero_grad(set_to_none=True)
            d_loss.backward()
            opt_d.step()
            g_out = disc_head(disc_body(fake, hot)).squeeze(1)
            g_loss = F.binary_cross_entropy_with_logits(g_out, torch.ones_like(g_out))
            opt_g.zero_grad(set_to_none=True)
            g_loss.backward()
            opt_g.step()
            # Read once the fit ends: a float() here would wait for the device every step.
            g_losses.append(g_loss.detach())
            d_losses.append(d_loss.detach())
        self.decoder = gen_net
        return {
            "generator_loss": _tail_mean(g_losses),
            "discriminator_loss": _tail_mean(d_losses),
            "generator_epochs": float(self.epochs),
            "generator_fit_s": time.perf_counter() - start,
        }


class ConditionalVae(_ConditionalImageGenerator):
    """Class-conditional VAE; samples are the decoder's mean (the records are uint8)."""

    kind = "vae"

    def fit(self, d_g: Records, *, seed: int) -> dict[str, float]:
        torch.manual_seed(seed)
        # On the device once per fit: no batch is copied from the host. Noise is still drawn
        # on the host, from the seeded generator, so every device sees the same draws.
        x, y = (t.to(self.device) for t in self._prepare(d_g))
        latent = self.latent
        dec = _Decoder(latent, self.num_classes, self.shape).to(self.device)
        enc = _Encoder(self.shape, self.num_classes, norm=True).to(self.device)
        head = nn.Linear(enc.out_dim, 2 * latent).to(self.device)
        params = list(dec.parameters()) + list(enc.parameters()) + list(head.parameters())
        opt = torch.optim.Adam(params, lr=max(self.lr, 1e-3))
        shuffle = torch.Generator().manual_seed(seed)
        losses = []
        start = time.perf_counter()
        for real, hot in self._batches(x, y, shuffle):
            mu, logvar = head(enc(real, hot)).chunk(2, dim=1)
            eps = torch.randn(mu.shape, generator=shuffle).to(self.device)
            recon = dec(mu + eps * torch.exp(0.5 * logvar), hot)
            # Pixels in [0, 1] under a Bernoulli likelihood, summed per image.
            rec = F.binary_cross_entropy((recon + 1) / 2, (real + 1) / 2, reduction="sum") / len(
                real
            )
            kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / len(real)
            loss = rec + kl
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        self.decoder = dec
        return {
            "generator_loss": _tail_mean(losses, scale=float(np.prod(self.shape))),
            "generator_epochs": float(self.epochs),
            "generator_fit_s": time.perf_counter() - start,
        }


def _tail_mean(losses: list[torch.Tensor], *, scale: float = 1.0) -> float:
    """The mean of the last tenth of a fit's step losses (each divided by ``scale``)."""
    if not losses:
        return float("nan")
    tail = losses[-max(1, len(losses) // 10) :]
    return float(np.mean([float(t) / scale for t in tail]))


def _with_filter(gen: _ConditionalImageGenerator, config: AuditConfig, context: AuditContext):
    if not config.generator.filter:
        return gen
    from panoramia_fl.audit.image.filter import FilteredGenerator

    return FilteredGenerator(gen, config, context)


@GENERATORS.register("cgan", modality="image")
def make_cgan(config: AuditConfig, context: AuditContext):
    return _with_filter(ConditionalGan(config, context), config, context)


@GENERATORS.register("vae", modality="image")
def make_vae(config: AuditConfig, context: AuditContext):
    return _with_filter(ConditionalVae(config, context), config, context)
