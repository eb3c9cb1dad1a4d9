"""Tabular classifiers: the paper's MLP (hidden layers 150-100-50-10, Appendix C.3).

No normalisation layers at all, so the same module works with and without Opacus DP-SGD
(``dp`` is accepted for the registry's uniform signature and changes nothing).
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from panoramia_fl.ml.models import MODELS

PAPER_HIDDEN = (150, 100, 50, 10)


class MLP(nn.Module):
    """Fully connected ReLU network on encoded feature vectors of width ``in_features``."""

    def __init__(
        self, *, in_features: int, num_classes: int, hidden: Sequence[int], dropout: float = 0.0
    ) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        width = in_features
        for size in hidden:
            layers += [nn.Linear(width, size), nn.ReLU()]
            if dropout > 0:
                layers.append(nn.Dropout(dropout))
            width = size
        layers.append(nn.Linear(width, num_classes))
        self.net = nn.Sequential(*layers)

    def forward(self, x):  # noqa: ANN001, ANN201 - torch convention
        return self.net(x)


@MODELS.register("mlp", modality="tabular")
def mlp(
    *,
    num_classes: int,
    dp: bool,
    input_shape: tuple[int, ...],
    hidden: Sequence[int] = PAPER_HIDDEN,
    dropout: float = 0.0,
) -> nn.Module:
    """MLP on ``input_shape = (d,)`` encoded features.

    Parameters
    ----------
    hidden
        Hidden layer widths (``model.options.hidden``); the paper's 150-100-50-10 by default.
    dropout
        Dropout after each hidden layer (0 = none, as in the paper).
    """
    del dp  # no BatchNorm to swap: the MLP is DP-compatible as is
    if len(input_shape) != 1:
        raise ValueError(f"model.name=mlp needs flat records, got input_shape={input_shape}")
    if not hidden or any(int(h) < 1 for h in hidden):
        raise ValueError(f"model.options.hidden: positive layer widths expected, got {hidden}")
    return MLP(
        in_features=int(input_shape[0]),
        num_classes=num_classes,
        hidden=[int(h) for h in hidden],
        dropout=float(dropout),
    )
