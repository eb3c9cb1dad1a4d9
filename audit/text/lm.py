"""A small GPT-2 language model for the audit's text generator: build, train, sample.

The generator is its own model (not the target's architecture): it needs room for a prompt
before the 64-token suffix, so it has ``prompt_tokens + chunk_tokens`` positions. Records
are chunks without neighbours, so it is trained on single chunks placed at a random offset
in ``[0, prompt_tokens]``: every position embedding it will use when sampling is trained.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import cast

import numpy as np
import torch
from torch.nn import functional as F
from transformers import DynamicCache, GPT2Config, GPT2LMHeadModel


@dataclass(frozen=True)
class LMShape:
    """Size of a GPT-2."""

    vocab_size: int
    n_positions: int
    n_layer: int = 2
    n_embd: int = 128
    n_head: int = 4
    dropout: float = 0.1


def build_lm(shape: LMShape, *, seed: int) -> GPT2LMHeadModel:
    """A freshly initialised GPT-2 (deterministic from ``seed``)."""
    if shape.n_embd % shape.n_head:
        raise ValueError(f"n_embd ({shape.n_embd}) must be divisible by n_head ({shape.n_head})")
    config = GPT2Config(
        vocab_size=shape.vocab_size,
        n_positions=shape.n_positions,
        n_embd=shape.n_embd,
        n_layer=shape.n_layer,
        n_head=shape.n_head,
        n_inner=4 * shape.n_embd,
        resid_pdrop=shape.dropout,
        embd_pdrop=shape.dropout,
        attn_pdrop=shape.dropout,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(seed)
    return GPT2LMHeadModel(config)


def load_lm(path: str) -> GPT2LMHeadModel:
    """A saved causal LM (transformers' ``save_pretrained`` directory; nothing downloads).

    Typed as GPT-2: what the generator calls (ids and positions in, ``.logits`` out, a
    key/value cache) is what every transformers causal LM offers.
    """
    from transformers import AutoModelForCausalLM

    try:
        return cast(
            GPT2LMHeadModel, AutoModelForCausalLM.from_pretrained(path, local_files_only=True)
        )
    except (OSError, ValueError) as err:
        raise ValueError(
            f"generator.options.pretrained: {path}: no saved causal LM ({err})"
        ) from None


def positions_of(model: GPT2LMHeadModel) -> int:
    """How many positions the model has (GPT-2's ``n_positions``, else
    ``max_position_embeddings``)."""
    config = model.config
    return int(getattr(config, "n_positions", None) or config.max_position_embeddings)


def chunk_loss(
    model: GPT2LMHeadModel, ids: torch.Tensor, offset: torch.Tensor | int = 0
) -> torch.Tensor:
    """Mean next-token loss of chunks ``ids (B, T)`` placed at position ``offset``."""
    positions = torch.arange(ids.shape[1], device=ids.device)[None] + (
        offset[:, None] if isinstance(offset, torch.Tensor) else offset
    )
    logits = model(input_ids=ids, position_ids=positions, use_cache=False).logits[:, :-1]
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), ids[:, 1:].reshape(-1))


@torch.no_grad()
def mean_loss(
    model: GPT2LMHeadModel, x: np.ndarray, *, device: torch.device, batch_size: int = 128
) -> float:
    """Mean token loss of ``model`` on chunks ``x`` at offset 0."""
    model.eval()
    total, n = 0.0, 0
    for start in range(0, len(x), batch_size):
        ids = torch.as_tensor(x[start : start + batch_size], dtype=torch.long, device=device)
        total += float(chunk_loss(model, ids)) * len(ids)
        n += len(ids)
    return total / max(n, 1)


@dataclass(frozen=True)
class TrainReport:
    epochs_run: int
    best_epoch: int
    train_loss: float
    val_loss: float


def train_lm(
    model: GPT2LMHeadModel,
    x: np.ndarray,
    *,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    seed: int,
    device: torch.device,
    max_offset: int = 0,
    val: np.ndarray | None = None,
    weight_decay: float = 0.01,
) -> TrainReport:
    """AdamW with warm-up and cosine decay; keeps the epoch with the lowest ``val`` loss.

    Without ``val`` the last epoch is kept. ``max_offset`` draws each chunk's position offset
    uniformly from ``0..max_offset``.
    """
    model.to(device)
    if epochs <= 0 or len(x) == 0:
        v = mean_loss(model, val, device=device) if val is not None and len(val) else math.nan
        return TrainReport(0, 0, math.nan, v)
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=learning_rate, weight_decay=weight_decay, betas=(0.9, 0.98)
    )
    schedule = _warmup_cosine(optimizer, total=epochs * math.ceil(len(x) / batch_size))
    data = torch.as_tensor(x, dtype=torch.long, device=device)  # once: batches gathered there
    best: tuple[float, int, dict[str, torch.Tensor] | None] = (math.inf, 0, None)
    train_loss = math.nan
    for epoch in range(1, epochs + 1):
        train_loss = _train_epoch(
            model,
            data,
            optimizer,
            schedule,
            rng=rng,
            batch_size=batch_size,
            max_offset=max_offset,
        )
        if val is not None and len(val):
            v = mean_loss(model, val, device=device)
            if v < best[0]:
                best = (v, epoch, copy.deepcopy(model.state_dict()))
    if best[2] is not None:
        model.load_state_dict(best[2])
        return TrainReport(epochs, best[1], train_loss, best[0])
    return TrainReport(epochs, epochs, train_loss, math.nan)


def _warmup_cosine(
    optimizer: torch.optim.Optimizer, *, total: int
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up over a tenth of the ``total`` steps (1 to 100), then cosine decay to a
    tenth of the rate."""
    warmup = max(1, min(100, total // 10))
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: (
            min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(s, total) / total)) * 0.9
            + 0.1
        ),
    )


def _train_epoch(
    model: GPT2LMHeadModel,
    data: torch.Tensor,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LambdaLR,
    *,
    rng: np.random.Generator,
    batch_size: int,
    max_offset: int,
) -> float:
    """One pass over ``data`` in an order and with position offsets from ``rng``; the mean
    training loss."""
    model.train()
    device = data.device
    order = rng.permutation(len(data))
    # Summed on the device in float64 and read once an epoch: no wait for every step.
    running, count = torch.zeros((), dtype=torch.float64, device=device), 0
    for start in range(0, len(order), batch_size):
        idx = order[start : start + batch_size]
        ids = data[torch.as_tensor(idx, device=device)]
        offset = torch.as_tensor(rng.integers(0, max_offset + 1, size=len(idx)), device=device)
        loss = chunk_loss(model, ids, offset)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        running += loss.detach().double() * len(idx)
        count += len(idx)
    return float(running) / max(count, 1)


def _cache_keyword() -> str:
    """transformers renamed ``past_key_values`` to ``cache`` during 5.x; accept both."""
    import inspect

    from transformers.models.gpt2.modeling_gpt2 import GPT2Model

    return (
        "cache" if "cache" in inspect.signature(GPT2Model.forward).parameters else "past_key_values"
    )


def _step(
    model: GPT2LMHeadModel,
    ids: torch.Tensor,
    cache: object,
    keyword: str,
    position_ids: torch.Tensor | None = None,
) -> tuple[torch.Tensor, object]:
    """One cached forward: last-position logits and the updated cache."""
    res = model(input_ids=ids, position_ids=position_ids, use_cache=True, **{keyword: cache})
    new = res["cache"] if "cache" in res else res["past_key_values"]
    return res.logits[:, -1], new


@torch.no_grad()
def sample_lm(
    model: GPT2LMHeadModel,
    prompts: np.ndarray,
    *,
    length: int,
    top_k: int,
    temperature: float,
    seed: int,
    device: torch.device,
    batch_size: int = 256,
) -> np.ndarray:
    """Continue each prompt (``(n, p)`` token ids, ``p >= 1``) by ``length`` tokens.

    Top-k sampling at ``temperature`` with a key/value cache; returns only the continuations,
    int64 ``(n, length)``. Deterministic from ``seed``.
    """
    if prompts.ndim != 2 or prompts.shape[1] < 1:
        raise ValueError(f"prompts must be (n, p>=1) token ids, got shape {prompts.shape}")
    p = prompts.shape[1]
    if p + length - 1 > positions_of(model):
        raise ValueError(
            f"prompt {p} + {length} tokens exceed the generator's {positions_of(model)} positions"
        )
    model.to(device).eval()
    gen = torch.Generator(device=device).manual_seed(seed)
    k = min(top_k, model.config.vocab_size)
    keyword = _cache_keyword()
    out = np.empty((len(prompts), length), dtype=np.int64)
    for start in range(0, len(prompts), batch_size):
        ids = torch.as_tensor(prompts[start : start + batch_size], dtype=torch.long, device=device)
        logits, cache = _step(model, ids, DynamicCache(config=model.config), keyword)
        steps = []
        for t in range(length):
            values, index = torch.topk(logits.float() / temperature, k, dim=-1)
            choice = torch.multinomial(torch.softmax(values, dim=-1), 1, generator=gen)
            token = index.gather(1, choice)
            steps.append(token)
            if t == length - 1:
                break
            logits, cache = _step(
                model, token, cache, keyword, position_ids=torch.full_like(token, p + t)
            )
        out[start : start + len(ids)] = torch.cat(steps, dim=1).cpu().numpy()
    return out
