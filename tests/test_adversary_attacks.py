"""A server that does not play fair (``audit.adversary``): crafted weights sent to a site
that trains them with the project's own local training (``clients.site_training``, real Opacus
under DP-SGD), the records rebuilt from its update and scored against its own records, each
against the baseline of an update computed on public records."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from panoramia_fl.audit.adversary import (
    ATTACKS,
    CraftedModel,
    SiteOptimizer,
    craft_dead,
    craft_imprint,
    craft_trap,
    rebuild,
    rebuilt_share,
    update_of,
)
from panoramia_fl.clients.privacy import AccountantHistory, DPSettings
from panoramia_fl.clients.site_training import train_locally
from panoramia_fl.contracts.secure_sum import FIXED_POINT_BITS
from panoramia_fl.ml.datasets.tabular import encode_frame
from panoramia_fl.ml.tasks.base import OptimizerSpec, TorchTask, build_task

CPU = torch.device("cpu")
BATCH = 32


@pytest.fixture(scope="module")
def table() -> tuple[np.ndarray, np.ndarray, dict]:
    """A small table encoded as the data layer encodes every tabular dataset: four numeric
    columns standardised, two categorical ones one-hot."""
    rng = np.random.default_rng(7)
    n = 600
    frame = pd.DataFrame(
        {
            "age": rng.integers(18, 90, n),
            "income": rng.lognormal(10, 1, n),
            "visits": rng.poisson(3, n),
            "score": rng.normal(0, 1, n),
            "plan": rng.choice(["a", "b", "c"], n),
            "region": rng.choice(["n", "s", "e", "w"], n),
        }
    )
    encoded = encode_frame(
        frame,
        numeric=["age", "income", "visits", "score"],
        categorical=["plan", "region"],
        fit_rows=np.arange(n),
        source="test table",
    )
    labels = (frame["score"].to_numpy() + (frame["plan"] == "a").to_numpy() > 0.5).astype(np.int64)
    return encoded.x, labels, encoded.schema


def _task(d: int, schema: dict, optimizer: str, lr: float) -> TorchTask:
    return build_task(
        "tabular",
        model_name="mlp",
        num_classes=2,
        input_shape=(d,),
        batch_size=BATCH,
        optimizer=OptimizerSpec(name=optimizer, learning_rate=lr),
        schema=schema,
        model_options={"hidden": (96, 32, 16)},
    )


def _update(
    task: TorchTask, crafted: CraftedModel, x: np.ndarray, y: np.ndarray, **training
) -> dict[str, torch.Tensor]:
    """The site's update as the server sees it: one local step (FedSGD) unless told."""
    training.setdefault("local_steps", 1)
    result = train_locally(
        task, crafted.state_dict, x=x, y=y, epochs=1, seed=3, device=CPU, **training
    )
    return update_of(crafted, result.state_dict)


def _shares(task, crafted, table, **training):
    """(site's share, baseline's share): the site trains on its 32 records; the baseline on
    32 public ones (an update with no private signal), both scored against the site's."""
    x, y, schema = table
    site, public = slice(0, BATCH), slice(300, 300 + BATCH)
    records = torch.as_tensor(x[site])
    rebuilt = rebuild(crafted, _update(task, crafted, x[site], y[site], **training))
    chance = rebuild(crafted, _update(task, crafted, x[public], y[public], **training))
    return (
        rebuilt_share(rebuilt, records, schema=schema),
        rebuilt_share(chance, records, schema=schema),
    )


def test_imprint_rebuilds_most_of_a_fedsgd_batch_exactly(table):
    """Adam, one step: at least half of the batch rebuilt with every field (numeric within
    1% of the range, one-hot exact); the public batch's update rebuilds none of the site's."""
    x, _, schema = table
    task = _task(x.shape[1], schema, "adam", 1e-3)
    crafted = craft_imprint(
        task.make_model(),
        public=torch.as_tensor(x[300:]),
        seed=0,
        optimizer=SiteOptimizer("adam", 1e-3),
        batch_size=BATCH,
    )
    assert ATTACKS.get("imprint") is craft_imprint
    site, baseline = _shares(task, crafted, table)
    assert site.share >= 0.5, site
    assert baseline.share <= 0.05, baseline


def test_imprint_read_through_a_fixed_point_secure_sum_needs_its_resolution(table):
    """The secure sum carries weight changes in steps of 2**-32: at a learning rate of 1e-4
    Adam's linear steps at the default scale are about that size and nothing comes back;
    crafted for that resolution, the same update rounded to it still gives half a batch."""
    x, y, schema = table
    task = _task(x.shape[1], schema, "adam", 1e-4)
    step = 2.0**-FIXED_POINT_BITS
    records = torch.as_tensor(x[:BATCH])
    shares = []
    for resolution in (0.0, step):
        crafted = craft_imprint(
            task.make_model(),
            public=torch.as_tensor(x[300:]),
            seed=0,
            optimizer=SiteOptimizer("adam", 1e-4),
            batch_size=BATCH,
            resolution=resolution,
        )
        update = _update(task, crafted, x[:BATCH], y[:BATCH])
        rounded = {key: torch.round(delta / step) * step for key, delta in update.items()}
        shares.append(rebuilt_share(rebuild(crafted, rounded), records, schema=schema).share)
    assert shares[0] <= 0.1 and shares[1] >= 0.5, shares


def test_trap_rebuilds_more_than_its_baseline(table):
    x, _, schema = table
    task = _task(x.shape[1], schema, "sgd", 0.05)
    crafted = craft_trap(
        task.make_model(),
        public=torch.as_tensor(x[300:]),
        seed=0,
        optimizer=SiteOptimizer("sgd", 0.05),
        batch_size=BATCH,
    )
    site, baseline = _shares(task, crafted, table)
    assert site.share >= baseline.share + 0.1, (site, baseline)


def test_dead_model_trains_to_an_exactly_zero_update(table):
    """Two epochs of Adam on real records: every parameter's update is exactly zero but the
    output layer's bias (label shares only); the honest model's is not (the control)."""
    x, y, schema = table
    task = _task(x.shape[1], schema, "adam", 1e-3)
    model = task.make_model()
    dead = craft_dead(model, public=torch.as_tensor(x[300:]))
    update = _update(task, dead, x[:BATCH], y[:BATCH], local_steps=None)
    moved = {key for key, delta in update.items() if bool(delta.any())}
    assert moved == {"net.6.bias"}
    assert rebuild(dead, update).shape == (0, x.shape[1])
    honest = CraftedModel("dead", dict(model.state_dict()), dead.layer, dead.units, (x.shape[1],))
    assert bool(_update(task, honest, x[:BATCH], y[:BATCH])["net.0.weight"].any())


def _dp(sigma: float) -> dict:
    settings = DPSettings(
        target_epsilon=None,
        noise_multiplier=sigma,
        delta=1e-5,
        max_grad_norm=1.0,
        accountant="rdp",
        total_epochs=1,
        total_steps=1,
    )
    return {"dp": settings, "accountant_history": AccountantHistory("rdp", [])}


def test_record_level_dp_noise_takes_the_imprint_away(table):
    """Opacus DP-SGD, one step: at a negligible noise multiplier the imprint still rebuilds
    records (clipping scales a record's row and bias alike); at sigma 1 nothing."""
    x, _, schema = table
    task = _task(x.shape[1], schema, "sgd", 0.05)
    task.dp = True
    crafted = craft_imprint(
        task.make_model(),
        public=torch.as_tensor(x[300:]),
        seed=0,
        optimizer=SiteOptimizer("sgd", 0.05),
        batch_size=BATCH,
    )
    quiet, _ = _shares(task, crafted, table, **_dp(1e-6))
    loud, _ = _shares(task, crafted, table, **_dp(1.0))
    assert quiet.share >= 0.3, quiet
    assert loud.share == 0.0, loud


def _shapes(n: int, rng: np.random.Generator) -> np.ndarray:
    """Bright rectangles (two per image) on a dark background, uint8 like the image data."""
    images = np.zeros((n, 1, 28, 28), dtype=np.uint8)
    for image in images:
        for _ in range(2):
            top, left = rng.integers(0, 20, 2)
            height, width = rng.integers(4, 12, 2)
            image[0, top : top + height, left : left + width] = rng.integers(120, 256)
    return images


def test_imprint_through_the_small_cnn_rebuilds_what_its_pooling_lets_through():
    """The small CNN (narrowed to 8 channels: still every shift of the 4x4 window): the
    convolutions pass the image's maximum filter to the head, one Adam step of a batch of
    16 gives most images back at SSIM >= 0.9 against what the architecture lets through;
    the public batch's update none; against the originals fewer (pooling loses detail)."""
    rng = np.random.default_rng(1)
    task = build_task(
        "image",
        model_name="small_cnn",
        num_classes=10,
        input_shape=(1, 28, 28),
        batch_size=16,
        optimizer=OptimizerSpec(name="adam", learning_rate=1e-3),
        model_options={"width": 8},
    )
    public, site, decoy = _shapes(128, rng), _shapes(16, rng), _shapes(16, rng)
    labels = rng.integers(0, 10, 16)
    crafted = craft_imprint(
        task.make_model(),
        public=task.tensors(public, np.zeros(128, dtype=np.int64))[0],
        seed=0,
        optimizer=SiteOptimizer("adam", 1e-3),
        batch_size=16,
    )
    assert crafted.passthrough is not None and crafted.passthrough.full
    records = task.tensors(site, labels)[0]
    rebuilt = rebuild(crafted, _update(task, crafted, site, labels))
    chance = rebuild(crafted, _update(task, crafted, decoy, labels))
    through = rebuilt_share(
        rebuilt, records, reference="passthrough", passthrough=crafted.passthrough
    ).share
    assert through >= 0.5
    chance_share = rebuilt_share(
        chance, records, reference="passthrough", passthrough=crafted.passthrough
    ).share
    assert chance_share <= 0.1
    assert rebuilt_share(rebuilt, records).share <= through
