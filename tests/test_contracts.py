"""The typed contracts between processes (``contracts.wire``, ``contracts.site_audit``,
``contracts.run_files``) and the one checked decoder of their JSON
(``contracts.json_values.from_dict``).

Messages round-trip through real Flower records (serialised as Flower sends them), optional
values travel as absent keys, a failing site audit arrives as Flower's error reply and its
site file says so, the run directory keeps today's file names and JSON keys, and a value of
the wrong type is refused with its key's path.
"""

from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path

import pytest
import torch
from builders import canary_block, make_result, run_files, schema_2
from flwr.app import ArrayRecord, ConfigRecord, Context, Error, Message, MessageType, RecordDict
from flwr.common.serde import message_from_proto, message_to_proto
from flwr.serverapp.strategy.strategy_utils import validate_message_reply_consistency
from flwr.supercore import differential_privacy as flwr_differential_privacy
from flwr.supercore.task_identity import TaskIdentity

from panoramia_fl.audit.canaries.input_canaries import InputCanaryResult
from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.clients.client_app import SiteRuntime, build_client_app
from panoramia_fl.contracts.json_values import from_dict, json_name, json_safe
from panoramia_fl.contracts.reply_keys import (
    COVERAGES,
    KIND_JSON,
    NORM_BIT,
    PUBLIC_KEY,
    REPLY_KEYS,
    kind_key,
)
from panoramia_fl.contracts.site_audit import SiteAudit, SiteAuditFile
from panoramia_fl.contracts.wire import (
    ARRAYS,
    AUDIT,
    AUDIT_FAILED_CODE,
    AUDIT_QUERY,
    CONFIG,
    METRICS,
    NUM_EXAMPLES,
    UNIT_WEIGHT,
    AuditFailure,
    AuditInstructions,
    TrainInstructions,
    TrainReply,
    WhoamiReply,
    WireError,
    audit_record,
    audit_reply,
)
from panoramia_fl.server.run_writer import (
    read_site_audit,
    sites_needing_audit,
    write_site_audit,
)
from panoramia_fl.server.server_app import audit_outcome, site_audit_file


@pytest.fixture
def task_identity(monkeypatch):
    """Instruction messages need a run and node id (a ServerApp process sets them)."""
    monkeypatch.setattr(TaskIdentity, "_run_id", 7)
    monkeypatch.setattr(TaskIdentity, "_node_id", 0)
    monkeypatch.setattr(TaskIdentity, "_task_id", 0)


def _sent(content: RecordDict) -> RecordDict:
    """``content`` after a trip through Flower's wire format (protobuf)."""
    msg = Message(content=content, dst_node_id=3, message_type=MessageType.TRAIN)
    return message_from_proto(message_to_proto(msg)).content


# --- messages ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        TrainReply(site_id=2, train_loss=0.25, num_examples=500),
        TrainReply(
            site_id=0, train_loss=1.5, num_examples=7, dp_epsilon=3.25, noise_multiplier=0.9
        ),
    ],
)
def test_train_reply_round_trips(reply, task_identity):
    content = _sent(RecordDict({METRICS: reply.to_record()}))
    assert TrainReply.from_record(content.metric_records[METRICS]) == reply


def test_absent_optional_is_none_never_a_sentinel(task_identity):
    record = TrainReply(site_id=1, train_loss=0.5, num_examples=10).to_record()
    assert set(record) == {NUM_EXAMPLES, "train-loss", "site-id", UNIT_WEIGHT}
    back = TrainReply.from_record(_sent(RecordDict({METRICS: record})).metric_records[METRICS])
    assert back.dp_epsilon is None and back.noise_multiplier is None

    audit = _audit(SiteResults(panoramia=RESULT))
    sent = audit_record(audit)
    assert set(sent) == {"site-id", "n-members", "n-holdout", "elapsed-s", "result-json"}
    assert audit_reply(sent, SiteResults) == audit

    train = TrainInstructions(local_epochs=1, seed=0, server_round=1).to_record()
    assert set(train) == {"local-epochs", "seed", "server-round"}

    # No negative numbers stand for "none" anywhere on the wire.
    for values in (record, sent, train):
        assert all(not isinstance(v, int | float) or v >= 0 for v in values.values())


def test_train_reply_keeps_the_keys_flower_weights_by(task_identity):
    """FedAvg averages by num-examples (or unit-weight under client-level DP) and checks
    every reply holds one ArrayRecord and one MetricRecord with the same keys."""
    replies = [
        _sent(
            RecordDict(
                {
                    ARRAYS: ArrayRecord({"w": torch.ones(2)}),
                    METRICS: TrainReply(site_id=s, train_loss=0.1, num_examples=5).to_record(),
                }
            )
        )
        for s in range(2)
    ]
    for key in (NUM_EXAMPLES, UNIT_WEIGHT):
        validate_message_reply_consistency(replies, key, check_arrayrecord=True)


def test_under_record_level_dp_no_count_and_no_loss_travel(task_identity):
    """A DP-SGD site's reply: its epsilon and noise, no count, no loss; the server, which
    knows the run's DP, holds every reply to the keys that go with it (so that Flower
    aggregates them) and names the key."""
    dp = TrainReply(
        site_id=0, train_loss=None, num_examples=None, dp_epsilon=1.5, noise_multiplier=0.9
    )
    record = _sent(RecordDict({METRICS: dp.to_record()})).metric_records[METRICS]
    assert set(record) == {"site-id", UNIT_WEIGHT, "dp-epsilon", "noise-multiplier"}
    assert TrainReply.from_record(record, record_dp=True) == dp
    with pytest.raises(WireError, match="'noise-multiplier' is missing"):
        TrainReply.from_record(
            TrainReply(0, None, None, dp_epsilon=1.5).to_record(), record_dp=True
        )
    leaky = TrainReply(0, 0.5, 10, dp_epsilon=1.5, noise_multiplier=0.9).to_record()
    with pytest.raises(WireError, match="'train-loss' is not sent under DP"):
        TrainReply.from_record(leaky, record_dp=True)
    with pytest.raises(WireError, match="'dp-epsilon' is not sent without record-level DP"):
        TrainReply.from_record(leaky, record_dp=False)


def test_under_client_level_dp_no_count_and_no_loss_travel():
    """Client-level DP (central or distributed): neither the count nor the loss travels,
    and the server refuses a reply that carries them."""
    private = TrainReply(site_id=0, train_loss=None, num_examples=None).to_record()
    assert set(private) == {"site-id", UNIT_WEIGHT}
    assert TrainReply.from_record(private, record_dp=False, any_dp=True).train_loss is None
    leaky = TrainReply(site_id=0, train_loss=0.5, num_examples=10).to_record()
    with pytest.raises(WireError, match="'train-loss' is not sent under DP"):
        TrainReply.from_record(leaky, record_dp=False, any_dp=True)
    with pytest.raises(WireError, match="'train-loss' is missing"):
        TrainReply.from_record(private, record_dp=False, any_dp=False)


def test_every_key_a_reply_carries_has_its_coverage():
    """The coverage table lists each key a train or audit reply can carry, on its side."""
    train = TrainReply(0, 0.5, 10, dp_epsilon=1.0, noise_multiplier=1.0).to_record()
    audit = audit_record(
        _audit(SiteResults(panoramia=RESULT, input_canaries=CANARY), dp_epsilon=1.0)
    )
    kinds = {kind_key(json_name(kind)) for kind in dataclasses.fields(SiteResults)}
    secure_sum_only = {NORM_BIT, PUBLIC_KEY}  # a mod's key, the secure sum's key
    assert {ARRAYS, *train} == {k for k, v in REPLY_KEYS.items() if v.train} - secure_sum_only
    assert {KIND_JSON if k in kinds else k for k in audit} == {
        k for k, v in REPLY_KEYS.items() if v.audit
    }
    assert all({v.train, v.audit} <= {*COVERAGES, None} for v in REPLY_KEYS.values())
    # Flower's adaptive clipping mod adds its key under the name the table gives it.
    assert NORM_BIT == flwr_differential_privacy.KEY_NORM_BIT


def test_whoami_and_audit_instructions_round_trip(task_identity):
    content = _sent(
        RecordDict({METRICS: WhoamiReply(4).to_record(), CONFIG: AuditInstructions(9).to_record()})
    )
    assert WhoamiReply.from_record(content.metric_records[METRICS]) == WhoamiReply(4)
    assert AuditInstructions.from_record(content.config_records[CONFIG]) == AuditInstructions(9)


RESULT = make_result([1.0, 1.25], [1.5, 2.0], rm_rn=[0.5, 0.75], o1=[0.25, 0.5])
CANARY = from_dict(InputCanaryResult, canary_block(1.5, 3.0, fdp=(2.0, 0.8)))


def _audit(results: SiteResults, *, dp_epsilon: float | None = None) -> SiteAudit[SiteResults]:
    return SiteAudit(
        site_id=1,
        n_members=300,
        n_holdout=120,
        elapsed_s=12.5,
        dp_epsilon=dp_epsilon,
        results=results,
    )


@pytest.mark.parametrize("canary", [None, CANARY])
@pytest.mark.parametrize("dp_epsilon", [None, 2.0])
def test_audit_reply_round_trips(canary, dp_epsilon, task_identity):
    reply = _audit(SiteResults(panoramia=RESULT, input_canaries=canary), dp_epsilon=dp_epsilon)
    content = _sent(RecordDict({AUDIT: audit_record(reply)}))
    assert audit_reply(content.config_records[AUDIT], SiteResults) == reply


def test_an_audit_file_from_before_input_canaries_had_their_name_reads_the_same():
    """Older audit files hold the input-canary audit under ``canary``: it loads as today's."""
    results = SiteResults(panoramia=RESULT, input_canaries=CANARY)
    today = json_safe(results)
    older = {("canary" if key == "input_canaries" else key): v for key, v in today.items()}
    assert "canary" in older and from_dict(SiteResults, older) == results


def test_a_reply_of_the_wrong_types_names_the_key(task_identity):
    """Every kind of audit in a reply is read by its type: a string in a number field, a
    missing key or an unknown side is refused with the key's path, as is a reply with no
    audit at all."""
    record = audit_record(_audit(SiteResults(panoramia=RESULT)))
    data = json.loads(str(record["result-json"]))
    data["one_sided"]["eps_tilde"]["mean"] = "0.5"
    record["result-json"] = json.dumps(data)
    with pytest.raises(
        WireError, match=r"key 'result\.one_sided\.eps_tilde\.mean' must be a number, got '0\.5'"
    ):
        audit_reply(record, SiteResults)
    data = json_safe(RESULT)
    data["two_sided"]["side"] = "both"  # not a field: ignored, as Flower's extra keys are
    del data["two_sided"]["member"]
    record["result-json"] = json.dumps(data)
    with pytest.raises(WireError, match=r"key 'result\.two_sided\.member' is missing"):
        audit_reply(record, SiteResults)
    bare = ConfigRecord({"site-id": 1, "n-members": 3, "n-holdout": 0, "elapsed-s": 1.0})
    with pytest.raises(WireError, match="holds no audit"):
        audit_reply(bare, SiteResults)


def test_train_instructions_round_trip_and_ignore_flowers_own_keys(task_identity):
    asked = TrainInstructions(
        local_epochs=2, seed=5, server_round=3, client_clipping="adaptive", proximal_mu=0.01
    )
    record = asked.to_record()
    record["clipping_norm"] = 1.0  # Flower's client-side DP wrapper adds it
    back = TrainInstructions.from_record(_sent(RecordDict({CONFIG: record})).config_records[CONFIG])
    assert back == asked
    TrainInstructions.stamp_round(record, 11)
    assert TrainInstructions.from_record(record).server_round == 11


def test_malformed_records_name_the_key():
    with pytest.raises(WireError, match="'server-round' is missing"):
        TrainInstructions.from_record(ConfigRecord({"local-epochs": 1, "seed": 0}))
    with pytest.raises(WireError, match="unknown clipping 'median'"):
        TrainInstructions.from_record(
            ConfigRecord(
                {"local-epochs": 1, "seed": 0, "server-round": 1, "client-clipping": "median"}
            )
        )
    with pytest.raises(WireError, match="'result-json' is not valid JSON"):
        audit_reply(
            ConfigRecord(
                {
                    "site-id": 0,
                    "result-json": "{",
                    "n-members": 1,
                    "n-holdout": 1,
                    "elapsed-s": 1.0,
                }
            ),
            SiteResults,
        )


# --- the one failure channel ------------------------------------------------------------


def test_audit_failure_round_trips_through_an_error_reply(task_identity):
    failure = AuditFailure(
        error="ValueError: splits\ntoo small", traceback="Traceback ...\n", elapsed_s=0.125
    )
    error = failure.to_error()
    assert error.code == AUDIT_FAILED_CODE
    assert error.reason.startswith("ValueError: splits\ntoo small\n")
    request = Message(content=RecordDict(), dst_node_id=3, message_type=MessageType.QUERY)
    reply = message_from_proto(message_to_proto(Message(error, reply_to=request)))
    assert reply.has_error() and AuditFailure.from_error(reply.error) == failure
    bare = AuditFailure(error="RuntimeError: x")
    assert AuditFailure.from_error(bare.to_error()) == bare


def test_an_error_of_flowers_own_is_its_reason():
    error = Error(code=2, reason="<class 'MemoryError'>:<''>")
    assert AuditFailure.from_error(error) == AuditFailure(error="<class 'MemoryError'>:<''>")
    assert "code 5" in AuditFailure.from_error(Error(code=5)).error


class _TinyTask:
    def make_model(self) -> torch.nn.Module:
        return torch.nn.Linear(2, 2)


def _audit_site(runner, *, site_id: int = 2) -> Message:
    """Send the ClientApp an audit query as the server does; return its reply."""
    runtime = SiteRuntime(
        site_id=site_id,
        task=_TinyTask(),
        data=types.SimpleNamespace(train_x=[0] * 30, holdout_x=[0] * 10),
        device=torch.device("cpu"),
        torch_threads=1,
        dp=None,
        accountant_history_path=None,
        audit_runner=runner,
    )
    app = build_client_app(lambda context: runtime)
    content = RecordDict(
        {
            ARRAYS: ArrayRecord(_TinyTask().make_model().state_dict()),
            CONFIG: AuditInstructions(seed=3).to_record(),
        }
    )
    query = Message(
        content=content, dst_node_id=11, message_type=f"{MessageType.QUERY}.{AUDIT_QUERY}"
    )
    context = Context(run_id=7, node_id=11, node_config={}, state=RecordDict(), run_config={})
    return message_from_proto(message_to_proto(app(query, context)))


def test_failing_site_audit_arrives_as_an_error_and_its_file_says_failed(tmp_path, task_identity):
    def runner(task, model, data, seed, earlier, updates):
        raise ValueError("the audit's splits need 190 members, the site has 30")

    reply = _audit_site(runner)
    assert reply.has_error() and not reply.has_content()
    assert reply.error.code == AUDIT_FAILED_CODE
    write_site_audit(
        run_files(tmp_path), site_audit_file(2, audit_outcome(reply, 2), model_round=4)
    )
    data = json.loads(run_files(tmp_path).audit(2).read_text())
    # Every key of today's file, in order: a failed audit's sizes and results are empty.
    assert list(data) == FILE_KEYS
    assert data["status"] == "failed" and data["result"] is None and data["site_id"] == 2
    assert data["n_members"] is None and data["by_round"] == [] and data["inversion"] == []
    assert data["error"] == "ValueError: the audit's splits need 190 members, the site has 30"
    assert "in runner" in data["traceback"] and data["traceback"].startswith("Traceback")
    assert data["elapsed_s"] >= 0 and data["model_round"] == 4
    assert sites_needing_audit(run_files(tmp_path), [2], 4) == [2]  # a failed audit is retried


FILE_KEYS = [
    "site_id",
    "n_members",
    "n_holdout",
    "elapsed_s",
    "dp_epsilon",
    "result",
    "input_canaries",
    "by_round",
    "gradient_canaries",
    "inversion",
    "updates",
    "attribute_inference",
    "dishonest_server",
    "status",
    "error",
    "traceback",
    "model_round",
]
"""An audit file's keys: the site's audit (its sizes, then each kind of audit) and its outcome."""


def test_finished_site_audit_writes_todays_ok_file(tmp_path, task_identity):
    def runner(task, model, data, seed, earlier, updates):
        return SiteResults(panoramia=dataclasses.replace(RESULT, sizes={"seed": seed}))

    reply = _audit_site(runner, site_id=1)
    assert reply.has_content()
    write_site_audit(
        run_files(tmp_path), site_audit_file(1, audit_outcome(reply, 1), model_round=4)
    )
    data = json.loads(run_files(tmp_path).audit(1).read_text())
    assert list(data) == FILE_KEYS
    assert data["status"] == "ok" and data["error"] is None
    assert data["result"] == json_safe(dataclasses.replace(RESULT, sizes={"seed": 3}))
    assert data["result"]["schema_version"] == 3 and "one_sided" in data["result"]
    assert (data["n_members"], data["n_holdout"], data["dp_epsilon"]) == (30, 10, None)
    file = read_site_audit(run_files(tmp_path), 1)
    assert file is not None and file.results.panoramia == dataclasses.replace(
        RESULT, sizes={"seed": 3}
    )
    assert sites_needing_audit(run_files(tmp_path), [1], 4) == [] and sites_needing_audit(
        run_files(tmp_path), [1], 5
    )


def test_a_reply_without_an_audit_is_a_failure(task_identity):
    request = Message(content=RecordDict(), dst_node_id=3, message_type=MessageType.QUERY)
    reply = Message(RecordDict(), reply_to=request)
    file = site_audit_file(0, audit_outcome(reply, 0), model_round=1)
    assert file.status == "failed" and "'audit' record" in (file.error or "")


# --- the run directory ------------------------------------------------------------------


def test_site_audit_file_reads_todays_and_older_files(tmp_path):
    today = SiteAuditFile(
        site_id=0,
        n_members=300,
        n_holdout=100,
        elapsed_s=3.5,
        dp_epsilon=2.5,
        results=SiteResults(panoramia=RESULT, input_canaries=CANARY),
        status="ok",
        model_round=2,
    )
    data = json.loads(json.dumps(json_safe(today)))
    assert list(data) == FILE_KEYS
    assert from_dict(SiteAuditFile[SiteResults], data) == today
    # An ok file as written before the one-sided game nested (result schema 2): the
    # one-sided keys sit in the result and in each repeat.
    newer = ("by_round", "gradient_canaries", "inversion", "attribute_inference")
    old = {k: data[k] for k in FILE_KEYS if k not in newer}
    old["result"] = schema_2(data["result"])
    assert "one_sided" not in old["result"] and "c_lb" in old["result"]["repeats"][0]
    read = from_dict(SiteAuditFile[SiteResults], old)
    assert read.results.panoramia == dataclasses.replace(RESULT, schema_version=2)
    assert dataclasses.replace(read, results=today.results) == today
    old["result"]["eps_tilde"]["mean"] = "0.5"  # named by the key the old file has
    with pytest.raises(ValueError, match=r"key 'result\.eps_tilde\.mean' must be a number"):
        from_dict(SiteAuditFile[SiteResults], old)
    # Failures as the error reply wrote them before this file said which round it audited.
    older = {"site_id": 2, "status": "failed", "error": "<class 'X'>:<'y'>", "result": None}
    file = from_dict(SiteAuditFile[SiteResults], older)
    assert (file.status, file.error, file.traceback, file.model_round) == (
        "failed",
        "<class 'X'>:<'y'>",
        None,
        None,
    )
    for bad, why in (
        ([], "must be a JSON object"),
        ({"site_id": 0, "status": "done"}, r"'status' must be one of \['ok', 'failed'\]"),
        ({"status": "ok"}, "'site_id' is missing"),
        ({"site_id": "0", "status": "ok"}, "'site_id' must be an integer, got '0'"),
    ):
        with pytest.raises(ValueError, match=why):
            from_dict(SiteAuditFile[SiteResults], bad)
    run_files(tmp_path).audits.mkdir()
    run_files(tmp_path).audit(5).write_text("{not json")
    assert read_site_audit(run_files(tmp_path), 5) is None and sites_needing_audit(
        run_files(tmp_path), [5]
    ) == [5]


def test_docs_list_every_reply_key_with_its_coverage():
    """docs/security.md's table is the coverage table's, row for row."""
    text = (Path(__file__).parents[1] / "docs" / "security.md").read_text()
    rows = [
        f"| {side} | `{key}` | {entry.meaning} | `{coverage}` |"
        for side in ("train", "audit")
        for key, entry in REPLY_KEYS.items()
        if (coverage := getattr(entry, side)) is not None
    ]
    assert [row for row in rows if row not in text] == []
    assert text.count("| train | `") + text.count("| audit | `") == len(rows)


def test_ray_memory_killer_is_recognised_in_errors_and_in_site_error_texts():
    """What Ray's memory killer raises (alone, as the cause of another error, or quoted in a
    Flower error reply) is recognised by its name or message; a CUDA out-of-memory error of
    torch is not (fewer parallel sites would not help it)."""
    import ray.exceptions

    from panoramia_fl.contracts.errors import memory_killed, memory_killer_line

    message = "Task was killed due to the node running low on memory.\nMemory on the node ..."
    killed = ray.exceptions.OutOfMemoryError(message)
    assert memory_killer_line(killed) == (
        "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."
    )
    try:
        raise RuntimeError("reference model 1 of 2 failed") from killed
    except RuntimeError as wrapped:
        assert memory_killed(wrapped)
    assert memory_killed(f"<class 'ray.exceptions.OutOfMemoryError'>:<'{message}'>")
    assert not memory_killed(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2 GiB"))
    assert not memory_killed("SplitError: too few records for the audit's splits")
