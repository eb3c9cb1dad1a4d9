"""The weights cache: an entry reads back as exactly the weights stored under its key, or not
at all (with a warning); two processes filling it at once leave one whole entry."""

from __future__ import annotations

import logging
import multiprocessing
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from panoramia_fl.audit.panoramia.components import Records
from panoramia_fl.simulations.experiment_config import apply_overrides, validate_config
from panoramia_fl.simulations.reference_models import reference_keys
from panoramia_fl.simulations.run_dir import DatasetMeta
from panoramia_fl.simulations.weights_cache import (
    CACHE_ENV,
    WeightsCache,
    cache_dir_setting,
    cache_summary,
    clear_cache,
    default_cache_dir,
    fingerprint,
)

KEY = fingerprint({"what": "test", "n": 1})


def _state(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "w": torch.randn(4, 3, generator=g),
        "b": torch.randn(3, generator=g),
        "steps": torch.tensor(7),
    }


def _same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_an_entry_reads_back_bit_for_bit(tmp_path):
    cache = WeightsCache(tmp_path, "reference-models")
    assert cache.load(KEY) is None
    cache.store(KEY, _state(), about={"index": 0})
    loaded = cache.load(KEY)
    assert loaded is not None and _same(loaded, _state())
    assert cache_summary(tmp_path)[0] == 1


def _flip_a_weight_bit(path: Path) -> None:
    """One bit of ``w`` in the file (torch.save stores a tensor's bytes as they are): the
    file still loads, as other weights."""
    data = bytearray(path.read_bytes())
    data[data.index(_state()["w"].numpy().tobytes()) + 5] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2]),  # torn
        lambda p: p.write_bytes(b"not a checkpoint"),
        _flip_a_weight_bit,
    ],
    ids=["torn", "foreign", "flipped-bit"],
)
def test_a_damaged_entry_is_a_miss_with_a_warning(tmp_path, caplog, damage):
    cache = WeightsCache(tmp_path, "reference-models")
    cache.store(KEY, _state(), about={})
    damage(cache.path(KEY))
    with caplog.at_level(logging.WARNING, logger="panoramia_fl"):
        assert cache.load(KEY) is None
    assert "trained again" in caplog.text and str(cache.path(KEY)) in caplog.text
    cache.store(KEY, _state(), about={})  # the retrained weights replace it
    loaded = cache.load(KEY)
    assert loaded is not None and _same(loaded, _state())


def test_an_entry_under_another_name_is_not_a_hit(tmp_path, caplog):
    cache = WeightsCache(tmp_path, "reference-models")
    other = fingerprint({"what": "test", "n": 2})
    cache.store(other, _state(1), about={})
    cache.path(other).rename(cache.path(KEY))
    with caplog.at_level(logging.WARNING, logger="panoramia_fl"):
        assert cache.load(KEY) is None
    assert "not its own" in caplog.text


def _fill(root: str, out: str, seed: int) -> None:
    """A process that trains (stands in: writes a file) only on a miss, under the lock."""
    cache = WeightsCache(Path(root), "reference-models")
    with cache.locked([KEY]):
        if cache.load(KEY) is None:
            Path(out).joinpath(f"trained-{seed}").touch()
            time.sleep(0.5)  # training takes a while: the other process reaches the lock
            cache.store(KEY, _state(), about={"by": seed})


def test_two_processes_filling_one_key_train_it_once(tmp_path):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_fill, args=(str(tmp_path), str(tmp_path), s)) for s in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(list(tmp_path.glob("trained-*"))) == 1
    loaded = WeightsCache(tmp_path, "reference-models").load(KEY)
    assert loaded is not None and _same(loaded, _state())


def test_the_folder_comes_from_the_environment_or_is_off(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "c"))
    assert cache_dir_setting() == tmp_path / "c"
    monkeypatch.setenv(CACHE_ENV, "off")
    assert cache_dir_setting() is None and WeightsCache.from_env("x") is None
    monkeypatch.delenv(CACHE_ENV)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_dir_setting() == default_cache_dir() == tmp_path / "xdg" / "panoramia-fl"


def test_clear_removes_entries_and_nothing_else(tmp_path):
    cache = WeightsCache(tmp_path, "reference-models")
    cache.store(KEY, _state(), about={})
    with cache.locked([KEY]):
        pass
    keep = tmp_path / "notes.txt"
    keep.write_text("mine")
    files, size = clear_cache(tmp_path)
    assert files == 2 and size > 0  # the entry and its lock
    assert cache.load(KEY) is None and keep.read_text() == "mine"
    assert cache_summary(tmp_path) == (0, 0)


def test_a_folder_that_cannot_be_written_turns_the_cache_off(monkeypatch, tmp_path, caplog):
    blocked = tmp_path / "file"
    blocked.write_text("a file where the folder would be")
    monkeypatch.setenv(CACHE_ENV, str(blocked))
    with caplog.at_level(logging.WARNING, logger="panoramia_fl"):
        assert WeightsCache.from_env("reference-models") is None
    assert "cannot be written" in caplog.text


def _keys(overrides: dict, records: Records | None = None) -> list[str]:
    raw = {
        "name": "keys",
        "seed": 1,
        "data": {"name": "digits"},
        "audit": {"settings": {"calibration": {"reference_models": 2, "epochs": 1}}},
    }
    config = validate_config(apply_overrides(raw, overrides))
    meta = DatasetMeta("digits", "image", 10, (1, 8, 8))
    x = np.arange(40 * 64, dtype=np.float32).reshape(40, 1, 8, 8)
    records = records or Records(x, np.arange(40) % 10)
    return reference_keys(config, meta, records)


def test_the_reference_models_key_follows_what_decides_their_weights():
    base = _keys({})
    assert len(set(base)) == 2  # one per model
    # A replicate (another run seed, its partition's kept) or a sweep over the training
    # rounds or the audit repeats: the same reference models.
    assert _keys({"seed": 2, "partition.seed": 1}) == base
    assert _keys({"fl.rounds": 7, "audit.settings.repeats": 9}) == base
    # torch_threads auto (the default) is one thread at one CPU: the key a pinned 1 gave.
    assert _keys({"resources.torch_threads": 1}) == base
    changed = [
        {"audit.settings.calibration.epochs": 2},
        {"audit.settings.calibration.fraction": 0.3},
        {"seed": 2},  # its partition, public split and reference models with it
        {"fl.learning_rate": 0.01},  # they train with the sites' optimizer
        {"fl.batch_size": 16},
        {"model.options": {"width": 8}},
        {"dp.level": "record", "dp.noise_multiplier": 1.0},  # GroupNorm instead of BatchNorm
        {"resources.torch_threads": 2},
        {"resources.audit_num_cpus": 2},  # auto: two threads where they train
    ]
    for overrides in changed:
        assert set(_keys(overrides)).isdisjoint(base), overrides
    x = np.arange(40 * 64, dtype=np.float32).reshape(40, 1, 8, 8)
    x[3, 0, 0, 0] += 1
    assert set(_keys({}, Records(x, np.arange(40) % 10))).isdisjoint(base)
