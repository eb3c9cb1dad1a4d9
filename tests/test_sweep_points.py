"""Sweeps: ``points:`` beside ``grid:``, and the sweep report's per-site privacy/utility view."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import (
    QUALITY,
    canary_block,
    client_dp_accounting,
    flat,
    make_result,
    ok_audit,
    run_files,
    set_config,
    with_quality,
    write_run,
)

from panoramia_fl.contracts.run_files import CLIENT_DP_FILE
from panoramia_fl.reporting import SweepPoint, write_sweep_report
from panoramia_fl.reporting.layout.sweep_columns import SWEEP_SITE_COLUMNS
from panoramia_fl.reporting.sweeps import sweep_plots
from panoramia_fl.reporting.sweeps.sweep_report import build_sweep_report
from panoramia_fl.simulations.config_file import report_config
from panoramia_fl.simulations.experiment_config import ConfigError
from panoramia_fl.simulations.sweep import expand, load_sweep


def _sweep_file(tmp_path: Path, body: dict[str, Any]) -> Path:
    (tmp_path / "base.yaml").write_text(yaml.safe_dump({"name": "base", "fl": {"rounds": 2}}))
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump({"name": "s", "base": "base.yaml", **body}))
    return path


def test_points_expand_with_labels_as_given(tmp_path: Path) -> None:
    path = _sweep_file(
        tmp_path,
        {
            "overrides": {"fl.rounds": 3, "seed": 7},
            "points": {
                "no DP": {"dp.level": "none"},
                "record eps=4": {"dp.enabled": True, "dp.target_epsilon": 4},
                "record inf": {"dp.enabled": True, "dp.target_epsilon": "inf", "seed": 1},
            },
        },
    )
    points = expand(load_sweep(path))
    assert [label for label, _, _ in points] == ["no_DP", "record_eps=4", "record_inf"]
    overrides = {label: o for label, o, _ in points}
    assert overrides["record_eps=4"] == {"dp.enabled": True, "dp.target_epsilon": 4}
    assert math.isinf(overrides["record_inf"]["dp.target_epsilon"])
    configs = {label: c for label, _, c in points}
    assert configs["record_eps=4"].dp.enabled and configs["record_eps=4"].dp.target_epsilon == 4
    assert not configs["no_DP"].dp.enabled
    assert not configs["record_inf"].dp.enabled  # eps = inf: no record-level DP
    # The sweep's overrides apply to every point; a point's own keys win.
    assert {c.fl.rounds for c in configs.values()} == {3}
    assert configs["record_eps=4"].seed == 7 and configs["record_inf"].seed == 1
    assert configs["no_DP"].name == "no_DP"


def test_grid_still_expands(tmp_path: Path) -> None:
    path = _sweep_file(tmp_path, {"grid": {"dp.target_epsilon": [1, "inf"], "seed": [0]}})
    labels = [label for label, _, _ in expand(load_sweep(path))]
    assert labels == ["target_epsilon=1_seed=0", "target_epsilon=inf_seed=0"]


@pytest.mark.parametrize(
    ("body", "match"),
    [
        (
            {"grid": {"seed": [0]}, "points": {"a": {"seed": 1}}},
            r"grid, points: give exactly one of grid .* or points",
        ),
        ({}, r"grid, points: give exactly one"),
        ({"points": {}}, r"points: needs at least one point"),
        ({"points": {"a": [1, 2]}}, r"points\.a"),
        ({"points": {"a b": {"seed": 1}, "a_b": {"seed": 2}}}, r"points: .*repeated: \['a_b'\]"),
        # A grid without a point would run nothing and write an empty page.
        (
            {"grid": {"fl.learning_rate": [], "seed": [0]}},
            r"grid: fl\.learning_rate lists no value",
        ),
        ({"grid": {}}, r"grid: needs at least one key"),
        (
            {"grid": {"seed": [0]}, "replicates": 100000},
            r"sweep point seed=0: replicates: 100000 runs is more than 1000",
        ),
    ],
)
def test_bad_points_name_the_key(tmp_path: Path, body: dict[str, Any], match: str) -> None:
    path = _sweep_file(tmp_path, body)
    with pytest.raises(ConfigError, match=match):
        expand(load_sweep(path))


def test_a_bad_point_names_its_label(tmp_path: Path) -> None:
    path = _sweep_file(tmp_path, {"points": {"bad": {"fl.rounds": 0}}})
    with pytest.raises(ConfigError, match=r"sweep point bad: fl\.rounds"):
        expand(load_sweep(path))


@pytest.fixture(scope="module")
def sweep_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Three points of one site each: record eps 2 with canaries, client level only (its
    ledger implies 6 per record), no DP."""
    base = tmp_path_factory.mktemp("sweep")
    rec = write_run(
        base / "rec2",
        n_sites=1,
        dp=2.0,
        accuracy=0.7,
        audits={
            0: ok_audit(
                0, with_quality(make_result([1.0, 1.0], [1.25, 1.5], o1=[0.25, 0.5])), dp=2.0
            )
            | {"canary": canary_block(0.875, 3.0)}
        },
    )
    set_config(rec, level="record", enabled=True, target_epsilon=2.0, canaries=200)
    client = write_run(
        base / "client",
        n_sites=1,
        accuracy=0.75,
        audits={0: ok_audit(0, make_result([1.0, 1.0], [1.5, 1.75], o1=[0.5, 0.75]))},
    )
    set_config(client, level="client", enabled=False)
    (client / CLIENT_DP_FILE).write_text(json.dumps(client_dp_accounting({0: (1.5, 6.0)})))
    nodp = write_run(
        base / "nodp",
        n_sites=1,
        accuracy=0.9,
        audits={0: ok_audit(0, make_result([1.0, 1.0], [3.0, 3.25], o1=[2.0, 2.25]))},
    )
    return {"rec": rec, "client": client, "nodp": nodp, "base": base}


def _points(runs: dict[str, Path]) -> list[SweepPoint]:
    return [
        SweepPoint("record eps=2", {"dp.target_epsilon": 2}, run_files(runs["rec"])),
        SweepPoint("client z=1", {"dp.level": "client"}, run_files(runs["client"])),
        SweepPoint("no DP", {"dp.level": "none"}, run_files(runs["nodp"])),
    ]


def test_sweep_table_has_the_privacy_columns(sweep_runs: dict[str, Path]) -> None:
    files = write_sweep_report(sweep_runs["base"] / "out", _points(sweep_runs), report_config)
    sweep = json.loads(files.json_path.read_text())
    by_label = {p["label"]: p for p in sweep["points"]}
    rec_site = by_label["record eps=2"]["sites"][0]
    rec = flat(rec_site)
    assert rec["dp_epsilon"] == 2.0
    assert rec["canary_eps_lb"] == 0.875 and rec["canaries"] == 200
    assert by_label["record eps=2"]["global_accuracy"] == pytest.approx(0.7)
    assert rec_site["audit"]["quality"] == QUALITY
    assert by_label["record eps=2"]["canaries"] == 200
    client = by_label["client z=1"]
    assert client["private"] is True and client["dp_level"] == "client"
    client_site = flat(client["sites"][0])
    assert client_site["dp_epsilon_client"] == 1.5
    assert client_site["dp_epsilon_client_record"] == 6.0  # the theoretical eps it implies
    assert client_site["dp_epsilon"] is None
    assert by_label["no DP"]["private"] is False

    for header in (
        "accountant eps record",
        "accountant eps client (site-level)",
        "accuracy (global)",
        "accuracy (site holdout)",
        "canary_eps_lb",
        "eps_tilde two-sided [95% CI] (side)",
        "O(1)",
    ):
        assert header in [c.header for c in SWEEP_SITE_COLUMNS]
    page = files.html_path.read_text()
    assert files.md_path is not None
    md = files.md_path.read_text()
    for text in (page, md):
        for header in [c.header for c in SWEEP_SITE_COLUMNS]:
            assert header in text, header
        assert "0.875" in text and "0.810" in text  # canary eps lb, site holdout accuracy
        assert "1.500" in text  # client level, site-level epsilon
    assert 'title="0.875"' in page and 'title="1.5"' in page
    # The per-site plots against the accountant's epsilon.
    assert 'aria-label="accuracy vs accountant epsilon per site"' in page
    assert 'aria-label="measured lower bounds vs accountant epsilon per site"' in page
    # And what each party can measure, per point.
    assert 'aria-label="what each party can measure, per sweep point"' in page
    assert page.count('<div class="plot" role="img"') == 5


def test_site_plots_draw_against_the_accountant_eps(
    sweep_runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures: list[Any] = []
    monkeypatch.setattr(sweep_plots, "_svg", lambda panels, **_: figures.append(panels) or "svg")
    report = build_sweep_report(tmp_path, _points(sweep_runs), report_config)

    assert sweep_plots.sweep_site_bounds_plot(report.points) == "svg"
    (ax,) = figures[-1]
    assert ax.xlog
    ticks = {label: x for x, label in ax.xticks}
    assert set(ticks) == {"2", "6", "no DP"}
    assert ticks["no DP"] > ticks["6"]  # the right end
    # y = x on a log x-axis is a curve: traced point by point, not a segment between its ends.
    diagonals = [line for line in ax.lines if len(line.xs) > 2 and list(line.xs) == list(line.ys)]
    assert diagonals, "no y = x line"
    # Markers: the canary bound (one point), eps_tilde and O(1) at every point.
    ys = sorted(round(p.y, 4) for p in ax.points)
    assert 0.875 in ys and 2.125 in ys  # record point's canary; no-DP point's O(1)

    assert sweep_plots.sweep_site_accuracy_plot(report.points) == "svg"
    (ax,) = figures[-1]
    ys = {round(p.y, 4) for p in ax.points}
    assert {0.7, 0.75, 0.9, QUALITY["target_accuracy_nonmembers"]} <= ys
    assert "no DP" in {label for _, label in ax.xticks or []}

    # Nothing to draw without an ok site.
    assert sweep_plots.sweep_site_bounds_plot([]) is None


def test_a_sweep_without_points_exits_2_and_writes_nothing(tmp_path: Path, capsys) -> None:
    from panoramia_fl.simulations.cli import main as cli_main

    path = _sweep_file(tmp_path, {"grid": {"fl.learning_rate": []}, "output_dir": "out"})
    assert cli_main(["sweep", str(path)]) == 2
    assert "grid: fl.learning_rate lists no value" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not Path("out/s").exists()


def test_report_writes_a_sweeps_reports_again_from_its_saved_runs(
    sweep_runs: dict[str, Path], capsys
) -> None:
    """``panoramia-fl report SWEEP_DIR``: the sweep's files and each point's report again,
    from the points sweep.json lists; a folder that is no sweep's is named."""
    from panoramia_fl.simulations.cli import main as cli_main

    folder = sweep_runs["base"] / "again"
    files = write_sweep_report(folder, _points(sweep_runs), report_config, write_point_reports=True)
    before = files.json_path.read_text()
    files.html_path.unlink()
    (sweep_runs["rec"] / "report.html").unlink()
    assert cli_main(["report", str(folder)]) == 0
    assert files.json_path.read_text() == before and files.html_path.exists()
    assert (sweep_runs["rec"] / "report.html").exists()  # each point's own report too
    assert cli_main(["report", str(folder), "--site", "0"]) == 2
    assert f"--site: {folder} is a sweep" in capsys.readouterr().err
    files.json_path.write_text(json.dumps({"points": [{"label": "x"}]}))
    assert cli_main(["report", str(folder)]) == 2
    assert f"{files.json_path}: not a sweep report" in capsys.readouterr().err
