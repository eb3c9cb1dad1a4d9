"""Text datasets: chunking, the bible loader and the text_files loader (real files)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from panoramia_fl.ml.datasets import DataError, load_dataset, parse_options
from panoramia_fl.ml.datasets.text import chunk_documents, vocab_of


def test_chunk_documents_first_n_and_groups() -> None:
    docs = [list(range(1, 201)), list(range(1000, 1050)), list(range(2000, 2130))]
    x, doc, pos = chunk_documents(docs, chunk_tokens=64, max_chunks=2, bos=7)
    # doc 0: 1 + 200 tokens -> 3 full chunks, first 2 kept; doc 1: 51 tokens -> none;
    # doc 2: 131 tokens -> 2 chunks.
    assert x.shape == (4, 64) and x.dtype == np.int64
    assert doc.tolist() == [0, 0, 2, 2] and pos.tolist() == [0, 1, 0, 1]
    assert x[0, 0] == 7 and x[0, 1] == 1 and x[1, 0] == 64  # consecutive, bos first
    assert x[2, 0] == 7 and x[3, -1] == 2000 + 126
    all_x, all_doc, _ = chunk_documents(docs, chunk_tokens=64, max_chunks=None, bos=None)
    assert np.bincount(all_doc).tolist() == [3, 0, 2]


def test_bible_loader_chunks_and_public_documents() -> None:
    data = load_dataset(
        "bible",
        options={
            "max_documents": 24,
            "vocab_size": 1024,
            "max_chunks_per_document": 5,
            "public_fraction": 0.25,
        },
    )
    assert data.modality == "text" and data.y is None
    assert data.x.shape[1] == 64 and data.input_shape == (64,)
    assert data.num_classes == 1024 and int(data.x.max()) < 1024
    assert data.public_x is not None and data.public_x.shape[1] == 64
    assert data.info["public_documents"] == 6
    # groups: document ids, at most 5 chunks each, in document order
    _, counts = np.unique(data.groups, return_counts=True)
    assert counts.max() <= 5 and len(counts) == data.info["documents"] - 6
    assert data.sites is not None and len(data.sites) == len(data.x)
    vocab = vocab_of(data)
    first = np.flatnonzero(data.x[:, 0] == vocab.eot)
    assert len(first) == len(counts)  # one document start per site document
    text = vocab.decode(data.x[first[0]]) + vocab.decode(data.x[first[0] + 1])
    assert len(text) > 200 and "\ufffd" not in text
    # deterministic
    again = load_dataset(
        "bible",
        options={
            "max_documents": 24,
            "vocab_size": 1024,
            "max_chunks_per_document": 5,
            "public_fraction": 0.25,
        },
    )
    assert np.array_equal(again.x, data.x) and np.array_equal(again.groups, data.groups)


def _words(seed: int, n: int) -> str:
    rng = np.random.default_rng(seed)
    vocab = [
        "the",
        "patient",
        "was",
        "seen",
        "in",
        "clinic",
        "today",
        "and",
        "reported",
        "no",
        "pain",
        "after",
        "surgery",
        "follow",
        "up",
        "in",
        "two",
        "weeks",
        ".",
    ]
    return " ".join(rng.choice(vocab, size=n))


def test_text_files_folder_and_jsonl(tmp_path) -> None:
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    for i in range(6):
        (folder / ("sub" if i % 2 else "") / f"note{i}.txt").write_text(_words(i, 150 + 20 * i))
    (folder / "ignored.csv").write_text("a,b\n")
    data = load_dataset(
        "text_files", root=folder, options={"vocab_size": 400, "public_fraction": 0.2}
    )
    assert data.x.shape[1] == 64 and len(np.unique(data.groups)) == 5
    assert data.info["documents"] == 6 and data.public_x is not None

    jsonl = tmp_path / "docs.jsonl"
    jsonl.write_text(
        "\n".join(json.dumps({"body": _words(i, 200), "id": i}) for i in range(5)) + "\n\n"
    )
    data = load_dataset(
        "text_files", root=jsonl, options={"text_field": "body", "chunk_tokens": 32}
    )
    assert data.x.shape[1] == 32 and data.info["documents"] == 5
    assert vocab_of(data).decode(data.x[0])[:3] == _words(0, 200)[:3]


def test_text_files_errors(tmp_path) -> None:
    with pytest.raises(DataError, match="data.root: set it"):
        load_dataset("text_files")
    with pytest.raises(DataError, match="does not exist"):
        load_dataset("text_files", root=tmp_path / "missing")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match="no .txt files"):
        load_dataset("text_files", root=empty)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "fine"}) + "\n{not json\n")
    with pytest.raises(DataError, match=r"bad.jsonl:2: not a JSON object"):
        load_dataset("text_files", root=bad)
    bad.write_text(json.dumps({"body": "x"}) + "\n")
    with pytest.raises(DataError, match=r"bad.jsonl:1: no field 'text'"):
        load_dataset("text_files", root=bad)
    bad.write_text(json.dumps({"text": 3}) + "\n")
    with pytest.raises(DataError, match="is int, expected a string"):
        load_dataset("text_files", root=bad)
    short = tmp_path / "short"
    short.mkdir()
    (short / "a.txt").write_text("too short")
    with pytest.raises(DataError, match="need at least 2"):
        load_dataset("text_files", root=short)
    latin = tmp_path / "latin"
    latin.mkdir()
    (latin / "a.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(DataError, match="not valid utf-8"):
        load_dataset("text_files", root=latin)
    with pytest.raises(ValueError, match="data.options.vocab_size"):
        parse_options("bible", {"vocab_size": 10})
    with pytest.raises(ValueError, match="data.options.chunk_size"):
        parse_options("text_files", {"chunk_size": 64})
