"""Image models: the convolutions before the first fully connected layer set so that the
image reaches it as whole as the architecture allows, and the way back.

The project's small CNN is two blocks of (3x3 convolution, norm, ReLU, 2x2 max-pool) before
its head. Max-pooling keeps one value of four, so no choice of weights gives the head the
image itself. What it can be given is the **4x4 maximum filter** of the image at full
resolution: every convolution copies one channel of the block before it shifted by 0 or 1
(an identity kernel moved off centre), every norm layer shifts its output positive so the
ReLU passes it, and the channels of the last block carry the 16 shifts of the 4x4 window
(offsets ``2 d2 + d1``). Back from the head's input, the image is the smallest one with
that maximum filter (an erosion of it, i.e. the morphological closing of the image with a
4x4 square): exact where the image has no dark detail narrower than 4 pixels, brighter
where it has. A model with too few channels for every shift gets fewer (down to one, the
7x7 max-pooled image). Batch-norm in training mode rescales by the batch's statistics: the
affine map back is fitted on public images, so it holds up to the batch. Colour images come
back as their first channel.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F

from panoramia_fl.audit.adversary.layers import AdversaryUnsupported, features

__all__ = ["PassThrough", "pass_through"]

_NORMS = (nn.BatchNorm2d, nn.GroupNorm)
_PASSED = (nn.Conv2d, *_NORMS, nn.ReLU, nn.MaxPool2d, nn.Flatten, nn.Sequential)
POSITIVE_SHIFT = 8.0
"""What each norm layer adds so that standardised pixels stay positive through the ReLU."""


Moves = tuple[tuple[int, int], ...]
"""A channel's shift (down, right: 0 or 1) at each block."""


def _window_maxima(images: torch.Tensor, moves: Moves) -> torch.Tensor:
    """What a channel with these shifts carries, in the image's units: each block reads its
    input shifted, then max-pools it 2x2. The first convolution's zero padding is 0 in the
    image's units; a later one's lies below every value (the maps are shifted positive) and
    never wins a maximum."""
    x = images[:, :1].float()
    for level, (dy, dx) in enumerate(moves):
        pad = 0.0 if level == 0 else -float("inf")
        x = F.max_pool2d(F.pad(x, (0, dx, 0, dy), value=pad)[..., dy:, dx:], 2)
    return x


def _erode(dilated: torch.Tensor, factor: int) -> torch.Tensor:
    """The smallest image with this maximum filter: each pixel the least of the windows
    holding it."""
    padded = F.pad(-dilated, (factor - 1, 0, factor - 1, 0), value=-float("inf"))
    return -F.max_pool2d(padded, factor, stride=1)


@dataclass(frozen=True)
class PassThrough:
    """How an image reaches the first linear layer of a crafted image model, and back."""

    factor: int
    """Input pixels per side of one feature of a channel (4 for the small CNN)."""
    moves: tuple[Moves, ...]
    """Per channel the head reads: its shift at each block."""
    scales: tuple[float, ...]
    shifts: tuple[float, ...]
    """Per channel: the head reads ``scale * window maximum + shift`` (fitted on public)."""

    @property
    def offsets(self) -> tuple[tuple[int, int], ...]:
        """Per channel: the offset of its window maxima (pixels, 0..factor-1)."""
        return tuple(
            (
                sum(2**level * dy for level, (dy, _) in enumerate(moves)),
                sum(2**level * dx for level, (_, dx) in enumerate(moves)),
            )
            for moves in self.moves
        )

    @property
    def full(self) -> bool:
        """Every offset carried: the maximum filter comes back at full resolution."""
        return len(set(self.offsets)) == self.factor**2

    def to_image(self, rows: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        """Head inputs ``(n, C*h*w)`` back to images ``(n, *shape)`` in [-1, 1]."""
        n, (height, width) = len(rows), shape[-2:]
        maps = rows.reshape(n, len(self.offsets), height // self.factor, width // self.factor)
        scales = torch.tensor(self.scales, dtype=maps.dtype)[None, :, None, None]
        shifts = torch.tensor(self.shifts, dtype=maps.dtype)[None, :, None, None]
        maxima = (maps - shifts) / scales
        if not self.full:
            # The (0, 0) windows alone: each block's maximum, repeated over the block.
            block = maxima[:, [i for i, o in enumerate(self.offsets) if o == (0, 0)]]
            image = block.mean(dim=1, keepdim=True)
            image = image.repeat_interleave(self.factor, 2).repeat_interleave(self.factor, 3)
        else:
            dilated = torch.zeros(n, 1, height, width, dtype=maps.dtype)
            for oy, ox in set(self.offsets):
                chosen = [i for i, o in enumerate(self.offsets) if o == (oy, ox)]
                dilated[:, 0, oy :: self.factor, ox :: self.factor] = maxima[:, chosen].mean(1)
            image = _erode(dilated, self.factor)
        return image.expand(-1, shape[0], -1, -1).clamp(-1.0, 1.0)

    def comes_back(self, images: torch.Tensor) -> torch.Tensor:
        """What the architecture lets through of ``images``: the closing with the window
        (or, without every offset, each block's maximum): the best any rebuild can do."""
        n, (height, width) = len(images), images.shape[-2:]
        if not self.full:
            back = _window_maxima(images, ((0, 0),) * len(self.moves[0]))
            back = back.repeat_interleave(self.factor, 2).repeat_interleave(self.factor, 3)
        else:
            dilated = torch.zeros(n, 1, height, width)
            for moves, (oy, ox) in dict(zip(self.moves, self.offsets, strict=True)).items():
                dilated[:, :, oy :: self.factor, ox :: self.factor] = _window_maxima(images, moves)
            back = _erode(dilated, self.factor)
        return back.expand(-1, images.shape[1], -1, -1)


def _before(model: nn.Module, first: nn.Linear) -> list[nn.Module]:
    before: list[nn.Module] = []
    for module in model.modules():
        if module is first:
            break
        if module is not model:
            before.append(module)
    return before


def _set_shifts(convs: list[nn.Conv2d]) -> list[Moves]:
    """Write each convolution's shifted identity kernels; the shifts of the last one's
    channels. Channel ``c`` of block ``l`` copies channel ``c mod m`` of the block before
    (``m`` its distinct channels) shifted by ``d = divmod((c // m) mod 4, 2)`` (0 or 1 per
    axis; none for a kernel without room to shift), so its window moves ``2**l * d``."""
    moves: list[Moves] = [()]
    distinct = 1  # the first `distinct` channels' shifts differ
    for conv in convs:
        kh, kw = conv.kernel_size
        room = kh >= 3 and kw >= 3 and conv.padding in ((1, 1), 1)
        new: list[Moves] = []
        for c in range(conv.out_channels):
            source = c % distinct
            dy, dx = divmod((c // distinct) % 4, 2) if room else (0, 0)
            conv.weight[c, source % conv.in_channels, kh // 2 + dy, kw // 2 + dx] = 1.0
            new.append((*moves[source], (dy, dx)))
        moves, distinct = new, min(conv.out_channels, distinct * (4 if room else 1))
    return moves


def pass_through(model: nn.Module, first: nn.Linear, public: torch.Tensor) -> PassThrough | None:
    """Set every layer before ``first`` so that the image reaches it (module docstring);
    ``None`` when ``first`` reads the record itself (the MLP). Raises
    :class:`AdversaryUnsupported` for a layer it cannot set (e.g. a residual block)."""
    before = _before(model, first)
    convs = [m for m in before if isinstance(m, nn.Conv2d)]
    if not convs:
        return None
    for module in before:
        if not isinstance(module, _PASSED):
            raise AdversaryUnsupported(
                f"{type(model).__name__}: cannot make {type(module).__name__} pass the image "
                "through (convolutions, norms, ReLU and max-pooling only)"
            )
    with torch.no_grad():
        for module in before:
            if isinstance(module, nn.Conv2d):
                module.weight.zero_()
                if module.bias is not None:
                    module.bias.zero_()
            elif isinstance(module, _NORMS) and module.weight is not None:
                module.weight.fill_(1.0)
                module.bias.fill_(POSITIVE_SHIFT)
        moves = _set_shifts(convs)
    factor = 2 ** sum(isinstance(m, nn.MaxPool2d) for m in before)
    sees = features(model, first, public.float())
    side = public.shape[-1] // factor
    maps = sees.reshape(len(public), len(moves), side, side)
    scales, shifts = [], []
    for channel, channel_moves in enumerate(moves):
        truth = _window_maxima(public, channel_moves).flatten().double()
        seen = maps[:, channel].flatten().double()
        # Least squares of what the head reads on the window maxima: batch-norm's map.
        design = torch.stack([truth, torch.ones_like(truth)], dim=1)
        solution = torch.linalg.lstsq(design, seen[:, None]).solution
        scales.append(float(solution[0, 0]))
        shifts.append(float(solution[1, 0]))
    return PassThrough(
        factor=factor, moves=tuple(moves), scales=tuple(scales), shifts=tuple(shifts)
    )
