"""GPT-2's byte-level BPE, read from a local file, with a corpus-sized vocabulary.

Where the BPE comes from
    The real GPT-2 merge ranks ship in the PyPI package ``openai-whisper`` as
    ``whisper/assets/gpt2.tiktoken`` (one ``base64(token bytes) rank`` per line, 50,256 ranks;
    rank = GPT-2 token id; ``<|endoftext|>`` is id 50,256). We read that file (whisper itself
    is never imported) and rebuild the merge list: the merge that creates the token of rank
    ``r`` is found by running byte-pair merging on the token's bytes with only the ranks below
    ``r``, which always ends in exactly two parts. Merges ordered by the rank they create give
    the same segmentation as tiktoken's "merge the lowest-ranked pair" rule, so the fast
    ``tokenizers`` BPE with GPT-2's byte-level pre-tokenizer reproduces GPT-2's token ids.
    Using GPT-2's own BPE (rather than training one) keeps a 64-token chunk the same amount of
    text as in the paper and needs no training data.

Why a reduced vocabulary
    A 50,257-way softmax dominates the cost of a small GPT-2 on a CPU (the output layer is
    ~50k x n_embd, larger than a 2-layer transformer). :class:`CompactVocab` keeps the 256
    byte tokens, ``<|endoftext|>`` and the ``max_size - 257`` GPT-2 tokens most frequent in
    the corpus. A token outside the kept set is replaced by the two tokens it was merged from
    (recursively, ending at bytes at worst), so the mapping is lossless: every text
    round-trips, only rare words take a few more tokens.
"""

from __future__ import annotations

import base64
import importlib.util
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from panoramia_fl.contracts.errors import UserError

if TYPE_CHECKING:
    from tokenizers import Tokenizer

GPT2_EOT_ID = 50256
"""GPT-2's ``<|endoftext|>`` id (one past the last BPE rank)."""

GPT2_RANKS_HINT = (
    "The GPT-2 BPE ranks ship in the PyPI package openai-whisper: "
    "`pip install --no-deps openai-whisper` (only its asset file gpt2.tiktoken is read)."
)


class TokenizerError(UserError, ValueError):
    """The BPE file is missing or malformed; the message names the file."""


def default_ranks_path() -> Path:
    """Location of ``gpt2.tiktoken`` inside the installed ``openai-whisper`` package."""
    spec = importlib.util.find_spec("whisper")  # locates the package without importing it
    if spec is None or spec.origin is None:
        raise TokenizerError(f"package openai-whisper is not installed. {GPT2_RANKS_HINT}")
    return Path(spec.origin).parent / "assets" / "gpt2.tiktoken"


def read_ranks(path: Path) -> dict[bytes, int]:
    """Read a tiktoken rank file: ``base64(token) rank`` per line."""
    if not path.exists():
        raise TokenizerError(f"missing BPE rank file: {path}. {GPT2_RANKS_HINT}")
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as fh:
        for lineno, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                token, rank = line.split()
                ranks[base64.b64decode(token)] = int(rank)
            except ValueError as err:
                raise TokenizerError(f"{path}:{lineno}: not a 'base64 rank' line ({err})") from None
    if len(ranks) < 256 or sorted(ranks.values()) != list(range(len(ranks))):
        raise TokenizerError(f"{path}: ranks are not 0..{len(ranks) - 1} without gaps")
    if any(len(tok) != 1 for tok, r in ranks.items() if r < 256):
        raise TokenizerError(f"{path}: the first 256 ranks must be the single bytes")
    return ranks


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character table used in its vocab files."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _merge_parts(token: bytes, ranks: dict[bytes, int], max_rank: int) -> list[bytes]:
    """Byte-pair merging of ``token`` using only ranks below ``max_rank``."""
    parts = [token[i : i + 1] for i in range(len(token))]
    while len(parts) > 1:
        best, best_rank = -1, max_rank
        for i in range(len(parts) - 1):
            rank = ranks.get(parts[i] + parts[i + 1])
            if rank is not None and rank < best_rank:
                best, best_rank = i, rank
        if best < 0:
            break
        parts[best : best + 2] = [parts[best] + parts[best + 1]]
    return parts


@dataclass(frozen=True)
class Gpt2Bpe:
    """GPT-2's BPE: text <-> GPT-2 token ids (``<|endoftext|>`` is never produced by
    :meth:`encode`; callers insert :data:`GPT2_EOT_ID` where documents start)."""

    token_bytes: tuple[bytes, ...]
    """Bytes of every GPT-2 id below :data:`GPT2_EOT_ID`."""
    merges: tuple[tuple[int, int], ...]
    """For id ``256 + i``: the two ids it was merged from (``merges[i]``)."""
    _fast: Tokenizer = field(repr=False, compare=False)

    def encode(self, text: str) -> list[int]:
        return list(self._fast.encode(text, add_special_tokens=False).ids)

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        return b"".join(self.token_bytes[i] for i in ids if i != GPT2_EOT_ID)

    def decode(self, ids: Iterable[int]) -> str:
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def split(self, token_id: int) -> tuple[int, int]:
        """The two ids a merged token was built from."""
        if token_id < 256 or token_id >= GPT2_EOT_ID:
            raise ValueError(f"token {token_id} is a byte or special token, not a merge")
        return self.merges[token_id - 256]


def build_bpe(ranks: dict[bytes, int]) -> Gpt2Bpe:
    """Rebuild GPT-2's merges from its ranks and wrap them in a fast ``tokenizers`` BPE."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    by_rank = sorted(ranks, key=ranks.__getitem__)
    byte_char = bytes_to_unicode()

    def as_str(tok: bytes) -> str:
        return "".join(byte_char[b] for b in tok)

    merges: list[tuple[int, int]] = []
    merge_strs: list[tuple[str, str]] = []
    for rank in range(256, len(by_rank)):
        token = by_rank[rank]
        parts = _merge_parts(token, ranks, rank)
        if len(parts) != 2:
            raise TokenizerError(f"rank {rank} ({token!r}) does not split into two tokens")
        merges.append((ranks[parts[0]], ranks[parts[1]]))
        merge_strs.append((as_str(parts[0]), as_str(parts[1])))
    vocab = {as_str(tok): rank for tok, rank in ranks.items()}
    fast = Tokenizer(models.BPE(vocab=vocab, merges=merge_strs))
    fast.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    fast.decoder = decoders.ByteLevel()
    return Gpt2Bpe(token_bytes=tuple(by_rank), merges=tuple(merges), _fast=fast)


@lru_cache(maxsize=2)
def gpt2_bpe(path: str | None = None) -> Gpt2Bpe:
    """GPT-2's BPE from ``path`` (default: openai-whisper's asset), built once per process."""
    return build_bpe(read_ranks(Path(path) if path else default_ranks_path()))


@dataclass(frozen=True)
class CompactVocab:
    """A lossless sub-vocabulary of GPT-2: compact ids ``0..size-1``.

    ``gpt2_ids[c]`` is the GPT-2 id of compact id ``c``. Compact ids 0..255 are the byte
    tokens, 256 is ``<|endoftext|>``, the rest are the kept merged tokens by frequency.
    """

    gpt2_ids: np.ndarray
    bpe: Gpt2Bpe = field(repr=False, compare=False)
    _table: dict[int, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_table", {int(g): c for c, g in enumerate(self.gpt2_ids)})

    @property
    def size(self) -> int:
        return int(len(self.gpt2_ids))

    @property
    def eot(self) -> int:
        return 256

    @classmethod
    def fit(
        cls, bpe: Gpt2Bpe, token_lists: Iterable[Sequence[int]], *, max_size: int
    ) -> CompactVocab:
        """Keep bytes, ``<|endoftext|>`` and the ``max_size - 257`` most frequent tokens.

        Ties are broken by GPT-2 id, so the same corpus always gives the same vocabulary.
        """
        if max_size < 257:
            raise ValueError(f"max_size must be at least 257 (bytes + endoftext), got {max_size}")
        counts: Counter[int] = Counter()
        for ids in token_lists:
            counts.update(ids)
        merged = sorted(
            (t for t in counts if 256 <= t < GPT2_EOT_ID), key=lambda t: (-counts[t], t)
        )
        # A split token's parts are counted too, so iterate: drop rare tokens, re-count their
        # parts, until the kept set is stable (usually one or two passes).
        keep = merged[: max_size - 257]
        for _ in range(8):
            kept = set(keep)
            total: Counter[int] = Counter()
            for tok, n in counts.items():
                for part in _expand(bpe, tok, kept):
                    total[part] += n
            ranked = sorted(
                (t for t in total if 256 <= t < GPT2_EOT_ID), key=lambda t: (-total[t], t)
            )
            new_keep = ranked[: max_size - 257]
            if set(new_keep) == kept:
                break
            keep = new_keep
        gpt2_ids = np.array(
            list(range(256)) + [GPT2_EOT_ID] + sorted(keep, key=lambda t: (-total[t], t)),
            dtype=np.int64,
        )
        return cls(gpt2_ids=gpt2_ids, bpe=bpe)

    def from_gpt2(self, ids: Sequence[int]) -> list[int]:
        """GPT-2 ids -> compact ids (out-of-vocabulary tokens split into their parts)."""
        table = self._table
        out: list[int] = []
        for tok in ids:
            if tok in table:
                out.append(table[tok])
            else:
                out.extend(table[p] for p in _expand(self.bpe, tok, table.keys()))
        return out

    def encode(self, text: str) -> list[int]:
        return self.from_gpt2(self.bpe.encode(text))

    def decode(self, ids: Iterable[int]) -> str:
        return self.bpe.decode(int(self.gpt2_ids[i]) for i in ids)

    def to_dict(self) -> dict[str, list[int]]:
        return {"gpt2_ids": self.gpt2_ids.tolist()}


def _expand(bpe: Gpt2Bpe, token: int, kept: Collection[int]) -> list[int]:
    """``token`` itself if kept (bytes and EOT always are), else its parts, recursively."""
    if token < 256 or token == GPT2_EOT_ID or token in kept:
        return [token]
    left, right = bpe.split(token)
    return _expand(bpe, left, kept) + _expand(bpe, right, kept)
