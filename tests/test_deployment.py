"""The same apps on Flower's Deployment Engine: node/run config, app manifest, a loopback
consortium (SuperLink + two SuperNodes) end to end, and process clean-up."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import tomli
from builders import run_files
from flwr.app import Context, RecordDict

from panoramia_fl.clients.site_policy import SiteRefusal
from panoramia_fl.contracts.run_files import site_refusals_name
from panoramia_fl.deployment.consortium_tls import make_demo_credentials
from panoramia_fl.deployment.flower_apps import (
    RUN_CONFIG_DEFAULTS,
    DeploymentConfigError,
    DeploymentResolver,
    NodeSettings,
    parse_phases,
    read_run,
)
from panoramia_fl.deployment.flwr_run_files import (
    DeploymentFiles,
    node_config_arg,
    prepare_deployment,
    run_config_values,
    write_app_dir,
)
from panoramia_fl.deployment.local_consortium import LocalConsortium, RunStatus
from panoramia_fl.simulations.config_file import dump_config
from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.processes import ProcessGroup, descendants, is_alive
from panoramia_fl.simulations.run_dir import prepare_run_dir

TINY_AUDIT = {
    "quick": True,
    "helper_epochs": 1,
    "generator": {"kind": "cgan", "epochs": 1},
    "classifier": {"epochs": [1], "gbm_iterations": [20], "gbm_learning_rates": [0.1]},
    # The run's two reference models still calibrate the scores; one epoch each is enough
    # for what is checked here (the default is 10).
    "calibration": {"epochs": 1},
}


def _config(name: str, *, rounds: int = 1, dp: bool = False, audit: bool = True, sites: int = 2):
    return validate_config(
        {
            "name": name,
            "seed": 0,
            "data": {"name": "digits"},
            "partition": {"scheme": "iid", "num_sites": sites},
            "fl": {"rounds": rounds, "local_epochs": 1, "batch_size": 32},
            "dp": {"enabled": dp, "noise_multiplier": 1.0} if dp else {"enabled": False},
            "resources": {"num_gpus": 0, "audit_num_gpus": 0},
            "audit": {"enabled": audit, "settings": TINY_AUDIT},
        }
    )


def _context(run_config: dict, node_config: dict, run_id: int = 7) -> Context:
    return Context(
        run_id=run_id, node_id=1, node_config=node_config, state=RecordDict(), run_config=run_config
    )


# --------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("node_config", "key"),
    [
        ({"num-partitions": 2}, "partition-id"),
        ({"partition-id": 0}, "num-partitions"),
        ({"partition-id": 2, "num-partitions": 2}, "partition-id=2"),
        ({"partition-id": "zero", "num-partitions": 2}, "partition-id='zero'"),
    ],
)
def test_node_config_errors_name_the_key(node_config, key):
    with pytest.raises(DeploymentConfigError, match=key):
        NodeSettings.from_node_config(node_config)


def test_node_config_reads_paths():
    node = NodeSettings.from_node_config(
        {"partition-id": 1, "num-partitions": 3, "data-path": "/data/site.npz", "state-dir": ""}
    )
    assert (node.partition_id, node.num_partitions) == (1, 3)
    assert node.data_path == Path("/data/site.npz") and node.state_dir is None


def test_phases_are_checked_and_ordered():
    assert parse_phases("audit, train") == ("train", "audit")
    assert parse_phases("audit") == ("audit",)
    with pytest.raises(DeploymentConfigError, match="phases"):
        parse_phases("train,evaluate")


def test_run_config_needs_an_absolute_run_dir():
    with pytest.raises(DeploymentConfigError, match="run-dir"):
        read_run({"run-dir": ""})
    with pytest.raises(DeploymentConfigError, match="absolute"):
        read_run({"run-dir": "runs/x"})


def test_node_config_arg_quotes_strings():
    arg = node_config_arg({"partition-id": 0, "num-partitions": 2, "data-path": "/a/b.npz"})
    assert arg == 'partition-id=0 num-partitions=2 data-path="/a/b.npz"'
    # Flower parses it back to the same typed values.
    from flwr.common.config import parse_config_args

    assert parse_config_args([arg]) == {
        "partition-id": 0,
        "num-partitions": 2,
        "data-path": "/a/b.npz",
    }
    with pytest.raises(ValueError, match="data-path"):
        node_config_arg({"data-path": "/a b/c.npz"})


def test_app_manifest_is_a_valid_flower_app(tmp_path):
    from flwr.cli.build import build_fab_from_disk
    from flwr.cli.config_utils import load_and_validate

    app_dir = write_app_dir(tmp_path / "app")
    # check_module: the components import from the installed project.
    config, _ = load_and_validate(app_dir / "pyproject.toml", check_module=True)
    components = config["tool"]["flwr"]["app"]["components"]
    assert components == {
        "serverapp": "panoramia_fl.deployment.flower_apps:server_app",
        "clientapp": "panoramia_fl.deployment.flower_apps:client_app",
    }
    assert set(config["tool"]["flwr"]["app"]["config"]) == set(RUN_CONFIG_DEFAULTS)
    fab = build_fab_from_disk(app_dir)
    assert 0 < len(fab) < 10_000  # no code, no data: the FAB is the manifest only


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("dep") / "tiny-dp"
    config = _config("tiny-dp", dp=True, audit=False)
    return config, prepare_deployment(config, run_dir)


def test_prepare_deployment_writes_run_config_for_remote_sites(prepared):
    config, files = prepared
    values = tomli.loads(files.run_config.read_text())
    assert set(values) == set(RUN_CONFIG_DEFAULTS)
    assert values["run-dir"] == str(files.run_dir) and Path(values["run-dir"]).is_absolute()
    # A site that cannot see the run directory rebuilds the same experiment from the
    # run config alone.
    run = read_run({**values, "run-dir": "/nonexistent/tiny-dp"})
    assert dump_config(run.config) == dump_config(config)
    assert run.meta.modality == "image" and run.meta.num_classes == 10
    assert run.phases == ("train", "audit")
    assert [n["partition-id"] for n in files.node_configs] == [0, 1]
    assert all(Path(n["data-path"]).exists() for n in files.node_configs)


def test_resolver_builds_the_site_of_the_node(prepared):
    config, files = prepared
    values = run_config_values(config, files.layout)
    node = dict(files.node_configs[1])
    runtime = DeploymentResolver()(_context(values, node))
    assert runtime.site_id == 1 and runtime.data.site_id == 1
    assert len(runtime.data.train_x) > 0 and runtime.dp is not None
    # The ledger lives in the node's state dir, per run directory, on disk: every message
    # runs in a fresh ClientApp process.
    assert runtime.accountant_history_path == (
        Path(node["state-dir"]) / files.run_dir.name / "site-1-dp-ledger.json"
    )
    assert runtime.accountant_history_path.parent.is_dir()
    # A SuperNode whose node config has no ``policy-*`` key runs under the strict defaults:
    # per-record scores asked for by the operator's run config are refused, naming the key,
    # and logged in the node's own state dir (what the site then does with the refusal is
    # tests/test_site_policy.py's, in a real run).
    assert not any(k.startswith("policy-") for k in node)
    with pytest.raises(SiteRefusal, match="policy-allow-scores=false refuses"):
        runtime.policy.check_audit(return_scores=True)
    assert runtime.refusal_log == (
        Path(node["state-dir"]) / files.run_dir.name / site_refusals_name(1)
    )


def test_resolver_rejects_mismatched_node_config(prepared):
    config, files = prepared
    values = run_config_values(config, files.layout)
    wrong_site = {**files.node_configs[1], "partition-id": 0}
    with pytest.raises(DeploymentConfigError, match="holds site 1"):
        DeploymentResolver()(_context(values, wrong_site))
    wrong_n = {**files.node_configs[0], "num-partitions": 3}
    with pytest.raises(DeploymentConfigError, match="num_sites=2"):
        DeploymentResolver()(_context(values, wrong_n))
    missing = {**files.node_configs[0], "data-path": str(files.run_dir / "nope.npz")}
    with pytest.raises(DeploymentConfigError, match="data-path"):
        DeploymentResolver()(_context(values, missing))


def test_prepare_for_real_sites_keeps_data_off_the_server(tmp_path):
    from panoramia_fl.simulations.run_dir import DatasetMeta

    config = _config("real", audit=False)
    meta = DatasetMeta(name="digits", modality="image", num_classes=10, input_shape=(1, 8, 8))
    files = prepare_deployment(config, tmp_path / "real", meta=meta)
    assert sorted(p.name for p in files.run_dir.iterdir()) == [
        "config.yaml", "dataset.json", "deployment"
    ]  # fmt: skip
    assert files.node_configs == [
        {"partition-id": 0, "num-partitions": 2},
        {"partition-id": 1, "num-partitions": 2},
    ]
    values = tomli.loads(files.run_config.read_text())
    assert read_run(values).meta == meta
    # A node that does not say where its data is gets told which key to set.
    with pytest.raises(DeploymentConfigError, match="data-path is not set"):
        DeploymentResolver()(_context(values, files.node_configs[0]))


def test_cli_prepare_only_prints_the_commands(tmp_path, capsys):
    import yaml

    from panoramia_fl.deployment.local_consortium import main

    cfg = tmp_path / "tiny.yaml"
    cfg.write_text(yaml.safe_dump(_config("cli", audit=False).model_dump(mode="json")))
    assert main([str(cfg), "--out", str(tmp_path / "run"), "--prepare-only"]) == 0
    out = capsys.readouterr().out
    assert out.count("flower-supernode") == 2 and "--insecure" in out
    assert f"--run-config {tmp_path / 'run' / 'deployment' / 'run-config.toml'}" in out
    assert (tmp_path / "run" / "deployment" / "app" / "pyproject.toml").exists()
    cli = tomli.loads((tmp_path / "run" / "deployment" / "flwr-cli-config.toml").read_text())
    assert cli["superlink"]["loopback"]["insecure"] is True
    assert main([str(cfg), "--set", "fl.rounds=0", "--prepare-only"]) == 2
    assert "fl.rounds" in capsys.readouterr().err


# --------------------------------------------------------------------------- processes


def test_process_group_stops_children_and_grandchildren(tmp_path):
    group = ProcessGroup()
    # sh -> sh -> sleep: a grandchild in its own session would escape a process-group kill.
    proc = group.start(
        "tree",
        ["sh", "-c", "setsid sh -c 'sleep 300' & sleep 300 & wait"],
        env={"PATH": "/usr/bin:/bin"},
        log_path=tmp_path / "tree.log",
    )
    deadline = time.time() + 10
    while len(tree := descendants(proc.pid)) < 3 and time.time() < deadline:
        time.sleep(0.1)
    assert len(tree) >= 3
    group.stop(grace_s=2)
    assert proc.poll() is not None
    assert not any(is_alive(pid, start) for pid, start in tree)
    group.stop()  # idempotent


# --------------------------------------------------------------------------- end to end


@dataclass
class Loopback:
    """One loopback consortium's runs, shared by the tests below (a start costs three Flower
    processes, and every run spawns its own ServerApp and ClientApps)."""

    nodes: list[dict]
    dp: DeploymentFiles
    dp_status: RunStatus
    bad_status: RunStatus
    bad_log: Path
    started_processes: int
    left_alive: list[int]
    work_dir_left: bool


@pytest.fixture(scope="module")
def loopback(tmp_path_factory: pytest.TempPathFactory) -> Loopback:
    """A SuperLink and two SuperNodes on default policy, which run a wrong run config and a
    one-round DP run with its audits, then stop. (What a site's policy refuses is checked in
    a real simulation, tests/test_site_policy.py, and the policy a SuperNode's node config
    gives its runtime here, in-process: each run on the consortium costs a process per
    message.)"""
    tmp_path = tmp_path_factory.mktemp("loopback")
    config = _config("loopback", rounds=1, dp=True)
    # As at real sites, each "hospital" keeps its own records outside the run directory and
    # the server only gets the config, the dataset description and public test records.
    source = tmp_path / "source"
    meta = prepare_run_dir(config, run_files(source))
    nodes = []
    for i in range(2):
        own = tmp_path / f"hospital-{i}" / "records.npz"
        own.parent.mkdir()
        shutil.move(run_files(source).site_file(i), own)
        nodes.append({"partition-id": i, "num-partitions": 2, "data-path": str(own)})
    dp = prepare_deployment(config, tmp_path / "loopback", meta=meta)
    assert not (dp.run_dir / "sites").exists()
    dp.layout.public.parent.mkdir()
    shutil.copy(run_files(source).public, dp.layout.public)  # central evaluation
    bad_run_config = tmp_path / "bad-run-config.toml"
    bad_run_config.write_text('run-dir = "relative/dir"\n')
    with LocalConsortium(nodes) as consortium:
        started = len(consortium.processes.started)
        # A wrong run config fails that run only, with the key named in the run's log.
        bad = consortium.run(
            dp.app_dir, bad_run_config, timeout_s=600, log_path=tmp_path / "bad.log"
        )
        dp_status = consortium.run(
            dp.app_dir,
            dp.run_config,
            timeout_s=1500,
            log_path=dp.run_dir / "deployment" / "serverapp.log",
        )
        seen = [(s.proc.pid, s.start) for s in consortium.processes.started]
        seen += [d for s in consortium.processes.started for d in descendants(s.proc.pid)]
        work_dir = consortium.work_dir
    time.sleep(0.5)
    return Loopback(
        nodes=nodes,
        dp=dp,
        dp_status=dp_status,
        bad_status=bad,
        bad_log=tmp_path / "bad.log",
        started_processes=started,
        left_alive=[pid for pid, start in seen if is_alive(pid, start)],
        work_dir_left=work_dir.exists(),
    )


@pytest.mark.slow
def test_loopback_consortium_trains_audits_and_reports(loopback: Loopback):
    assert loopback.started_processes == 3  # SuperLink + 2 SuperNodes
    assert loopback.bad_status.status == "finished:failed" and not loopback.bad_status.ok
    assert "must be an absolute path" in loopback.bad_log.read_text()
    # Every process the consortium started (and its SuperExec) is gone, its temp dir too.
    assert not loopback.left_alive
    assert not loopback.work_dir_left
    files, nodes = loopback.dp, loopback.nodes
    assert loopback.dp_status.ok, (loopback.dp_status, files.run_dir)

    run_dir = files.run_dir
    rounds = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["round"] for r in rounds] == [1]
    assert set(rounds[0]["sites"]) == {"0", "1"}
    assert 0 <= rounds[-1]["global_accuracy"] <= 1  # DP noise on 500 records: near chance
    # The DP ledger survives the per-message ClientApp processes: the training's process
    # wrote it (one local epoch's steps), the audit's process reads its epsilon (below).
    # (That rounds add up in it is checked in simulation, tests/test_federated.py.)
    for site in ("0", "1"):
        assert rounds[0]["sites"][site]["dp_epsilon"] > 0
        # Default state dir: next to the site's own data, per run directory.
        own = Path(nodes[int(site)]["data-path"])
        ledger = own.parent / "panoramia-state" / run_dir.name / f"site-{site}-dp-ledger.json"
        history = json.loads(ledger.read_text())["history"]
        steps_per_epoch = round(1 / history[0][1])
        assert sum(steps for _, _, steps in history) == steps_per_epoch
    assert (run_dir / "global_model.pt").exists()
    # Real sites draw their DP noise from the OS's entropy, not from a seed.
    assert json.loads((run_dir / "noise.json").read_text())["source"] == "os-entropy"

    for site in (0, 1):
        audit = json.loads((run_dir / "audits" / f"site-{site}.json").read_text())
        assert audit["status"] == "ok", audit.get("error")
        assert audit["dp_epsilon"] == pytest.approx(rounds[0]["sites"][str(site)]["dp_epsilon"])
        # Only summaries reach the SuperLink: no per-record scores, no records.
        assert all(rep.get("scores") is None for rep in audit["result"]["repeats"])
        assert len((run_dir / "audits" / f"site-{site}.json").read_bytes()) < 200_000
    # The server never saw the partition: it summarises what the sites reported.
    partition = json.loads((run_dir / "partition.json").read_text())
    assert partition["scheme"] == "site-local"
    # Under record-level DP no train reply carries a count: the sites' audits say it.
    assert all(r["sites"][s].get("num_examples") is None for r in rounds for s in r["sites"])
    assert [p["train"] for p in partition["sites"]] == [
        json.loads((run_dir / "audits" / f"site-{i}.json").read_text())["n_members"] for i in (0, 1)
    ]
    report = json.loads((run_dir / "report.json").read_text())
    assert {s["site_id"] for s in report["sites"]} == {0, 1}
    assert (run_dir / "report.html").exists()


@pytest.mark.slow
def test_tls_consortium_admits_registered_nodes_only(tmp_path):
    """The real-site set-up on loopback: TLS on every API and SuperNode authentication. The
    registered node connects (and the CLI talks to the SuperLink over TLS); a node whose key
    was not registered is refused. (The apps themselves run over TLS the same way as in the
    insecure test above; a full TLS run took ~3 min here, too long for the suite.)"""
    tls = make_demo_credentials(tmp_path / "credentials", num_nodes=2)
    node = {"partition-id": 0, "num-partitions": 1}
    with LocalConsortium([node], tls=tls) as consortium:
        deadline = time.time() + 300
        while [n["status"] for n in consortium.nodes()] != ["online"]:
            assert time.time() < deadline, consortium.nodes()
            time.sleep(2)
        security = [
            "--root-certificates", str(tls.ca_cert),
            "--auth-supernode-private-key", str(tls.node_keys[1]),
            "--max-retries", "1",
        ]  # fmt: skip
        consortium.start_node(1, node, security)
        rogue = consortium.processes.started[-1].proc
        assert rogue.wait(timeout=300) != 0
        rogue_log = (consortium.log_dir / "supernode-1.log").read_text()
        assert "Failed to activate SuperNode" in rogue_log
        assert [n["status"] for n in consortium.nodes()] == ["online"]


def test_flower_cli_has_the_flags_the_consortium_uses():
    from panoramia_fl.deployment.local_consortium import _bin

    superlink = subprocess.run(
        [_bin("flower-superlink"), "--help"], capture_output=True, text=True, timeout=300
    )
    for flag in (
        "--insecure",
        "--host",
        "--port",
        "--disable-runtime-dependency-installation",
        "--ssl-ca-certfile",
        "--ssl-certfile",
        "--ssl-keyfile",
        "--enable-supernode-auth",
    ):
        assert flag in superlink.stdout, flag
    supernode = subprocess.run(
        [_bin("flower-supernode"), "--help"], capture_output=True, text=True, timeout=300
    )
    for flag in (
        "--insecure",
        "--superlink",
        "--node-config",
        "--host",
        "--port",
        "--root-certificates",
        "--auth-supernode-private-key",
    ):
        assert flag in supernode.stdout, flag
