"""``run --resume``: what a resumed run may change, what it refuses (naming every key), and
that a refusal changes no file of the run."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from builders import run_files
from cli_runs import checkpointed_run, error_line, raw_config, site_files, site_mtimes, stderr_lines

import panoramia_fl.simulations.runner
from panoramia_fl import reporting
from panoramia_fl.simulations.cli import main as cli_main
from panoramia_fl.simulations.config_file import DIGEST_LINE, check_config_digest
from panoramia_fl.simulations.experiment_config import ConfigError, validate_config
from panoramia_fl.simulations.resume import check_resume

pytestmark = pytest.mark.ray


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return checkpointed_run(tmp_path)


def test_resume_refuses_a_new_seed_and_changes_nothing(run_dir, capsys):
    before, mtimes = site_files(run_dir), site_mtimes(run_dir)
    assert cli_main(["run", "--resume", str(run_dir), "--set", "seed=1"]) == 2
    line = error_line(capsys)
    assert line.startswith(f"panoramia-fl: error: --resume {run_dir}: cannot change seed (3 -> 1")
    assert "partition" in line
    assert site_files(run_dir) == before and site_mtimes(run_dir) == mtimes


def test_resume_names_every_refused_key(run_dir, capsys):
    before = site_files(run_dir)
    argv = ["run", "--resume", str(run_dir), "--set", "resources.num_cpus=1"]
    argv += [
        "--set",
        "model.name=tiny",
        "--set",
        "dp.noise_multiplier=1",
        "--set",
        "dp.level=record",
    ]
    argv += ["--set", "partition.alpha=0.1", "--set", "fl.learning_rate=0.1"]
    assert cli_main(argv) == 2
    line = error_line(capsys)
    for key in ("model.name", "dp.level", "dp.noise_multiplier", "partition.alpha"):
        assert f"{key} (" in line
    assert "fl.learning_rate (0.001 -> 0.1: the rounds already trained used it)" in line
    assert "resources.num_cpus (" not in line  # allowed, so not named
    assert site_files(run_dir) == before


def test_resume_refuses_fewer_rounds_than_done(run_dir, capsys):
    before = site_files(run_dir)
    assert cli_main(["run", "--resume", str(run_dir), "--set", "fl.rounds=1"]) == 2
    line = error_line(capsys)
    assert "fl.rounds (3 -> 1: 2 rounds are already trained; fl.rounds must be at least 2)" in line
    assert site_files(run_dir) == before


@pytest.fixture
def no_training(monkeypatch):
    """Run the CLI's resume path for real up to the simulation, which is recorded instead."""
    calls: list[tuple[str, ...]] = []

    def simulate(config, meta, layout, *, phases, **_):
        calls.append(phases)

    monkeypatch.setattr(panoramia_fl.simulations.runner, "_simulate", simulate)
    monkeypatch.setattr(
        reporting,
        "write_report",
        lambda layout, config: reporting.RunReportFiles(
            json_path=layout.report_json, html_path=layout.report_html
        ),
    )
    return calls


@pytest.mark.parametrize(
    ("override", "key", "value"),
    [("resources.num_cpus=1", "resources", {"num_cpus": 1}), ("fl.rounds=5", "fl", {"rounds": 5})],
)
def test_resume_accepts_resources_and_more_rounds(run_dir, no_training, override, key, value):
    before, mtimes = site_files(run_dir), site_mtimes(run_dir)
    assert cli_main(["run", "--resume", str(run_dir), "--set", override]) == 0
    assert no_training == [("train",)]
    after = site_files(run_dir)
    # Only config.yaml changes, by exactly the override; no site file is rewritten.
    stored = yaml.safe_load(after.pop("config.yaml"))
    expected = validate_config(raw_config(**{key: value})).model_dump(mode="json")
    assert stored == expected
    assert after == {k: v for k, v in before.items() if k != "config.yaml"}
    assert site_mtimes(run_dir) == mtimes


def test_resume_allows_audit_settings_but_not_canaries(run_dir):
    old = validate_config(raw_config())
    new = validate_config(raw_config(audit={"enabled": True, "use_holdout": False}))
    check_resume(old, new, ["audit.enabled=true", "audit.use_holdout=false"], run_files(run_dir))
    canaries = validate_config(raw_config(audit={"enabled": True, "input_canaries": 20}))
    with pytest.raises(ConfigError, match=r"change audit\.input_canaries \(0 -> 20: the input"):
        check_resume(
            old, canaries, ["audit.input_canaries=20", "audit.enabled=true"], run_files(run_dir)
        )


@pytest.mark.parametrize(
    "dp",
    [
        {"enabled": True, "target_epsilon": 4.0},
        {"level": "client", "client": {"target_epsilon": 4.0}},
    ],
)
def test_more_rounds_are_refused_when_dp_noise_was_calibrated_to_them(tmp_path, dp):
    old = validate_config(raw_config(dp=dp))
    with pytest.raises(ConfigError, match=r"fl\.rounds \(3 -> 4: the DP noise .* fl\.rounds=3"):
        check_resume(
            old,
            validate_config(raw_config(dp=dp, fl={"rounds": 4})),
            ["fl.rounds=4"],
            run_files(tmp_path),
        )
    fixed = {**dp, "target_epsilon": None, "noise_multiplier": 1.0}
    if "client" in dp:
        fixed = {"level": "client", "client": {"noise_multiplier": 1.0}}
    old = validate_config(raw_config(dp=fixed))
    check_resume(
        old,
        validate_config(raw_config(dp=fixed, fl={"rounds": 4})),
        ["fl.rounds=4"],
        run_files(tmp_path),
    )


def test_a_config_yaml_edited_by_hand_is_refused_on_resume(run_dir, capsys, no_training):
    """The run keeps a digest of its resolved settings in config.yaml's first line: an edited
    setting is refused before anything runs; a comment is not a setting, and what --set
    may change is written with a new digest."""
    layout = run_files(run_dir)
    text = layout.config.read_text()
    assert text.startswith(DIGEST_LINE)
    before = site_files(run_dir)
    layout.config.write_text(text.replace("batch_size: 32", "batch_size: 16"))
    assert cli_main(["run", "--resume", str(run_dir)]) == 2
    (line,) = stderr_lines(capsys)
    assert line.startswith(f"panoramia-fl: error: {layout.config} was edited after the run wrote")
    assert f"--resume {run_dir} --set KEY=VALUE" in line
    # Without its digest line (a YAML tool's load and dump drops it) the edit is refused too.
    edited = text.replace("batch_size: 32", "batch_size: 16").partition("\n")[2]
    layout.config.write_text(edited)
    assert cli_main(["run", "--resume", str(run_dir)]) == 2
    (line,) = stderr_lines(capsys)
    assert line.startswith(f"panoramia-fl: error: {layout.config} was edited after the run wrote")
    assert cli_main(["run", str(layout.config), "--out", str(run_dir)]) == 2  # as a new run
    layout.config.write_text(text + "# a note of the operator's\n")
    before["config.yaml"] = layout.config.read_bytes()
    assert site_files(run_dir) == before
    assert cli_main(["run", "--resume", str(run_dir), "--set", "resources.num_cpus=1"]) == 0
    check_config_digest(layout.config)
    assert "num_cpus: 1" in layout.config.read_text()
