"""Tabular components in the audit pipeline: registries, the classifier, a real run_audit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from builders import run_files
from flwr.app import Context, RecordDict

from panoramia_fl.audit import run_audit
from panoramia_fl.audit.config import AuditConfig
from panoramia_fl.audit.panoramia.components import (
    AuditContext,
    ClassifierData,
    Records,
    make_classifier,
    make_generator,
)
from panoramia_fl.audit.stats.bounds import lower_bound
from panoramia_fl.audit.tabular.classifier import GradientBoostingMembership
from panoramia_fl.audit.tabular.generators import MSTGenerator
from panoramia_fl.contracts.json_values import json_safe
from panoramia_fl.ml.datasets import load_dataset
from panoramia_fl.ml.tasks import build_task

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def randhie():
    return load_dataset("randhie", options={"unit": "person"})


def test_registries_build_tabular_components(randhie) -> None:
    task = build_task(
        "tabular",
        model_name="mlp",
        num_classes=2,
        input_shape=randhie.input_shape,
        schema=randhie.info["schema"],
    )
    context = AuditContext(task=task, device=CPU)
    config = AuditConfig(
        generator={"kind": "mst", "filter": True, "filter_confidence": 0.9}, quick=True
    )
    gen = make_generator(config, context)
    assert isinstance(gen, MSTGenerator) and gen.kind == "mst+filter"
    assert gen.schema is randhie.info["schema"] and gen.filter.confidence == 0.9
    clf = make_classifier(config, context)
    assert isinstance(clf, GradientBoostingMembership)
    assert clf.iterations == sorted(config.classifier.gbm_iterations)[:2]


def test_classifier_selects_on_validation_and_uses_the_loss() -> None:
    rng = np.random.default_rng(0)

    def data(n: int) -> ClassifierData:
        s = np.r_[np.ones(n), np.zeros(n)].astype(np.int64)
        x = rng.normal(size=(2 * n, 4)).astype(np.float32)  # rows carry no signal
        loss = np.where(s == 1, rng.exponential(0.2, 2 * n), rng.exponential(1.0, 2 * n))
        feats = np.column_stack([loss, rng.normal(size=(2 * n, 2))]).astype(np.float32)
        ref = np.column_stack([rng.exponential(1.0, 2 * n), feats[:, 1:]]).astype(np.float32)
        return ClassifierData(Records(x, rng.integers(0, 2, 2 * n)), feats, s, ref)

    clf = GradientBoostingMembership(iterations=[10, 40], learning_rates=[0.1])
    seen: list[int] = []

    def select_by(scores: np.ndarray, s: np.ndarray) -> float:
        seen.append(len(scores))
        return lower_bound(scores, s, beta=0.025).lower_bound

    chosen = clf.fit(data(300), data(150), select_by=select_by, seed=0)
    assert seen == [300, 300] and chosen["rounds"] in (10, 40)
    assert chosen["inputs"] == 4 + 1 + 3 + 3 + 1  # x, y, features, reference, loss difference
    test = data(200)
    scores = clf.score(test)
    assert scores.shape == (400,)
    assert scores[test.membership == 1].mean() > scores[test.membership == 0].mean()
    assert lower_bound(scores, test.membership, beta=0.025).lower_bound > 0.5


def test_run_audit_on_tabular_mlp_with_nonmembers(randhie) -> None:
    rng = np.random.default_rng(1)
    rows = rng.permutation(len(randhie))
    # As many real non-members as member slots: O(1)'s coins show one record per slot.
    mem, non = rows[:900], rows[900:1500]
    members = Records(randhie.x[mem], randhie.y[mem])
    nonmembers = Records(randhie.x[non], randhie.y[non])
    task = build_task(
        "tabular",
        model_name="mlp",
        num_classes=2,
        input_shape=randhie.input_shape,
        schema=randhie.info["schema"],
        model_options={"hidden": [64, 32]},
    )
    torch.manual_seed(0)  # the initial weights too: the same target on every run
    model = task.make_model()
    task.train_model(model, members.x, members.y, epochs=100, seed=0, device=CPU)
    acc_in = task.evaluate(model, members.x, members.y, device=CPU)["accuracy"]
    acc_out = task.evaluate(model, nonmembers.x, nonmembers.y, device=CPU)["accuracy"]
    assert acc_in > acc_out + 0.2  # over-fitted: there is something to find

    config = AuditConfig(
        quick=True,
        helper_epochs=3,
        device="cpu",
        seed=0,
        generator={"kind": "mst"},
        classifier={"gbm_iterations": [20, 60]},
    )
    result = run_audit(task, model, members, config, nonmembers=nonmembers)
    assert result.modality == "tabular" and result.generator_kind == "mst"
    assert result.sizes["members"] == 900 and result.sizes["nonmembers"] == 600
    rep = result.repeats[0]
    one = rep.one_sided
    assert 0 <= one.c_lb <= one.ceiling + 1e-9 and 0 <= one.c_eps_lb <= one.ceiling + 1e-9
    assert one.eps_tilde == pytest.approx(max(0.0, one.c_eps_lb - one.c_lb))
    assert result.one_sided.rm_rn_eps_lb is not None and result.o1_eps_lb is not None
    # The over-fitted MLP leaks through its loss on real data: O(1) finds it.
    assert result.o1_eps_lb.mean > 0
    for key in ("tv_1way_mean", "tv_2way_mean", "rare_value_fraction", "baseline_auc"):
        assert key in result.quality
    assert json_safe(result)["generator_kind"] == "mst"


class _StopAtTheGenerator(Exception):
    pass


def test_a_sites_audit_gets_the_datasets_schema(tmp_path, monkeypatch) -> None:
    """A federated tabular audit reads the encoding the dataset wrote, never infers it:
    ``dataset.json`` (simulation) and the ``dataset-meta`` run config (deployment) carry the
    schema to every site's task, and the site's MST generator resolves its attributes from it.
    """
    import panoramia_fl.audit.tabular.generators as tabular_generators
    from panoramia_fl.deployment.flower_apps import read_run
    from panoramia_fl.deployment.flwr_run_files import run_config_values
    from panoramia_fl.simulations.apps import SiteResolver
    from panoramia_fl.simulations.experiment_config import load_config
    from panoramia_fl.simulations.run_dir import DatasetMeta, prepare_run_dir

    config = load_config(
        Path(__file__).resolve().parents[1] / "configs" / "tabular.yaml",
        [
            "data.options.max_rows=600",
            "partition.num_sites=2",
            "audit.settings.helper_epochs=1",
            "audit.settings.calibration.reference_models=0",
            "audit.settings.generator.kind=mst",
            "audit.settings.generator.filter=false",
        ],
    )
    schema = load_dataset("randhie", options=config.data.options).info["schema"]
    run_dir = tmp_path / "run"
    meta = prepare_run_dir(config, run_files(run_dir))
    assert meta.schema == schema and DatasetMeta.read(run_files(run_dir)) == meta
    # A site on another machine gets it from the run config alone.
    remote = read_run(
        {**run_config_values(config, run_files(run_dir)), "run-dir": "/elsewhere/run"}
    )
    assert remote.meta.schema == schema

    context = Context(
        run_id=1, node_id=1, node_config={"partition-id": 1}, state=RecordDict(), run_config={}
    )
    runtime = SiteResolver(config, remote.meta, run_files(run_dir))(context)
    assert runtime.task.schema == schema and runtime.audit_runner is not None

    seen: list[object] = []

    def resolve_attributes(x, given):
        seen.append(given)
        raise _StopAtTheGenerator  # the rest of the audit is not what this test is about

    monkeypatch.setattr(tabular_generators, "resolve_attributes", resolve_attributes)
    with pytest.raises(_StopAtTheGenerator):
        runtime.audit_runner(runtime.task, runtime.task.make_model(), runtime.data, 0, {}, {})
    assert seen == [schema]
