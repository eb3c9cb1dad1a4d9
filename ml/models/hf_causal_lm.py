"""A pretrained causal language model from a local directory (``model.name: hf_causal_lm``).

``model.options.path`` is a directory written by transformers' ``save_pretrained`` (weights
and config; its tokenizer tokenizes the data: ``data.options.tokenizer``, the same
directory). Nothing downloads: ``from_pretrained(..., local_files_only=True)``. Every process
(the server's initial weights, each site, the audit's helper and reference models) builds
the model from the same directory, so they all start from the pretrained weights and the
federated run fine-tunes them; the audit's ``gpt2`` generator starts from them too (see
:mod:`audit.text.generator`), the paper's generator.

Record-level DP (Opacus): the architectures in :data:`DP_ARCHITECTURES` (``model_type``
``gpt2``: GPT-2 of any size, DistilGPT2; ``gpt_neo``; ``gpt_neox``: Pythia; ``llama``: Llama
and models saved as such), whose per-sample gradients under Opacus equal the gradients of
each record alone (checked by tests/test_hf_causal_lm.py). GPT-2's ``Conv1D`` projections
are swapped for equal ``nn.Linear`` layers, which Opacus' hooks cover (see
:mod:`ml.models.text`); layers its hooks do not cover (Llama's RMSNorm) Opacus
computes with functorch. Any other architecture is refused under DP with a named error
(OPT, for one, fails inside Opacus: its position embedding takes a non-tensor argument).
Without DP any ``AutoModelForCausalLM`` architecture loads.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn
from transformers import PreTrainedModel

from panoramia_fl.contracts.errors import UserError
from panoramia_fl.ml.models import MODELS
from panoramia_fl.ml.models.text import conv1d_to_linear

DP_ARCHITECTURES = ("gpt2", "gpt_neo", "gpt_neox", "llama")
"""``config.model_type`` values trained under record-level DP (checked against Opacus)."""

PATH_OPTION = "path"
"""The option naming the pretrained directory (the audit's generator starts from it too)."""


class PretrainedCausalLM(nn.Module):
    """A transformers causal LM returning logits only (what training, Opacus and the audit
    use); ``lm`` is the transformers model."""

    def __init__(self, lm: PreTrainedModel) -> None:
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        # (B, T) positions: with the default (1, T) Opacus would see one "sample" per batch
        # in the position embedding.
        batch, length = input_ids.shape
        positions = torch.arange(length, device=input_ids.device).expand(batch, length)
        return self.lm(input_ids=input_ids, position_ids=positions, use_cache=False).logits


def context_length(config: object) -> int | None:
    """The model's number of positions (GPT-2's ``n_positions``, else
    ``max_position_embeddings``), or None when the config does not say."""
    for key in ("n_positions", "max_position_embeddings"):
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    return None


def load_causal_lm(path: str | Path, *, key: str) -> PreTrainedModel:
    """``AutoModelForCausalLM.from_pretrained(path, local_files_only=True)``; errors name
    ``key`` (the config key that gave ``path``)."""
    from transformers import AutoModelForCausalLM

    directory = Path(path).expanduser()
    if not (directory / "config.json").is_file():
        raise UserError(f"{key}: {directory} is not a saved transformers model (no config.json)")
    try:
        return AutoModelForCausalLM.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError) as err:
        raise UserError(f"{key}: {directory}: not a causal language model ({err})") from None


@MODELS.register("hf_causal_lm", modality="text", pretrained_option=PATH_OPTION)
def hf_causal_lm(
    *, num_classes: int, dp: bool, input_shape: tuple[int, ...], path: str | None = None
) -> nn.Module:
    """The pretrained model in ``path``. ``num_classes`` is the data's vocabulary size (its
    tokenizer's), which must fit the model's embedding; ``input_shape`` is
    ``(chunk_tokens,)``, which must fit its context."""
    key = f"model.options.{PATH_OPTION}"
    if path is None:
        raise UserError(f"{key}: hf_causal_lm needs the directory of a saved model")
    lm = load_causal_lm(path, key=key)
    config = lm.config
    if dp and config.model_type not in DP_ARCHITECTURES:
        raise UserError(
            f"model.name: hf_causal_lm's {config.model_type!r} model in {path} is not trained "
            f"under record-level DP here (DP-SGD: {', '.join(DP_ARCHITECTURES)}, whose "
            "per-sample gradients were checked against Opacus; without DP any causal LM)"
        )
    embeddings = lm.get_input_embeddings()
    if not isinstance(embeddings, nn.Embedding):
        raise UserError(f"{key}: the model in {path} has no token embedding (nn.Embedding)")
    vocab = embeddings.num_embeddings
    if num_classes > vocab:
        raise UserError(
            f"{key}: the model in {path} has {vocab} token embeddings but the data has "
            f"{num_classes} token ids: tokenize the data with the model's own tokenizer "
            f"(data.options.tokenizer: {path})"
        )
    positions = context_length(config)
    if len(input_shape) != 1 or (positions is not None and input_shape[0] > positions):
        raise UserError(
            f"data.options.chunk_tokens: {input_shape} does not fit the model's context of "
            f"{positions} tokens"
        )
    if config.model_type == "gpt2":
        conv1d_to_linear(lm)
    return PretrainedCausalLM(lm)
