"""Text parts of the audit: the gpt2 generator, the text classifiers and a tiny run_audit."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from panoramia_fl.audit import AuditConfig, ClassifierData, Records, run_audit
from panoramia_fl.audit.panoramia.components import AuditContext, make_classifier, make_generator
from panoramia_fl.audit.text.generator import Gpt2Generator, TextGeneratorOptions, start_marker
from panoramia_fl.audit.text.lm import LMShape, build_lm, sample_lm
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.ml.tasks import build_task
from panoramia_fl.ml.tasks.base import OptimizerSpec

CPU = torch.device("cpu")
TINY = {"n_layer": 1, "n_embd": 32, "n_head": 2, "dropout": 0.0}


def _chunks(
    n: int, *, vocab: int = 50, length: int = 64, seed: int = 0, marker: int | None = None
) -> np.ndarray:
    rng = np.random.default_rng(seed)
    start, step = rng.integers(1, vocab, n), rng.integers(1, 4, n)
    x = (start[:, None] + step[:, None] * np.arange(length)[None]) % (vocab - 1) + 1
    if marker is not None:
        x[: n // 4, 0] = marker  # a quarter are document starts
    return x.astype(np.int64)


def test_cached_sampling_matches_full_forward() -> None:
    model = build_lm(LMShape(vocab_size=40, n_positions=24, **TINY), seed=0).eval()
    prompts = np.random.default_rng(0).integers(0, 40, (5, 8))
    out = sample_lm(model, prompts, length=16, top_k=1, temperature=1.0, seed=0, device=CPU)
    # greedy decoding without the cache, one full forward per step
    seq = torch.as_tensor(prompts)
    with torch.no_grad():
        for _ in range(16):
            nxt = model(input_ids=seq).logits[:, -1].argmax(-1, keepdim=True)
            seq = torch.cat([seq, nxt], dim=1)
    assert np.array_equal(out, seq[:, 8:].numpy())
    with pytest.raises(ValueError, match="exceed"):
        sample_lm(model, prompts, length=20, top_k=5, temperature=1.0, seed=0, device=CPU)


@pytest.mark.parametrize("prompt_tokens", [32, 0])
def test_generator_writes_64_token_chunks(prompt_tokens: int) -> None:
    d_g = _chunks(80, marker=0)
    assert start_marker(d_g) == 0 and start_marker(_chunks(80)) is None
    gen = Gpt2Generator(
        TextGeneratorOptions(prompt_tokens=prompt_tokens, **TINY),
        vocab_size=50,
        epochs=2,
        batch_size=16,
        learning_rate=3e-3,
        device=CPU,
        public_pool=None,
    )
    quality = gen.fit(Records(d_g, None), seed=0)
    assert quality["generator_start_share"] == pytest.approx(0.25)
    assert quality["generator_prompt_chunks"] == (24 if prompt_tokens else 0)
    a = gen.sample(200, seed=1)
    assert a.y is None and a.x.shape == (200, 64) and a.x.dtype == np.int64
    assert a.x.min() >= 0 and a.x.max() < 50
    assert 0.1 < np.mean(a.x[:, 0] == 0) < 0.4  # document starts at D_G's rate
    assert np.array_equal(gen.sample(200, seed=1).x, a.x)
    assert not np.array_equal(gen.sample(200, seed=2).x, a.x)
    # a second fit on the same data (cached within the process) gives the same generator
    again = Gpt2Generator(
        TextGeneratorOptions(prompt_tokens=prompt_tokens, **TINY),
        vocab_size=50,
        epochs=2,
        batch_size=16,
        learning_rate=3e-3,
        device=CPU,
        public_pool=None,
    )
    assert again.fit(Records(d_g, None), seed=0) == quality
    assert np.array_equal(again.sample(200, seed=1).x, a.x)


def test_generator_pretraining_needs_and_uses_the_public_pool() -> None:
    options = TextGeneratorOptions(pretrain_epochs=1, prompt_tokens=8, **TINY)
    lonely = Gpt2Generator(
        options,
        vocab_size=50,
        epochs=1,
        batch_size=16,
        learning_rate=None,
        device=CPU,
        public_pool=None,
    )
    with pytest.raises(ValueError, match="public pool"):
        lonely.fit(Records(_chunks(40), None), seed=0)
    gen = Gpt2Generator(
        options,
        vocab_size=50,
        epochs=1,
        batch_size=16,
        learning_rate=None,
        device=CPU,
        public_pool=Records(_chunks(60, seed=5), None),
    )
    quality = gen.fit(Records(_chunks(40), None), seed=0)
    assert "generator_val_loss_pretrained" in quality
    assert gen.sample(10, seed=0).x.shape == (10, 64)


@pytest.mark.parametrize("design", ["gbm", "stacked"])
def test_text_classifiers_learn_loss_and_token_signals(design: str) -> None:
    rng = np.random.default_rng(0)

    def data(n: int) -> ClassifierData:
        s = rng.integers(0, 2, n)
        x = _chunks(n, seed=int(rng.integers(1e6)))
        x[s == 0, ::4] = 49  # non-members repeat one token
        losses = rng.normal(3.0, 1.0, (n, 63)) - 0.4 * s[:, None]
        feats = np.hstack([losses.mean(axis=1, keepdims=True), losses])
        ref = feats + rng.normal(0, 0.1, feats.shape)
        return ClassifierData(Records(x, None), feats, s, ref)

    task = build_task("text", model_name="gpt2_small", num_classes=50, input_shape=(64,))
    config = AuditConfig(
        quick=True, classifier={"design": design, "epochs": [2, 6], "gbm_iterations": [20, 50]}
    )
    clf = make_classifier(config, AuditContext(task=task, device=CPU))
    chosen = clf.fit(
        data(300), data(100), seed=0, select_by=lambda t, s: float(np.mean(s[np.argsort(-t)[:20]]))
    )
    assert chosen["design"] == design
    test = data(200)
    scores = clf.score(test)
    assert scores.shape == (200,) and np.all(np.isfinite(scores))
    from sklearn.metrics import roc_auc_score

    assert roc_auc_score(test.membership, scores) > 0.8


@pytest.fixture(scope="module")
def tiny_text_site() -> dict:
    data = load_dataset(
        "bible",
        options={
            "max_documents": 60,
            "vocab_size": 512,
            "max_chunks_per_document": 6,
            "public_fraction": 0.5,
        },
    )
    docs = np.unique(data.groups)
    members = data.x[np.isin(data.groups, docs[:20])]
    holdout = data.x[np.isin(data.groups, docs[20:])]
    task = build_task(
        "text",
        model_name="gpt2_small",
        num_classes=data.num_classes,
        input_shape=(64,),
        batch_size=16,
        optimizer=OptimizerSpec(name="adam", learning_rate=3e-3),
        model_options=TINY,
    )
    model = task.make_model()
    task.train_model(model, members, None, epochs=4, seed=0, device=CPU)
    return {
        "task": task,
        "model": model,
        "members": members,
        "holdout": holdout,
        "public": data.public_x,
    }


@pytest.mark.parametrize("kind", ["gpt2", "reference_pool"])
def test_run_audit_on_a_tiny_gpt2(tiny_text_site: dict, kind: str) -> None:
    site = tiny_text_site
    config = AuditConfig(
        quick=True,
        helper_epochs=1,
        device="cpu",
        # The generator as tiny as the target, one epoch of pretraining on the public pool
        # (the default size and three epochs cost most of the run and are not under test).
        generator={
            "kind": kind,
            "epochs": 1,
            "batch_size": 16,
            **({"options": {**TINY, "pretrain_epochs": 1}} if kind == "gpt2" else {}),
        },
        classifier={"gbm_iterations": [10, 20]},
    )
    res = run_audit(
        site["task"],
        site["model"],
        Records(site["members"], None),
        config,
        nonmembers=Records(site["holdout"], None),
        public_pool=Records(site["public"], None),
    )
    assert res.modality == "text" and res.generator_kind == kind
    assert len(site["members"]) >= 100
    assert res.sizes["m"] > 0 and 0 <= res.one_sided.c_lb.mean <= res.one_sided.ceiling + 1e-9
    assert 0 <= res.one_sided.c_eps_lb.mean <= res.one_sided.ceiling + 1e-9
    assert res.one_sided.eps_tilde.mean == pytest.approx(
        max(0.0, res.one_sided.c_eps_lb.mean - res.one_sided.c_lb.mean)
    )
    assert res.one_sided.rm_rn_eps_lb is not None and res.o1_eps_lb is not None
    if kind == "gpt2":
        assert res.quality["generator_train_chunks"] > 0
        assert "generator_val_loss_pretrained" in res.quality
    gen = make_generator(
        config,
        AuditContext(task=site["task"], device=CPU, public_pool=Records(site["public"], None)),
    )
    assert gen.kind == kind


def _documents(n_docs: int, chunks: int, *, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Chunks whose document shows in their tokens: each document draws from its own 12
    tokens of a 400-token vocabulary (names, places, topics of a real chapter)."""
    rng = np.random.default_rng(seed)
    words = [rng.choice(np.arange(1, 400), 12, replace=False) for _ in range(n_docs)]
    x = np.stack([rng.choice(words[d], 64) for d in range(n_docs) for _ in range(chunks)])
    return x.astype(np.int64), np.repeat(np.arange(n_docs) + 1000 * seed, chunks)


@pytest.mark.slow
def test_documents_stay_whole_so_an_untrained_model_shows_no_leakage() -> None:
    """An untrained f carries no membership signal. With chunk-level cuts, b and the MIA
    learn the documents of their training chunks and recognise test chunks of the same
    documents (RM;RN far above 0); with the documents as groups they see nothing."""
    (mx, mg), (nx, ng), (px, pg) = (
        _documents(n, 20, seed=s) for n, s in ((20, 1), (8, 2), (50, 3))
    )
    task = build_task(
        "text",
        model_name="gpt2_small",
        num_classes=400,
        input_shape=(64,),
        batch_size=32,
        optimizer=OptimizerSpec(name="adam", learning_rate=3e-3),
        model_options=TINY,
    )
    torch.manual_seed(0)
    untrained = task.make_model()
    config = AuditConfig(
        quick=True, repeats=2, helper_epochs=1, device="cpu", classifier={"gbm_iterations": [20]}
    )

    def audit(grouped: bool):
        def rec(x, g):
            return Records(x, None, g if grouped else None)

        return run_audit(
            task, untrained, rec(mx, mg), config, nonmembers=rec(nx, ng), public_pool=rec(px, pg)
        )

    chunk_level, grouped = audit(False), audit(True)
    assert chunk_level.one_sided.rm_rn_eps_lb.mean > 0.5
    assert grouped.one_sided.rm_rn_eps_lb.high == 0.0
    assert grouped.one_sided.eps_tilde.high == 0.0 and grouped.one_sided.c_lb.high < 0.3
