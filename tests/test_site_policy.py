"""A site's policy, which the operator's run config cannot override: the least DP it trains
under, whether per-record scores and traceback frames may leave it.

The project's own ClientApp runs in a real Flower simulation with each site's runtime given
the policy a SuperNode's node config would set; the run asks for per-record scores and
trains without record-level DP.
"""

from __future__ import annotations

import json
import logging
import stat
from dataclasses import replace
from pathlib import Path

import pytest
from builders import run_files
from flwr.app import Context
from flwr.simulation import run_simulation

from panoramia_fl.clients.client_app import build_client_app
from panoramia_fl.clients.site_policy import (
    ALLOW_SCORES_KEY,
    MAX_EPSILON_KEY,
    SitePolicy,
    SitePolicyError,
    SiteRefusal,
)
from panoramia_fl.contracts.run_files import site_refusals_name
from panoramia_fl.contracts.wire import AuditFailure
from panoramia_fl.simulations.apps import SiteResolver, server_settings
from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.run_dir import prepare_run_dir

pytestmark = pytest.mark.ray

NODE_POLICIES = {
    0: {MAX_EPSILON_KEY: 4.0},  # trains only under DP-SGD at epsilon <= 4
    1: {},  # the defaults: no per-record scores, no tracebacks
}


def test_the_defaults_are_strict_and_bad_values_name_the_key():
    policy = SitePolicy.from_node_config({"partition-id": 0})
    assert policy == SitePolicy(max_epsilon=None, allow_scores=False, allow_tracebacks=False)
    assert SitePolicy.from_node_config({ALLOW_SCORES_KEY: "true"}).allow_scores
    with pytest.raises(SitePolicyError, match=ALLOW_SCORES_KEY):
        SitePolicy.from_node_config({ALLOW_SCORES_KEY: "maybe"})
    with pytest.raises(SitePolicyError, match=MAX_EPSILON_KEY):
        SitePolicy.from_node_config({MAX_EPSILON_KEY: -1})
    strict = SitePolicy(max_epsilon=2.0)
    with pytest.raises(SiteRefusal, match="policy-max-epsilon=2 refuses dp.target_epsilon=8"):
        strict.check_training(record_dp=True, target_epsilon=8.0)
    with pytest.raises(SiteRefusal, match="refuses an update at record-level epsilon 2.5"):
        strict.check_release(2.5)
    strict.check_training(record_dp=True, target_epsilon=2.0)


def test_tracebacks_leave_only_when_the_policy_allows():
    try:
        raise ValueError("/secret/site/path.npz is broken")
    except ValueError as err:
        kept = AuditFailure.of(err, with_traceback=False)
        sent = AuditFailure.of(err, with_traceback=True)
    assert kept.traceback is None and "File " not in kept.to_error().reason
    assert sent.traceback is not None and "File " in sent.to_error().reason


@pytest.fixture(scope="module")
def refused_run(tmp_path_factory, ray_init_args) -> Path:
    logging.getLogger("flwr").setLevel(logging.ERROR)
    config = validate_config(
        {
            "name": "policy",
            "data": {"name": "digits"},
            "partition": {"scheme": "iid", "num_sites": 2},
            "model": {"name": "small_cnn", "options": {"width": 4}},
            "fl": {"rounds": 1, "local_epochs": 1, "batch_size": 64},
            "audit": {"enabled": True, "settings": {"return_scores": True, "quick": True}},
        }
    )
    run_dir = tmp_path_factory.mktemp("policy") / "run"
    meta = prepare_run_dir(config, run_files(run_dir))
    sites = SiteResolver(config, meta, run_files(run_dir))
    state = run_files(run_dir).site_state

    def resolve(context: Context):
        # What DeploymentResolver adds from a SuperNode's node config.
        site = int(context.node_config["partition-id"])
        policy = SitePolicy.from_node_config(NODE_POLICIES[site])
        return replace(sites(context), policy=policy, refusal_log=state / site_refusals_name(site))

    from panoramia_fl.server.server_app import build_server_app

    settings = server_settings(
        config, meta, run_files(run_dir), phases=("train", "audit"), progress=False
    )
    run_simulation(
        server_app=build_server_app(settings),
        client_app=build_client_app(resolve),
        num_supernodes=2,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": ray_init_args,
        },
    )
    return run_dir


def test_a_site_refuses_what_its_policy_forbids_and_logs_it(refused_run):
    layout = run_files(refused_run)
    (entry,) = [json.loads(line) for line in layout.metrics.read_text().splitlines()]
    # Site 0 wants DP-SGD: it refused the round, naming its key; site 1 trained.
    assert list(entry["sites"]) == ["1"]
    assert "SiteRefusal" in entry["failures"]["0"]
    assert "policy-max-epsilon=4 refuses training without record-level DP" in entry["failures"]["0"]
    for site in (0, 1):
        audit = json.loads(layout.audit(site).read_text())
        assert audit["status"] == "failed" and audit["result"] is None
        assert (
            "policy-allow-scores=false refuses audit.settings.return_scores=true"
            in (audit["error"])
        )
        assert audit["traceback"] is None
        refusals = [
            json.loads(line)
            for line in (layout.site_state / site_refusals_name(site)).read_text().splitlines()
        ]
        assert {r["policy_key"] for r in refusals} >= {"policy-allow-scores=false"}
        log = layout.site_state / site_refusals_name(site)
        assert stat.S_IMODE(log.stat().st_mode) == 0o600  # the site's own, owner-only
    # No per-record score reached the server's files.
    for path in refused_run.rglob("*.json*"):
        if "site_state" not in path.parts:
            assert '"scores": [' not in path.read_text() and '"scores": {' not in path.read_text()
