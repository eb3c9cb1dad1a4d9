"""Causal language models: a small GPT-2 (transformers) sized for CPUs.

The model returns next-token logits ``(B, T, vocab)`` for token ids ``(B, T)``; the vocabulary
size arrives as ``num_classes`` (the dataset's compact vocabulary, see
:mod:`ml.text_tokenizer`).

DP-SGD: transformers' GPT-2 implements its projections with ``Conv1D`` (a transposed
``Linear``), for which Opacus has no per-sample-gradient hook and would fall back to slower
functorch. Every ``Conv1D`` is therefore swapped for the equivalent ``nn.Linear`` (same
initial weights, transposed), so all trainable layers are ones Opacus' hooks support
(Linear, Embedding, LayerNorm). The input embedding and the output layer share one weight
(GPT-2's tying); Opacus accumulates the per-sample gradients of a parameter used twice. The
swap is done with and without DP so that weights are exchangeable between both.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.pytorch_utils import Conv1D

from panoramia_fl.ml.models import MODELS

EOT_ID = 256
"""Compact id of ``<|endoftext|>`` (see :class:`ml.text_tokenizer.CompactVocab`)."""


def conv1d_to_linear(module: nn.Module) -> nn.Module:
    """Replace every transformers ``Conv1D`` in ``module`` by an equal ``nn.Linear``."""
    for name, child in list(module.named_children()):
        if isinstance(child, Conv1D):
            n_in, n_out = child.weight.shape
            linear = nn.Linear(n_in, n_out)
            with torch.no_grad():
                linear.weight.copy_(child.weight.t())
                linear.bias.copy_(child.bias)
            setattr(module, name, linear)
        else:
            conv1d_to_linear(child)
    return module


class CausalLM(nn.Module):
    """GPT-2 language model returning logits only (what training, Opacus and the audit use).

    ``lm`` is the transformers model (e.g. for cached generation).
    """

    def __init__(self, config: GPT2Config) -> None:
        super().__init__()
        self.config = config
        self.lm = conv1d_to_linear(GPT2LMHeadModel(config))

    @property
    def vocab_size(self) -> int:
        return int(self.config.vocab_size)

    @property
    def max_positions(self) -> int:
        return int(self.config.n_positions)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # Explicit (B, T) positions: with transformers' default (1, T) the position
        # embedding would see a batch of one, and Opacus would compute one "per-sample"
        # gradient for the whole batch.
        batch, length = input_ids.shape
        positions = torch.arange(length, device=input_ids.device).expand(batch, length)
        return self.lm(input_ids=input_ids, position_ids=positions, use_cache=False).logits


def gpt2_config(
    *, vocab_size: int, n_positions: int, n_layer: int, n_embd: int, n_head: int, dropout: float
) -> GPT2Config:
    if n_embd % n_head:
        raise ValueError(f"model.options: n_embd ({n_embd}) must be divisible by n_head ({n_head})")
    return GPT2Config(
        vocab_size=vocab_size,
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_inner=4 * n_embd,
        resid_pdrop=dropout,
        embd_pdrop=dropout,
        attn_pdrop=dropout,
        bos_token_id=EOT_ID,
        eos_token_id=EOT_ID,
        tie_word_embeddings=True,
    )


@MODELS.register("gpt2_small", modality="text")
def gpt2_small(
    *,
    num_classes: int,
    dp: bool,
    input_shape: tuple[int, ...],
    n_layer: int = 2,
    n_embd: int = 128,
    n_head: int = 4,
    dropout: float = 0.1,
    n_positions: int | None = None,
) -> nn.Module:
    """A GPT-2 with ``n_layer`` blocks of width ``n_embd`` (defaults: 0.67M parameters with a
    2,048-token vocabulary; 0.24M at ``n_embd=64``).

    ``num_classes`` is the vocabulary size; ``input_shape`` is ``(chunk_tokens,)`` and sets
    the context length unless ``n_positions`` is given. ``dp`` needs no change of
    architecture (no batch statistics anywhere).
    """
    del dp
    if len(input_shape) != 1:
        raise ValueError(f"gpt2_small expects input_shape (tokens,), got {input_shape}")
    config = gpt2_config(
        vocab_size=num_classes,
        n_positions=n_positions or input_shape[0],
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        dropout=dropout,
    )
    return CausalLM(config)
