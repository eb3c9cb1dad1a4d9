"""The CLI's error contract: bad input is one line naming the key, file or site, exit 2, with
nothing already computed lost; every argument has help (no Ray: fast)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from builders import run_files, write_run
from cli_runs import (
    checkpointed_run,
    error_line,
    raw_config,
    stderr_lines,
)

from panoramia_fl import reporting
from panoramia_fl.clients.audit_handler import audit_seed
from panoramia_fl.contracts.checkpoint import Checkpoint, save_checkpoint
from panoramia_fl.contracts.errors import (
    MissingFileError,
    RunFileError,
    UnknownNameError,
    UserError,
)
from panoramia_fl.ml.datasets import DataError
from panoramia_fl.ml.partition import PartitionError
from panoramia_fl.simulations.cli import build_parser
from panoramia_fl.simulations.cli import main as cli_main
from panoramia_fl.simulations.config_file import (
    dump_config,
    load_run_config,
)
from panoramia_fl.simulations.experiment_config import RAY_ADDRESS_ENV, ConfigError, validate_config
from panoramia_fl.simulations.run_dir import prepare_run_dir
from panoramia_fl.simulations.sizes import check_sizes

pytestmark = pytest.mark.ray

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return checkpointed_run(tmp_path)


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_every_argument_of_every_command_has_help():
    parser = build_parser()
    commands = _subcommands(parser)
    assert set(commands) == {"run", "report", "sweep", "audit", "bounds", "cache", "gate"}
    missing = [
        f"{name} {action.option_strings or action.dest}"
        for name, command in [("panoramia-fl", parser), *commands.items()]
        for action in command._actions
        if not (action.help or "").strip()
    ]
    assert missing == []
    # Plain text: no reStructuredText markup in what --help prints.
    for text in [parser.format_help(), *(c.format_help() for c in commands.values())]:
        assert "``" not in text and ":func:" not in text and ":mod:" not in text


def test_audit_needs_a_site(run_dir, capsys):
    """No silent default: which site's members are audited is the user's choice."""
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["audit", str(run_dir / "global_model.pt"), "--config", "c.yaml"])
    assert exit_info.value.code == 2
    assert "--site" in capsys.readouterr().err


def _python(code: str, *args: str, verbose: bool = False) -> subprocess.CompletedProcess[str]:
    """``code`` run by a fresh interpreter that imports this checkout (``verbose``: ``-v``,
    whose standard error then tells the imports and the exit's teardown)."""
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    flags = ["-v"] if verbose else []
    return subprocess.run(
        [sys.executable, *flags, "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def test_help_loads_neither_torch_nor_flower():
    """``--help`` (of the CLI and of each command) stays instant: heavy imports wait for the
    command that needs them."""
    code = (
        "import sys\n"
        "from panoramia_fl.simulations.cli import main\n"
        "for argv in [['--help'], *([c, '--help'] for c in sys.argv[1:])]:\n"
        "    try:\n"
        "        main(argv)\n"
        "    except SystemExit as exit:\n"
        "        assert exit.code == 0, argv\n"
        "heavy = sorted({'torch', 'flwr', 'ray', 'scipy', 'opacus'} & set(sys.modules))\n"
        "print(heavy)\n"
    )
    proc = _python(code, "run", "report", "sweep", "audit", "bounds")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_the_process_exits_without_collecting_or_tearing_down_its_modules():
    """The ``panoramia-fl`` process freezes its objects before it exits, also when a command
    ends it with ``SystemExit``: Python's exit then skips the walk over every object the
    modules made (about a second once torch and Flower are loaded). A command that returns
    ends the process without the interpreter's teardown of its modules (0.3-0.4 s), its
    ``atexit`` handlers run and its output flushed. The exit status is the command's."""
    code = (
        "import atexit, gc, sys\n"
        "atexit.register(lambda: print('frozen', gc.get_freeze_count()))\n"
        "sys.argv = ['panoramia-fl', *sys.argv[1:]]\n"
        "from panoramia_fl.simulations.cli import program\n"
        "print('buffered', end='')  # a pipe's stdout holds it until a flush\n"
        "program()\n"
    )
    ends = ((["cache", "--help"], 0, True), (["report", "/nonexistent/run"], 2, False))
    for argv, status, through_system_exit in ends:
        proc = _python(code, *argv, verbose=True)
        assert proc.returncode == status, proc.stderr[-3000:]
        assert proc.stdout.startswith("buffered"), proc.stdout
        frozen = int(proc.stdout.split("frozen ")[-1])
        assert frozen > 10_000, proc.stdout
        # -v tells each module the teardown removes ("# cleanup[2] removing sys", ...).
        assert ("# cleanup" in proc.stderr) == through_system_exit, proc.stderr[-3000:]


def test_user_errors_share_one_base_and_keep_their_builtin_bases():
    for cls in (ConfigError, DataError, PartitionError, RunFileError):
        assert issubclass(cls, UserError) and issubclass(cls, ValueError)
    assert issubclass(UnknownNameError, KeyError) and issubclass(MissingFileError, OSError)
    # A KeyError quotes its message; the registry's error reads as written.
    assert str(UnknownNameError("data.name: unknown dataset 'x'")) == (
        "data.name: unknown dataset 'x'"
    )


def test_a_missing_config_is_one_line_and_exit_2(tmp_path, capsys):
    assert cli_main(["run", str(tmp_path / "nope.yaml")]) == 2
    line = error_line(capsys)
    assert line == f"panoramia-fl: error: config file not found: {tmp_path / 'nope.yaml'}"


def test_an_unknown_dataset_name_is_one_line_and_exit_2(tmp_path, capsys):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(raw_config(data={"name": "no_such_data"})))
    assert cli_main(["run", str(config), "--out", str(tmp_path / "out")]) == 2
    line = error_line(capsys)
    assert line.startswith("panoramia-fl: error: data.name: unknown dataset 'no_such_data'; ")
    assert "'digits'" in line
    assert not (tmp_path / "out" / "config.yaml").exists()  # so fixing the name just works


def test_a_bad_site_for_audit_is_one_line_and_exit_2(run_dir, capsys):
    ckpt = run_files(run_dir).round_checkpoint(2)
    argv = ["audit", str(ckpt), "--config", str(run_dir / "config.yaml"), "--site", "5"]
    assert cli_main(argv) == 2
    line = error_line(capsys)
    assert line == "panoramia-fl: error: --site: 5 is not one of the run's sites 0..1"


def test_a_missing_checkpoint_is_one_line_and_exit_2(run_dir, capsys):
    missing = run_dir / "nope.pt"
    argv = ["audit", str(missing), "--config", str(run_dir / "config.yaml"), "--site", "0"]
    assert cli_main(argv) == 2
    assert error_line(capsys) == f"panoramia-fl: error: checkpoint not found: {missing}"


def test_an_internal_error_is_not_dressed_as_a_user_error(tmp_path, monkeypatch):
    """A missing record key is a bug: it propagates (traceback, exit 1), not `error: ...`."""

    def broken(layout, config):
        raise KeyError("dp-epsilon")

    (tmp_path / "config.yaml").write_text("name: broken\n")
    monkeypatch.setattr(reporting, "write_report", broken)
    with pytest.raises(KeyError, match="dp-epsilon"):
        cli_main(["report", str(tmp_path)])

    code = (
        "import sys\n"
        "from panoramia_fl import reporting as r\n"
        "def broken(layout, config):\n"
        "    raise KeyError('dp-epsilon')\n"
        "r.write_report = broken\n"
        "from panoramia_fl.simulations.cli import main\n"
        f"sys.exit(main(['report', {str(tmp_path)!r}]))\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr
    assert proc.stderr.rstrip().endswith("KeyError: 'dp-epsilon'")
    assert "panoramia-fl: error" not in proc.stderr


def test_a_partly_prepared_run_dir_is_prepared_again(tmp_path):
    """dataset.json is written last: without it the site files are not trusted."""
    config = validate_config(raw_config())
    run_dir = tmp_path / "run"
    prepare_run_dir(config, run_files(run_dir))
    site = run_dir / "sites" / "site-1.npz"
    good = site.read_bytes()
    site.write_bytes(b"torn")
    prepare_run_dir(config, run_files(run_dir))
    assert site.read_bytes() == b"torn"  # prepared: kept as it is
    (run_dir / "dataset.json").unlink()
    prepare_run_dir(config, run_files(run_dir))
    assert site.read_bytes() == good and (run_dir / "dataset.json").exists()


def test_a_failed_set_up_leaves_nothing_that_blocks_the_corrected_command(tmp_path, capsys):
    """config.yaml is written once the partition succeeded: 500 sites on 1,437 digits fail,
    and the corrected command then starts the run instead of calling it another config."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(raw_config(partition={"num_sites": 500})))
    out = tmp_path / "run"
    assert cli_main(["run", str(bad), "--out", str(out)]) == 2
    capsys.readouterr()
    assert not run_files(out).config.exists()
    prepare_run_dir(
        validate_config(raw_config()), run_files(out)
    )  # what the corrected command does first
    assert run_files(out).config.exists() and run_files(out).dataset.exists()


@pytest.mark.parametrize(
    "setting, key",
    [("seed=-1", "seed"), ("data.options.encoding=bogus", "data.options.encoding")],
)
def test_bad_values_are_named_errors(tmp_path, capsys, setting, key):
    config = tmp_path / "c.yaml"
    raw = (
        raw_config(data={"name": "text_files", "root": str(tmp_path)})
        if "encoding" in key
        else raw_config()
    )
    config.write_text(yaml.safe_dump(raw))
    argv = ["run", str(config), "--out", str(tmp_path / "o"), "--set", setting]
    assert cli_main(argv) == 2
    assert error_line(capsys).startswith(f"panoramia-fl: error: {key}:")


def test_torn_run_files_on_resume_are_named(run_dir, capsys):
    layout = run_files(run_dir)
    layout.dataset.write_text('{"name": "dig')
    assert cli_main(["run", "--resume", str(run_dir)]) == 2
    assert "dataset.json is not valid JSON" in error_line(capsys)
    layout.dataset.unlink()
    prepare_run_dir(validate_config(raw_config()), run_files(run_dir))
    layout.metrics.mkdir()
    assert cli_main(["run", "--resume", str(run_dir)]) == 2
    assert "metrics.jsonl is a directory" in error_line(capsys)


def test_a_torn_reference_manifest_is_named(tmp_path):
    from panoramia_fl.simulations.reference_models import load_reference_states

    layout = run_files(tmp_path)
    layout.reference_models.mkdir()
    layout.reference_manifest.write_text('{"count": ')
    with pytest.raises(RunFileError, match=r"manifest\.json is not valid JSON"):
        load_reference_states(run_files(tmp_path))


def test_audit_of_a_truncated_checkpoint_is_named(run_dir, capsys):
    checkpoint = run_files(run_dir).round_checkpoint(2)
    checkpoint.write_bytes(checkpoint.read_bytes()[:200])
    config = str(run_files(run_dir).config)
    assert cli_main(["audit", str(checkpoint), "--config", config, "--site", "0"]) == 2
    assert f"{checkpoint} is not a readable checkpoint" in error_line(capsys)


def test_report_files_in_the_way_or_not_utf8_are_named(tmp_path, capsys):
    run = write_run(tmp_path / "r", n_sites=1, audits={})
    (run / "report.csv").mkdir()
    assert cli_main(["report", str(run)]) == 2
    assert "report.csv is a directory" in error_line(capsys)
    (run / "report.csv").rmdir()
    (run / "partition.json").write_bytes(b'{"sites": ["\xff"]}')
    assert cli_main(["report", str(run)]) == 2
    assert "partition.json is not UTF-8" in error_line(capsys)


def test_bounds_on_a_damaged_npz_is_named(tmp_path, capsys):
    import numpy as np

    np.savez(tmp_path / "s.npz", scores=np.arange(40.0), labels=np.arange(40) % 2)
    raw = (tmp_path / "s.npz").read_bytes()
    (tmp_path / "s.npz").write_bytes(raw[: len(raw) - 30])
    assert cli_main(["bounds", str(tmp_path / "s.npz")]) == 2
    assert "corrupt NPZ file" in error_line(capsys)


def test_a_resource_request_the_cluster_cannot_meet_is_an_error_first(
    tmp_path, capsys, monkeypatch
):
    """The local Ray a run would start (no cluster to join) has this machine's CPUs: 64 per
    site is refused before anything is prepared, not left waiting on an empty actor pool."""
    monkeypatch.delenv(RAY_ADDRESS_ENV, raising=False)
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(raw_config(resources={"num_cpus": 64})))
    assert cli_main(["run", str(config), "--out", str(tmp_path / "run")]) == 2
    assert "resources.num_cpus=64" in error_line(capsys)
    assert not (tmp_path / "run").exists()


def test_a_run_whose_rounds_all_aggregated_nothing_exits_2(run_dir, capsys):
    """Every site's update rejected in every round (as with fl.learning_rate=inf): the run
    ends with its report written and one line saying so, exit 2."""
    layout = run_files(run_dir)
    save_checkpoint(
        layout.round_checkpoint(3), Checkpoint(round=3, state_dict={"w": torch.zeros(1)}, meta=None)
    )
    save_checkpoint(
        layout.final_model, Checkpoint(round=3, state_dict={"w": torch.zeros(1)}, meta=None)
    )
    lost = {"0": "rejected: train reply: non-finite weights", "1": "rejected: non-finite"}
    lines = [{"round": r, "global_accuracy": 0.1, "failures": lost} for r in (1, 2, 3)]
    layout.metrics.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert cli_main(["run", "--resume", str(run_dir)]) == 2
    line = error_line(capsys)
    assert "no site's update was aggregated in any of the 3 rounds" in line
    assert "round 1, site 0: rejected: train reply: non-finite weights" in line
    assert (run_dir / "report.html").exists()


@pytest.mark.parametrize(
    "args, says",
    [
        (
            ["--seeds", "99999999999"],
            "--seeds: 99999999999 runs is more than 1000; each is a whole training and audit run",
        ),
        (
            ["--seeds", "5", "--set", "seed=4294967294"],
            "--seeds: 5 runs from seed 4294967294 reach seed 4294967298, past the largest seed "
            "4294967295; run fewer, or start from a lower seed",
        ),
    ],
)
def test_replicate_sets_past_the_limits_are_refused_at_once_naming_seeds(
    tmp_path, capsys, args, says
):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump(raw_config()))
    assert cli_main(["run", str(config), "--out", str(tmp_path / "set"), *args]) == 2
    assert stderr_lines(capsys) == [f"panoramia-fl: error: {says}"]
    assert not (tmp_path / "set").exists()


def test_gradient_canaries_that_cannot_fit_are_refused_with_their_estimate(
    tmp_path, capsys, monkeypatch
):
    """2K canaries of about 110 bytes each in every training site's process, against half a
    site's share of the memory: checked on the config alone, before anything is prepared."""
    raw = raw_config(dp={"level": "record", "noise_multiplier": 1.0}, resources={"num_cpus": 1})
    raw["audit"] = {"enabled": True, "gradient_canaries": 10**9}
    config = validate_config(raw)
    with pytest.raises(ConfigError) as caught:
        check_sizes(config, memory=23 * 10**9, cpus=2)
    message = str(caught.value)
    assert message.startswith(
        "audit.gradient_canaries: 1000000000 pairs need about 220 GB in each site's process "
        "(2 x 1000000000 canaries x 110 bytes), but 23 GB of memory for 2 sites training at once"
    )
    assert f"at most about {int(0.5 * 23e9 / 2 // 220):,} pairs here" in message
    fits = validate_config({**raw, "audit": {"enabled": True, "gradient_canaries": 10**6}})
    check_sizes(fits, memory=23 * 10**9, cpus=2)  # 220 MB a site: accepted
    # One site at a time (4 CPUs each on 4) may hold twice as many.
    alone = validate_config({**raw, "resources": {"num_cpus": 4}})
    with pytest.raises(ConfigError, match="for 1 site training at once"):
        check_sizes(alone, memory=23 * 10**9, cpus=4)
    # The CLI refuses it on this machine before the run directory exists.
    monkeypatch.delenv(RAY_ADDRESS_ENV, raising=False)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert cli_main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    (line,) = stderr_lines(capsys)
    assert line.startswith("panoramia-fl: error: audit.gradient_canaries: 1000000000 pairs need")
    assert not (tmp_path / "run").exists()


def test_a_declared_size_that_never_finishes_is_refused_before_any_work(
    tmp_path, capsys, monkeypatch
):
    """dp.declared_size sets a site's DP-SGD steps: one whose rounds could not finish is
    refused as gradient-canary sizes are, naming the key, before the run directory exists."""
    monkeypatch.delenv(RAY_ADDRESS_ENV, raising=False)
    raw = raw_config(dp={"level": "record", "noise_multiplier": 1.0, "declared_size": 10**12})
    with pytest.raises(ConfigError, match="dp.declared_size: 1000000000000 records"):
        check_sizes(validate_config(raw), memory=23 * 10**9, cpus=2)
    path = tmp_path / "c.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert cli_main(["run", str(path), "--out", str(tmp_path / "run")]) == 2
    (line,) = stderr_lines(capsys)
    assert line.startswith(
        "panoramia-fl: error: dp.declared_size: 1000000000000 records at fl.batch_size 32 make "
        "31250000000 noisy steps a round"
    )
    assert not (tmp_path / "run").exists()
    fits = validate_config({**raw, "dp": {**raw["dp"], "declared_size": 10**6}})
    check_sizes(fits, memory=23 * 10**9, cpus=2)


def test_cache_show_and_clear(tmp_path, monkeypatch, capsys):
    import torch

    from panoramia_fl.simulations.weights_cache import CACHE_ENV, WeightsCache

    folder = tmp_path / "cache"
    monkeypatch.setenv(CACHE_ENV, "off")  # --cache overrides it (and is undone after)
    WeightsCache(folder, "reference-models").store("k" * 64, {"w": torch.ones(3)}, about={})
    assert cli_main(["cache", "show", "--cache", str(folder)]) == 0
    assert f"{folder}: 1 entries" in capsys.readouterr().out
    assert cli_main(["cache", "clear", "--cache", str(folder)]) == 0
    assert f"{folder}: removed 1 files" in capsys.readouterr().out
    assert WeightsCache(folder, "reference-models").load("k" * 64) is None
    assert cli_main(["cache", "show", "--cache", "off"]) == 0
    assert "off" in capsys.readouterr().out


def test_audit_seeds_never_repeat_across_a_replicate_set() -> None:
    """New runs draw each site's audit seed from a seed sequence: 5 runs of 20 sites, 100
    seeds; the legacy mix repeats (site 7 of seed 0 is site 0 of seed 1)."""
    pairs = [(run, site) for run in range(5) for site in range(20)]
    assert len({audit_seed(0, run, site) for run, site in pairs}) == len(pairs)
    assert audit_seed(0, 0, 7, seeding="legacy") == audit_seed(0, 1, 0, seeding="legacy")
    assert audit_seed(3, 2, 1) == audit_seed(3, 2, 1) != audit_seed(4, 2, 1)


def test_a_run_written_before_seed_sequences_keeps_its_seeding(tmp_path: Path) -> None:
    """A run's config.yaml says which seeding its audits use; one written before the key
    existed reads as legacy, so a resumed old run audits as it did."""
    path = tmp_path / "config.yaml"
    text = dump_config(validate_config(raw_config()))
    path.write_text(text)
    assert load_run_config(path).audit.seeding == "sequence"
    old = yaml.safe_load(text)
    del old["audit"]["seeding"]
    path.write_text(yaml.safe_dump(old))
    assert load_run_config(path).audit.seeding == "legacy"
    assert load_run_config(path, ["audit.seeding=sequence"]).audit.seeding == "sequence"
