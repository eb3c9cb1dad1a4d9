"""One bad site cannot crash the server, poison the weights or pose as another site.

The real ServerApp (:func:`server.server_app.build_server_app`) runs in a real Flower simulation
with five sites: sites 0 and 1 reply as the project's ClientApp would, sites 2-4 send a
different malformed reply each round and each audit (every defect the security review
reproduced, and a few more). The run must finish with the good sites' weights, metrics and
audits exactly as if the bad sites had not answered, and each bad reply must be named as
that site's failure. A second small run checks the client-level DP ledger when sampled
sites drop out.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from builders import make_result, run_files
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.simulation import run_simulation

from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.contracts.checkpoint import load_checkpoint
from panoramia_fl.contracts.json_values import json_safe
from panoramia_fl.contracts.run_log import read_rounds
from panoramia_fl.contracts.site_audit import SiteAudit
from panoramia_fl.contracts.wire import (
    ARRAYS,
    AUDIT,
    AUDIT_QUERY,
    DP_EPSILON,
    METRICS,
    NUM_EXAMPLES,
    SITE_ID,
    TRAIN_LOSS,
    UNIT_WEIGHT,
    WHOAMI,
    TrainReply,
    WhoamiReply,
    audit_record,
    kind_key,
)
from panoramia_fl.server.client_dp import ClientDPAccounting, ClientDPSettings, gaussian_epsilon
from panoramia_fl.server.server_app import ServerSettings, build_server_app
from panoramia_fl.server.strategy import RoundReplies, RoundWriter, StrategySettings, make_strategy

pytestmark = pytest.mark.ray

SITES = 5
ROUNDS = 3
STEP = {0: 1.0, 1: 3.0}
"""How far each good site moves every weight per round."""
EXAMPLES = {0: 10, 1: 30}


def _site(context: Context) -> int:
    return int(context.node_config["partition-id"])


def _good_train(site: int, msg: Message, *, private: bool) -> tuple[dict[str, Any], dict[str, Any]]:
    """A well-formed reply; ``private`` (client-level DP): no loss, no count."""
    state = msg.content.array_records[ARRAYS].to_torch_state_dict()
    arrays = {k: v + STEP.get(site, 0.0) for k, v in state.items()}
    loss, count = (None, None) if private else (0.5 + site, EXAMPLES.get(site, 10))
    reply = TrainReply(site_id=site, train_loss=loss, num_examples=count)
    return arrays, dict(reply.to_record())


def _bad_train(site: int, rnd: int, arrays: dict, metrics: dict) -> tuple[dict | None, dict]:
    """Site ``site``'s malformed reply of round ``rnd`` (None arrays: no ArrayRecord)."""
    case = (rnd, site)
    if case == (1, 2):
        # A missing key (WireError was uncaught); under DP, the loss no reply may carry.
        if metrics.pop(TRAIN_LOSS, None) is None:
            metrics[TRAIN_LOSS] = 0.5
    elif case == (1, 3):
        metrics[NUM_EXAMPLES] = -100  # with another site's +100: ZeroDivisionError
    elif case == (1, 4):
        metrics[TRAIN_LOSS] = math.nan
    elif case == (2, 2):
        metrics[SITE_ID] = 0  # poses as site 0
        metrics[TRAIN_LOSS] = 99.0
    elif case == (2, 3):
        arrays = {k: torch.zeros(v.numel() + 1) for k, v in arrays.items()}  # wrong shape
    elif case == (2, 4):
        arrays = {k: torch.full_like(v, math.nan) for k, v in arrays.items()}  # poisoned
    elif case == (3, 2):
        metrics[DP_EPSILON] = 1.0  # a DP-SGD key in a run without it: Flower's keys differ
    elif case == (3, 3):
        metrics[NUM_EXAMPLES] = 0
    elif case == (3, 4):
        return None, metrics
    return arrays, metrics


BAD_TRAIN_REASONS = {
    (1, 2): "'train-loss' is missing",
    (1, 3): "'num-examples' must be > 0",
    (1, 4): "'train-loss' must be finite",
    (2, 2): "claims site 0, but node",
    (2, 3): "weight 'w' has shape [5], expected [4]",
    (2, 4): "weight 'w' holds NaN",
    (3, 2): "'dp-epsilon' is not sent without record-level DP",
    (3, 3): "'num-examples' must be > 0",
    (3, 4): "no 'arrays' record",
}


def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


BAD_AUDITS = {
    2: ("deep", "nests deeper than"),
    3: ("negative-dp", "'dp-epsilon' must be >= 0"),
    4: ("negative-eps", "result-json.one_sided.eps_tilde is an epsilon and negative"),
}
RESULT = make_result([1.0, 1.0], [1.25, 1.25])
"""A good site's audit: eps_tilde 0.25 in both repeats."""


def _audit_record(site: int) -> ConfigRecord:
    results = SiteResults(panoramia=RESULT)
    record = audit_record(
        SiteAudit(site_id=site, n_members=10, n_holdout=5, elapsed_s=0.5, results=results)
    )
    kind = BAD_AUDITS.get(site, ("good", ""))[0]
    if kind == "deep":
        record[kind_key("result")] = '{"x": ' + _nested(100_000) + "}"  # RecursionError
    elif kind == "negative-dp":
        record[DP_EPSILON] = -2.0
    elif kind == "negative-eps":
        data = json_safe(RESULT)
        data["one_sided"]["eps_tilde"]["mean"] = -3.0
        record[kind_key("result")] = json.dumps(data)
    return record


def fuzz_client_app(*, private: bool = False) -> ClientApp:
    """Sites whose replies are well formed (``private``: as under client-level DP), site 2
    and above malformed in their own way each round."""
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        site = _site(context)
        arrays, metrics = _good_train(site, msg, private=private)
        rnd = int(msg.content.config_records["config"]["server-round"])
        if site >= 2:
            arrays, metrics = _bad_train(site, rnd, arrays, metrics)  # type: ignore[assignment]  # malformed on purpose
        content = RecordDict({METRICS: MetricRecord(metrics)})
        if arrays is not None:
            content[ARRAYS] = ArrayRecord(arrays)
        return Message(content=content, reply_to=msg)

    @app.query(WHOAMI)
    def whoami(msg: Message, context: Context) -> Message:
        reply = WhoamiReply(site_id=_site(context)).to_record()
        return Message(content=RecordDict({METRICS: reply}), reply_to=msg)

    @app.query(AUDIT_QUERY)
    def audit(msg: Message, context: Context) -> Message:
        content = RecordDict({AUDIT: _audit_record(_site(context))})
        return Message(content=content, reply_to=msg)

    return app


def _simulate(
    run_dir: Path, *, sites: int, client_dp: ClientDPSettings | None, init_args: dict
) -> None:
    logging.getLogger("flwr").setLevel(logging.ERROR)
    settings = ServerSettings(
        layout=run_files(run_dir),
        num_sites=sites,
        rounds=ROUNDS,
        local_epochs=1,
        seed=0,
        strategy=StrategySettings(uniform_weights=client_dp is not None),
        client_dp=client_dp,
        initial_state=lambda: {"w": torch.zeros(4)},
        node_wait_s=120,
        timeout_s=300,
        progress=False,
    )
    run_dir.mkdir(parents=True)
    run_simulation(
        server_app=build_server_app(settings),
        client_app=fuzz_client_app(private=client_dp is not None),
        num_supernodes=sites,
        backend_config={
            "client_resources": {"num_cpus": 1, "num_gpus": 0.0},
            "init_args": init_args,
        },
    )


@pytest.fixture(scope="module")
def fuzzed(tmp_path_factory, ray_init_args) -> Path:
    run_dir = tmp_path_factory.mktemp("fuzz") / "run"
    _simulate(run_dir, sites=SITES, client_dp=None, init_args=ray_init_args)
    return run_dir


def test_bad_train_replies_fail_their_site_and_the_run_goes_on(fuzzed):
    rounds = [json.loads(line) for line in run_files(fuzzed).metrics.read_text().splitlines()]
    assert [r["round"] for r in rounds] == [1, 2, 3]
    for entry in rounds:
        # The good sites' own numbers, by the node map (site 2 posing as 0 changed nothing).
        assert entry["sites"] == {
            str(s): {
                "train_loss": 0.5 + s,
                "dp_epsilon": None,
                "num_examples": EXAMPLES[s],
                "dp_epsilon_client": None,  # no client-level DP in this run
                "sent": [ARRAYS, NUM_EXAMPLES, SITE_ID, TRAIN_LOSS, UNIT_WEIGHT],
            }
            for s in (0, 1)
        }
        failures = entry["failures"]
        assert sorted(failures) == ["2", "3", "4"]
        for site in (2, 3, 4):
            assert BAD_TRAIN_REASONS[(entry["round"], site)] in failures[str(site)], failures
    # The weights are the good sites' weighted mean, round after round: no poison, no NaN.
    step = (EXAMPLES[0] * STEP[0] + EXAMPLES[1] * STEP[1]) / (EXAMPLES[0] + EXAMPLES[1])
    final = load_checkpoint(run_files(fuzzed).final_model).state_dict["w"]
    assert torch.equal(final, torch.full((4,), ROUNDS * step))


def test_bad_audit_replies_fail_their_site_only(fuzzed):
    layout = run_files(fuzzed)
    for site in (0, 1):
        audit = json.loads(layout.audit(site).read_text())
        assert audit["status"] == "ok" and audit["result"]["one_sided"]["eps_tilde"]["mean"] == 0.25
    for site, (_, reason) in BAD_AUDITS.items():
        audit = json.loads(layout.audit(site).read_text())
        assert audit["status"] == "failed" and reason in audit["error"], audit["error"]


def test_sampled_sites_that_drop_out_are_accounted(tmp_path, ray_init_args):
    """Client-level DP, 3 sites sampled per round, site 2 always rejected: the noise was
    sized for 3 while the mean has 2, so each round's release is accounted at z * 2 / 3."""
    z = 2.0
    settings = ClientDPSettings(noise_multiplier=z, delta=1e-5, clipping_norm=100.0)
    run_dir = tmp_path / "run"
    _simulate(run_dir, sites=3, client_dp=settings, init_args=ray_init_args)
    ledger = json.loads(run_files(run_dir).client_dp_accounting.read_text())
    assert ledger["short_rounds"] == {
        str(r): {"sampled": 3, "aggregated": 2, "noise_multiplier": z * 2 / 3}
        for r in range(1, ROUNDS + 1)
    }
    honest = gaussian_epsilon(z * 2 / 3, releases=ROUNDS, delta=1e-5)
    assert ledger["sites"]["0"]["epsilon"] == pytest.approx(honest)
    assert ledger["sites"]["0"]["epsilon"] > gaussian_epsilon(z, releases=ROUNDS, delta=1e-5)
    assert ledger["noise"].startswith("noise seeded for reproducibility")


def test_the_round_writer_writes_a_resumed_round_under_its_global_number(tmp_path: Path) -> None:
    """The strategy wrapper, not ``evaluate_fn``, writes a round: the ledger, one metrics
    line with the central scores, then the checkpoint; a resumed start's first round is
    global round 3."""
    layout = run_files(tmp_path)
    sites = make_strategy(
        StrategySettings(), num_sites=2, site_of_node={7: 0, 8: 1}, round_offset=2
    )
    sites.rounds[1] = RoundReplies(
        sites={0: TrainReply(site_id=0, train_loss=0.25, num_examples=10)},
        failures={1: "rejected: wrong shape"},
        sampled=[0, 1],
    )
    dp = ClientDPSettings(noise_multiplier=1.0, delta=1e-5)
    ledger = ClientDPAccounting(dp, population_size=2, sites_per_round=2)
    written: list[int] = []
    writer = RoundWriter(
        sites,
        sites,
        layout=layout,
        round_offset=2,
        client_dp=ledger,
        on_commit=lambda r, scores: written.append(r),
    )
    writer.write_round(1, ArrayRecord({"w": torch.ones(3)}), {"loss": 0.5, "accuracy": 0.75})
    (line,) = read_rounds(layout)
    assert (line.round, line.global_loss, line.global_accuracy) == (3, 0.5, 0.75)
    assert list(line.sites) == ["0"] and line.failures == {"1": "rejected: wrong shape"}
    assert line.sites["0"].dp_epsilon_client == ledger.epsilon(0) > 0
    assert (
        json.loads(layout.client_dp_accounting.read_text())["short_rounds"]["3"]["aggregated"] == 1
    )
    checkpoint = load_checkpoint(layout.round_checkpoint(3))
    assert checkpoint.round == 3 and torch.equal(checkpoint.state_dict["w"], torch.ones(3))
    assert list(layout.round_checkpoints()) == [3] and written == [3]
