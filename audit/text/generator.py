"""Generator ``gpt2``: a small GPT-2 fitted on D_G that writes 64-token chunks (App. C.2).

Pretrained
    With ``options.pretrained`` (or a target that is itself a pretrained model, e.g.
    ``model.name: hf_causal_lm``: the task's ``pretrained_dir``) the generator is that saved
    model fine-tuned on D_G, as in the paper (GPT-2 fine-tuned on WikiText), not a small
    GPT-2 from scratch; it is then not pre-trained on the public pool.

Fit
    D_G is cut into D_G^train and D_G^prompt (``prompt_fraction``, the paper's 35% : 15% of
    D_f, i.e. 0.3). When a public pool is given the model is first pre-trained on it (public
    text no site trained on, e.g. held-out documents; ``pretrain_epochs``), the small-scale
    analogue of the paper's fine-tuning of a pre-trained GPT-2; then it is fine-tuned on
    D_G^train, keeping the epoch with the lowest loss on a slice of D_G^train held out for
    validation.
Sample
    A prompt is the last ``prompt_tokens`` tokens of a random D_G^prompt chunk; the record is
    the next ``T`` tokens, drawn by top-k sampling (k = 200, temperature 1 by default).
    With ``prompt_tokens = 0`` the model samples whole chunks on its own: a chunk LM models
    the distribution of chunks, which begin mid-sentence, so no prompt is needed; the first
    token then comes from the first-token frequencies of D_G.
Document starts
    A data set may mark the first chunk of each document with a start token (the text
    datasets prepend ``<|endoftext|>``). A token found at position 0 of some D_G chunks and
    nowhere else is taken to be that marker; the same share of samples is then generated
    from the marker alone, so generated and real data have as many document starts.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from transformers import GPT2LMHeadModel

from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.panoramia.components import (
    GENERATORS,
    AuditContext,
    Records,
    TrainedGenerator,
)
from panoramia_fl.audit.text.lm import LMShape, build_lm, load_lm, mean_loss, sample_lm, train_lm


class TextGeneratorOptions(BaseModel):
    """Settings of the ``gpt2`` generator (``audit.settings.generator.options``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    n_layer: int = Field(2, ge=1)
    n_embd: int = Field(128, ge=8)
    n_head: int = Field(4, ge=1)
    dropout: float = Field(0.1, ge=0, lt=1)
    pretrain_epochs: int | None = Field(
        None,
        ge=0,
        description="epochs on the public pool first (None: 3 when a public pool is given, "
        "else 0; measured: generator loss 5.39 -> 4.62 on a 1,200-chunk site)",
    )
    pretrain_learning_rate: float = Field(1e-3, gt=0)
    learning_rate: float | None = Field(
        None,
        gt=0,
        description="fine-tuning rate (default 1e-3 from scratch, 5e-4 after pre-training)",
    )
    val_fraction: float = Field(
        0.1, ge=0, lt=0.5, description="of D_G^train, for choosing the fine-tuning epoch"
    )
    prompt_fraction: float = Field(
        0.3, ge=0, lt=1, description="share of D_G kept as prompts (unused when prompt_tokens = 0)"
    )
    prompt_tokens: int = Field(
        32, ge=0, description="context taken from a prompt chunk (0: unprompted chunk sampling)"
    )
    pretrained: str | None = Field(
        None,
        description="a saved causal LM's directory to fine-tune on D_G instead of a GPT-2 "
        "from scratch (None: the target's own pretrained directory when it is one, as "
        "model.name hf_causal_lm; the paper's generator)",
    )
    top_k: int = Field(200, ge=1)
    temperature: float = Field(1.0, gt=0)
    sample_batch_size: int = Field(256, ge=1)


def generator_options(config: AuditConfig) -> TextGeneratorOptions:
    """The validated ``config.generator.options``."""
    raw: dict[str, Any] = dict(config.generator.options)
    try:
        return TextGeneratorOptions(**raw)
    except ValidationError as err:
        first = err.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise ValueError(f"generator.options.{key}: {first['msg']}") from None


def start_marker(x: np.ndarray) -> int | None:
    """A token seen at position 0 of some chunks and at no other position (or None)."""
    if x.shape[1] < 2:
        return None
    later = set(np.unique(x[:, 1:]).tolist())
    firsts, counts = np.unique(x[:, 0], return_counts=True)
    candidates = [
        (c, t) for t, c in zip(firsts.tolist(), counts.tolist(), strict=True) if t not in later
    ]
    if not candidates or max(candidates)[0] < 2:
        return None
    return int(max(candidates)[1])


# A fitted model depends only on its data and settings: reuse it within a process (e.g. when
# one site audits several targets, or sites share the public pre-training).
_CACHE: OrderedDict[str, dict[str, torch.Tensor]] = OrderedDict()
_CACHE_SIZE = 4
DEFAULT_PRETRAIN_EPOCHS = 3
_REPORT = "__fit_report__"  # kept beside the weights of a cached fine-tuned model


def _key(*parts: object) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.tobytes() if isinstance(p, np.ndarray) else repr(p).encode())
    return h.hexdigest()


def _cached(key: str) -> dict[str, torch.Tensor] | None:
    if key in _CACHE:
        _CACHE.move_to_end(key)
        return _CACHE[key]
    return None


def _store(key: str, state: dict[str, torch.Tensor]) -> None:
    _CACHE[key] = {k: v.detach().to("cpu", copy=True) for k, v in state.items()}
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)


@dataclass(frozen=True)
class _DgSplit:
    """D_G's chunks as the generator uses them."""

    order: np.ndarray
    """The random order the cut was made in (part of the cache key)."""
    prompts: np.ndarray
    """Real prompts the samples continue (none without ``prompt_tokens``)."""
    train: np.ndarray
    val: np.ndarray


class Gpt2Generator(TrainedGenerator):
    """See the module docstring."""

    kind = "gpt2"

    def __init__(
        self,
        options: TextGeneratorOptions,
        *,
        vocab_size: int,
        epochs: int,
        batch_size: int,
        learning_rate: float | None,
        device: torch.device,
        public_pool: Records | None,
        pretrained: str | None = None,
    ) -> None:
        self.options = options
        self.pretrained = pretrained
        self.vocab_size = vocab_size
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.device = device
        self.public_pool = public_pool
        self.model: GPT2LMHeadModel | None = None
        self.prompts: np.ndarray | None = None
        self.first_tokens: np.ndarray | None = None
        self.marker: int | None = None
        self.marker_share = 0.0
        self.chunk_tokens = 0

    def _shape(self, chunk_tokens: int) -> LMShape:
        o = self.options
        return LMShape(
            vocab_size=self.vocab_size,
            n_positions=chunk_tokens + o.prompt_tokens,
            n_layer=o.n_layer,
            n_embd=o.n_embd,
            n_head=o.n_head,
            dropout=o.dropout,
        )

    def fit(self, d_g: Records, *, seed: int) -> dict[str, float]:
        x = np.asarray(d_g.x, dtype=np.int64)
        if x.ndim != 2 or len(x) < 4:
            raise ValueError(f"generator gpt2: D_G needs at least 4 chunks (n, T), got {x.shape}")
        if x.max() >= self.vocab_size or x.min() < 0:
            raise ValueError(f"generator gpt2: token ids outside 0..{self.vocab_size - 1}")
        self.chunk_tokens = t = x.shape[1]
        split = self._split(x, seed=seed)
        self.prompts = split.prompts
        self.marker = start_marker(x)
        self.marker_share = 0.0 if self.marker is None else float(np.mean(x[:, 0] == self.marker))
        self.first_tokens = split.train[:, 0].copy()

        shape = self._shape(t)
        model = build_lm(shape, seed=seed) if self.pretrained is None else load_lm(self.pretrained)
        quality: dict[str, float] = {
            "generator_train_chunks": float(len(split.train)),
            "generator_prompt_chunks": float(len(split.prompts)),
            "generator_start_share": self.marker_share,
        }
        pool = None if self.public_pool is None else np.asarray(self.public_pool.x, np.int64)
        pretrain = self._pretrain_epochs(pool)
        if pretrain > 0:
            assert pool is not None  # _pretrain_epochs checks that the pool is there
            self._pretrain(model, pool, epochs=pretrain, shape=shape, seed=seed)
            if len(split.val):
                quality["generator_val_loss_pretrained"] = mean_loss(
                    model, split.val, device=self.device
                )
        r = self._finetune(
            model,
            x,
            split,
            pool=pool if pretrain else None,
            pretrain=pretrain,
            shape=shape,
            seed=seed,
        )
        quality.update(
            generator_train_loss=r[0], generator_val_loss=r[1], generator_best_epoch=r[2]
        )
        model.to(self.device)
        self.model = model.eval()
        return {k: float(v) for k, v in quality.items() if not math.isnan(float(v))}

    def _split(self, x: np.ndarray, *, seed: int) -> _DgSplit:
        """D_G's chunks cut at random into prompts, training and validation chunks."""
        o = self.options
        order = np.random.default_rng([seed, 0x6E7]).permutation(len(x))
        n_prompt = int(round(o.prompt_fraction * len(x))) if o.prompt_tokens > 0 else 0
        n_prompt = min(max(n_prompt, 1 if o.prompt_tokens > 0 else 0), len(x) - 2)
        train = x[order[n_prompt:]]
        n_val = int(round(o.val_fraction * len(train)))
        return _DgSplit(order, x[order[:n_prompt]], train[n_val:], train[:n_val])

    def _pretrain_epochs(self, pool: np.ndarray | None) -> int:
        """Epochs on the public pool before D_G (0: none); the pool must be there for any."""
        pretrain = self.options.pretrain_epochs
        if pretrain is None:  # a pretrained model is fine-tuned on D_G only, as in the paper
            has_pool = pool is not None and len(pool) > 0
            pretrain = DEFAULT_PRETRAIN_EPOCHS if has_pool and self.pretrained is None else 0
        if pretrain > 0 and (pool is None or len(pool) == 0):
            raise ValueError(
                "generator.options.pretrain_epochs > 0 needs a public pool "
                "(run_audit(..., public_pool=...) / audit.reference_pool)"
            )
        return pretrain

    def _pretrain(
        self, model: GPT2LMHeadModel, pool: np.ndarray, *, epochs: int, shape: LMShape, seed: int
    ) -> None:
        """Train ``model`` on the public pool's chunks (or load it from the process's cache)."""
        o, t = self.options, self.chunk_tokens
        if pool.shape[1] != t:
            raise ValueError(f"public pool chunks have {pool.shape[1]} tokens, D_G {t}")
        key = _key(
            "pretrain",
            pool,
            shape,
            self.pretrained,
            epochs,
            o.pretrain_learning_rate,
            self.batch_size,
            seed,
            str(self.device),
        )
        state = _cached(key)
        if state is None:
            train_lm(
                model,
                pool,
                epochs=epochs,
                batch_size=self.batch_size,
                learning_rate=o.pretrain_learning_rate,
                seed=seed + 1,
                device=self.device,
                max_offset=o.prompt_tokens,
            )
            _store(key, model.state_dict())
        else:
            model.load_state_dict(state)
        model.to(self.device)

    def _finetune(
        self,
        model: GPT2LMHeadModel,
        x: np.ndarray,
        split: _DgSplit,
        *,
        pool: np.ndarray | None,
        pretrain: int,
        shape: LMShape,
        seed: int,
    ) -> list[float]:
        """Train ``model`` on D_G's training chunks (or load it from the process's cache):
        ``[train loss, validation loss, best epoch]``."""
        o = self.options
        lr = self.learning_rate or (5e-4 if pretrain > 0 or self.pretrained else 1e-3)
        key = _key(
            "finetune",
            x,
            split.order,
            pool,
            pretrain,
            shape,
            self.pretrained,
            o,
            self.epochs,
            lr,
            self.batch_size,
            seed,
            str(self.device),
        )
        state = _cached(key)
        if state is not None:
            state = dict(state)
            summary: list[float] = state.pop(_REPORT).tolist()
            model.load_state_dict(state)
            return summary
        report = train_lm(
            model,
            split.train,
            epochs=self.epochs,
            batch_size=self.batch_size,
            learning_rate=lr,
            seed=seed + 2,
            device=self.device,
            max_offset=o.prompt_tokens,
            val=split.val if len(split.val) else None,
        )
        summary = [report.train_loss, report.val_loss, float(report.best_epoch)]
        _store(key, {**model.state_dict(), _REPORT: torch.tensor(summary, dtype=torch.float64)})
        return summary

    def sample(self, n: int, *, seed: int) -> Records:
        if self.model is None or self.prompts is None or self.first_tokens is None:
            raise RuntimeError("Gpt2Generator.sample called before fit")
        o, t = self.options, self.chunk_tokens
        rng = np.random.default_rng([seed, 0x5A])
        n_start = int(rng.binomial(n, self.marker_share)) if self.marker is not None else 0
        out = np.empty((n, t), dtype=np.int64)
        if o.prompt_tokens == 0:
            # Unprompted: first token from D_G's first-token frequencies (document starts
            # included), the rest from the model.
            first = self.first_tokens[rng.integers(0, len(self.first_tokens), size=n)][:, None]
            out[:, :1] = first
            out[:, 1:] = self._sample(first, t - 1, seed)
        else:
            # Document starts from the marker alone, the others after a real prompt.
            start = np.full((n_start, 1), self.marker if self.marker is not None else 0)
            if n_start:
                out[:n_start, :1] = start
                out[:n_start, 1:] = self._sample(start, t - 1, seed + 1)
            rest = n - n_start
            if rest:
                idx = _cycle(rng, len(self.prompts), rest)
                prompts = self.prompts[idx][:, t - min(o.prompt_tokens, t) :]
                out[n_start:] = self._sample(prompts, t, seed + 2)
            out = out[rng.permutation(n)]
        return Records(out, None)

    def _sample(self, prompts: np.ndarray, length: int, seed: int) -> np.ndarray:
        o = self.options
        assert self.model is not None  # sample() checks that fit ran
        return sample_lm(
            self.model,
            prompts,
            length=length,
            top_k=o.top_k,
            temperature=o.temperature,
            seed=seed,
            device=self.device,
            batch_size=o.sample_batch_size,
        )


def _cycle(rng: np.random.Generator, k: int, n: int) -> np.ndarray:
    """``n`` indices into ``k`` prompts, each used as evenly as possible (paper: 8 samples
    per prompt), in random order."""
    reps = -(-n // k)
    return np.concatenate([rng.permutation(k) for _ in range(reps)])[:n]


@GENERATORS.register("gpt2", modality="text")
def make_gpt2_generator(config: AuditConfig, context: AuditContext) -> Gpt2Generator:
    """``gpt2`` from ``config.generator`` (epochs, batch_size, learning_rate if set) and
    ``config.generator.options`` (see :class:`TextGeneratorOptions`)."""
    g = config.generator
    lr = g.learning_rate if "learning_rate" in g.model_fields_set else None
    options = generator_options(config)
    if options.learning_rate is not None:
        lr = options.learning_rate
    return Gpt2Generator(
        options,
        vocab_size=int(context.task.num_classes),
        epochs=g.epochs,
        batch_size=g.batch_size,
        learning_rate=lr,
        device=context.device,
        public_pool=context.public_pool,
        pretrained=options.pretrained or getattr(context.task, "pretrained_dir", None),
    )
