"""Baseline b and MIA for images: one design, the two differ only in h vs f features.

Two designs (``classifier.design``), both selected on the validation split by the lower
bound there (``select_by``), ties broken by the validation AUC:

``gbm``
    Histogram gradient boosting on the confidence features of h or f (plus h's as a
    difficulty reference for the MIA) and the label, with or without average-pooled pixels;
    the feature set, boosting rounds and learning rate are selected, and so may be a single
    confidence statistic used directly as the score (a threshold attack).
``stacked``
    The paper's design: an image module (small CNN on the pixels and the label, epochs
    selected) and a loss module (gradient boosting on the confidence features only), whose
    validation scores are stacked by a logistic regression fitted on the validation split.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

import numpy as np
import torch
from sklearn.ensemble import HistGradientBoostingClassifier
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits
from torch import nn

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.image.features import loss_matrix, loss_matrix_names, one_hot, pooled_pixels
from panoramia_fl.audit.panoramia.components import (
    CLASSIFIERS,
    AuditContext,
    ClassifierData,
    SelectionScore,
)
from panoramia_fl.audit.stats.roc import auc

Param = int | float | str
"""A selected hyper-parameter or choice (rounds, learning rate, feature set, column...)."""


@dataclass(order=True)
class _Candidate:
    """A selectable model: compared by (validation bound, validation AUC)."""

    bound: float
    auc: float
    params: dict[str, Param] = field(compare=False)
    state: object = field(compare=False, default=None)


def _threads() -> int:
    return max(1, torch.get_num_threads())


# --------------------------------------------------------------------------------------
# Gradient boosting with staged selection
# --------------------------------------------------------------------------------------


class _StagedGbm:
    """Gradient boosting whose number of rounds is chosen after fitting (staged scores)."""

    def __init__(
        self, *, iterations: list[int], learning_rates: list[float], max_leaf_nodes: int
    ) -> None:
        self.iterations = sorted(set(iterations))
        self.learning_rates = list(learning_rates)
        self.max_leaf_nodes = max_leaf_nodes
        self.model: HistGradientBoostingClassifier | None = None
        self.rounds = 0

    def fit(
        self,
        x_tr: np.ndarray,
        s_tr: np.ndarray,
        x_va: np.ndarray,
        s_va: np.ndarray,
        *,
        select_by: SelectionScore,
        seed: int,
    ) -> _Candidate:
        best: _Candidate | None = None
        with threadpool_limits(limits=_threads()):
            for lr in self.learning_rates:
                model = HistGradientBoostingClassifier(
                    learning_rate=lr,
                    max_iter=self.iterations[-1],
                    max_leaf_nodes=self.max_leaf_nodes,
                    early_stopping=False,
                    l2_regularization=1.0,
                    random_state=seed,
                )
                model.fit(x_tr, s_tr)
                for stage, dec in enumerate(model.staged_decision_function(x_va), start=1):
                    if stage not in self.iterations:
                        continue
                    cand = _Candidate(
                        float(select_by(dec, s_va)),
                        auc(dec, s_va),
                        {"learning_rate": lr, "rounds": stage},
                        model,
                    )
                    if best is None or cand > best:
                        best = cand
        assert best is not None
        self.model = best.state
        self.rounds = int(best.params["rounds"])
        best.state = None
        return best

    def score(self, x: np.ndarray) -> np.ndarray:
        if self.model is None:
            raise RuntimeError("score called before fit")
        with threadpool_limits(limits=_threads()):
            out = None
            for stage, dec in enumerate(self.model.staged_decision_function(x), start=1):
                out = dec
                if stage == self.rounds:
                    break
        return np.asarray(out, dtype=np.float64)


class GbmMembershipClassifier:
    """``design = "gbm"``: boosting on the loss features, the label and pooled pixels.

    The candidates selected on validation are boosting models on each of
    ``classifier.feature_sets`` (``"loss"``: confidence statistics and label only;
    ``"loss+pixels"``: plus pooled pixels) over the round / learning-rate grid and, with
    ``classifier.single_statistics``, every single confidence statistic used directly as the
    score (its sign fixed on the training split), i.e. the classic threshold attacks.
    """

    def __init__(self, config: AuditConfig, context: AuditContext) -> None:
        cc = config.classifier
        self.cc = cc
        self.num_classes = context.task.num_classes
        # Quick mode: fewer rounds and coarser pixels (boosting cost grows with both).
        self.pixel_side = min(cc.pixel_side, 7) if config.quick else cc.pixel_side
        self.iterations = sorted(cc.gbm_iterations)[:3] if config.quick else cc.gbm_iterations
        self.choice: dict[str, Param] = {}
        self.model: _StagedGbm | None = None

    def _blocks(self, data: ClassifierData) -> tuple[np.ndarray, np.ndarray]:
        return _loss_x(data, self.num_classes), pooled_pixels(data.records.x, self.pixel_side)

    def _x(self, blocks: tuple[np.ndarray, np.ndarray], feature_set: str) -> np.ndarray:
        return blocks[0] if feature_set == "loss" else np.column_stack(blocks)

    def fit(
        self, train: ClassifierData, val: ClassifierData, *, select_by: SelectionScore, seed: int
    ) -> dict[str, object]:
        b_tr, b_va = self._blocks(train), self._blocks(val)
        s_tr, s_va = train.membership, val.membership
        best: _Candidate | None = None
        for feature_set in self.cc.feature_sets:
            gbm = _StagedGbm(
                iterations=self.iterations,
                learning_rates=self.cc.gbm_learning_rates,
                max_leaf_nodes=self.cc.gbm_max_leaf_nodes,
            )
            cand = gbm.fit(
                self._x(b_tr, feature_set),
                s_tr,
                self._x(b_va, feature_set),
                s_va,
                select_by=select_by,
                seed=seed,
            )
            cand.params = {"features": feature_set, **cand.params}
            cand.state = gbm
            if best is None or cand > best:
                best = cand
        if self.cc.single_statistics:
            names = loss_matrix_names(train)
            for j, name in enumerate(names):
                sign = 1.0 if auc(b_tr[0][:, j], s_tr) >= 0.5 else -1.0
                dec = sign * b_va[0][:, j]
                cand = _Candidate(
                    float(select_by(dec, s_va)),
                    auc(dec, s_va),
                    {"statistic": name, "column": j, "sign": sign},
                )
                if best is None or cand > best:
                    best = cand
        assert best is not None
        self.model = best.state if isinstance(best.state, _StagedGbm) else None
        self.choice = dict(best.params)
        return {"design": "gbm", **best.params, "val_bound": best.bound, "val_auc": best.auc}

    def score(self, data: ClassifierData) -> np.ndarray:
        if not self.choice:
            raise RuntimeError("score called before fit")
        blocks = self._blocks(data)
        if self.model is None:
            column, sign = int(self.choice["column"]), float(self.choice["sign"])
            return sign * blocks[0][:, column]
        return self.model.score(self._x(blocks, str(self.choice["features"])))


# --------------------------------------------------------------------------------------
# Stacked: CNN image module + boosting loss module + logistic regression
# --------------------------------------------------------------------------------------


class _ImageModule(nn.Module):
    """Small CNN on the image and its label; global pooling keeps it size-agnostic."""

    def __init__(self, channels: int, num_classes: int, width: int = 32) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(channels, width, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1),
            nn.ReLU(),
            nn.MaxPool2d(2, ceil_mode=True),
            nn.Conv2d(width, 2 * width, 3, padding=1),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
            nn.Flatten(),
        )
        self.head = nn.Sequential(
            nn.Linear(8 * width + num_classes, 64), nn.ReLU(), nn.Linear(64, 1)
        )

    def forward(self, x: torch.Tensor, y_hot: torch.Tensor) -> torch.Tensor:
        return self.head(torch.cat([self.body(x), y_hot], dim=1)).squeeze(1)


def _image_tensors(data: ClassifierData, num_classes: int) -> tuple[torch.Tensor, torch.Tensor]:
    x = torch.as_tensor(np.asarray(data.records.x, dtype=np.float32) / 127.5 - 1.0)
    hot = one_hot(data.records.y, num_classes)
    if hot.size == 0:
        hot = np.zeros((len(x), num_classes), dtype=np.float32)
    return x, torch.as_tensor(hot, dtype=torch.float32)


class StackedMembershipClassifier:
    """``design = "stacked"``: see the module docstring."""

    def __init__(self, config: AuditConfig, context: AuditContext) -> None:
        cc = config.classifier
        self.cc = cc
        self.device = context.device
        self.num_classes = context.task.num_classes
        epochs = sorted(set(cc.epochs))
        self.epochs = epochs[:1] if config.quick else epochs
        iters = sorted(cc.gbm_iterations)[:3] if config.quick else cc.gbm_iterations
        self.loss_module = _StagedGbm(
            iterations=iters,
            learning_rates=cc.gbm_learning_rates,
            max_leaf_nodes=cc.gbm_max_leaf_nodes,
        )
        self.image_module: _ImageModule | None = None
        self.stacker: LogisticRegression | None = None

    @torch.no_grad()
    def _image_scores(self, data: ClassifierData, module: _ImageModule | None = None) -> np.ndarray:
        module = module or self.image_module
        assert module is not None
        module.eval()
        x, hot = (t.to(self.device) for t in _image_tensors(data, self.num_classes))
        out = [module(x[i : i + 512], hot[i : i + 512]).cpu() for i in range(0, len(x), 512)]
        return torch.cat(out).double().numpy()

    def _fit_image_module(
        self, train: ClassifierData, val: ClassifierData, select_by: SelectionScore, seed: int
    ) -> _Candidate:
        torch.manual_seed(seed)
        # On the device once per fit: no batch is copied from the host.
        x, hot = (t.to(self.device) for t in _image_tensors(train, self.num_classes))
        target = torch.as_tensor(train.membership, dtype=torch.float32).to(self.device)
        module = _ImageModule(x.shape[1], self.num_classes).to(self.device)
        opt = torch.optim.Adam(
            module.parameters(), lr=self.cc.learning_rate, weight_decay=self.cc.weight_decay
        )
        gen = torch.Generator().manual_seed(seed)
        loss_fn = nn.BCEWithLogitsLoss()
        best: _Candidate | None = None
        for epoch in range(1, self.epochs[-1] + 1):
            module.train()
            # The order is drawn on the host (the same batches on every device).
            order = torch.randperm(len(x), generator=gen).to(self.device)
            for idx in order.split(self.cc.batch_size):
                opt.zero_grad(set_to_none=True)
                logits = module(x[idx], hot[idx])
                loss_fn(logits, target[idx]).backward()
                opt.step()
            if epoch in self.epochs:
                dec = self._image_scores(val, module)
                cand = _Candidate(
                    float(select_by(dec, val.membership)),
                    auc(dec, val.membership),
                    {"image_epochs": epoch},
                    copy.deepcopy(module.state_dict()),
                )
                if best is None or cand > best:
                    best = cand
        assert best is not None and isinstance(best.state, dict)
        module.load_state_dict(best.state)
        self.image_module = module
        return best

    def fit(
        self, train: ClassifierData, val: ClassifierData, *, select_by: SelectionScore, seed: int
    ) -> dict[str, object]:
        img = self._fit_image_module(train, val, select_by, seed)
        lm = self.loss_module.fit(
            _loss_x(train, self.num_classes),
            train.membership,
            _loss_x(val, self.num_classes),
            val.membership,
            select_by=select_by,
            seed=seed,
        )
        # The stacker is fitted on validation scores: the modules never trained on them.
        z_val = self._module_scores(val)
        self.stacker = LogisticRegression(C=1.0).fit(z_val, val.membership)
        stacked = self.stacker.decision_function(z_val)
        return {
            "design": "stacked",
            **img.params,
            **{f"loss_{k}": v for k, v in lm.params.items()},
            "image_val_bound": img.bound,
            "loss_val_bound": lm.bound,
            "val_bound": float(select_by(stacked, val.membership)),
            "val_auc": auc(stacked, val.membership),
            "stack_weights": [float(w) for w in self.stacker.coef_.ravel()],
        }

    def _module_scores(self, data: ClassifierData) -> np.ndarray:
        return np.column_stack(
            [self._image_scores(data), self.loss_module.score(_loss_x(data, self.num_classes))]
        )

    def score(self, data: ClassifierData) -> np.ndarray:
        if self.stacker is None:
            raise RuntimeError("score called before fit")
        return self.stacker.decision_function(self._module_scores(data))


def _loss_x(data: ClassifierData, num_classes: int) -> np.ndarray:
    hot = one_hot(data.records.y, num_classes)
    parts = [loss_matrix(data)] + ([hot] if hot.size else [])
    return np.column_stack(parts)


@CLASSIFIERS.register("image")
def make_image_classifier(
    config: AuditConfig, context: AuditContext
) -> GbmMembershipClassifier | StackedMembershipClassifier:
    if config.classifier.design == "stacked":
        return StackedMembershipClassifier(config, context)
    return GbmMembershipClassifier(config, context)
