"""The product's main job end to end on digits: FL, per-site audits, report, resume, sweep."""

from __future__ import annotations

import csv
import json

import pytest
import yaml
from builders import run_files

from panoramia_fl.audit.result import Interval
from panoramia_fl.clients.site_data import SiteData
from panoramia_fl.reporting import SCHEMA_VERSION, SweepPoint, write_sweep_progress
from panoramia_fl.reporting.numbers.formatting import fmt_est
from panoramia_fl.reporting.privacy.update_membership import SUM_ONLY, SUM_ONLY_SHORT
from panoramia_fl.simulations.cli import main as cli_main
from panoramia_fl.simulations.config_file import report_config
from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.runner import run_experiment

pytestmark = [pytest.mark.slow, pytest.mark.ray]

TINY_AUDIT = {
    "quick": True,
    "helper_epochs": 2,
    "splits": {"generator": 100, "train": 60, "val": 30},
    "generator": {"kind": "cgan", "epochs": 2},
    "classifier": {"epochs": [2], "gbm_iterations": [50]},
    # No reference models (their training is a Ray task's process of its own): the calibrated
    # audit in a run is tests/test_reference_models.py's.
    "calibration": {"reference_models": 0},
}


def _raw(name: str) -> dict:
    # Site 2 is too small for the audit's splits: its audit fails for a real reason.
    return {
        "name": name,
        "seed": 3,
        "data": {"name": "digits"},
        "partition": {"scheme": "quantity", "num_sites": 3, "sizes": [500, 500, 120]},
        "fl": {"rounds": 1, "local_epochs": 1, "batch_size": 32},
        "audit": {"enabled": True, "settings": TINY_AUDIT},
    }


# A few steps of the inversion attack: what is checked here is where its outputs go.
TINY_INVERSION = {"rounds": [1], "iterations": 5, "restarts": 1, "max_records": 8}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("e2e") / "run"
    raw = _raw("e2e")
    raw["audit"]["inversion"] = TINY_INVERSION
    run_experiment(validate_config(raw), path)
    return path


def _audits(run_dir):
    return {p.stem: json.loads(p.read_text()) for p in (run_dir / "audits").glob("site-*.json")}


def test_every_site_reports_and_failure_is_isolated(run_dir):
    audits = _audits(run_dir)
    assert set(audits) == {"site-0", "site-1", "site-2"}
    assert audits["site-0"]["status"] == audits["site-1"]["status"] == "ok"
    failed = audits["site-2"]
    assert failed["status"] == "failed" and failed["result"] is None
    assert "split" in failed["error"].lower()
    # It came back as Flower's error reply, with the site's exception and short traceback.
    assert failed["error"].startswith("SplitError: ")
    assert failed["traceback"].startswith("Traceback") and failed["model_round"] == 1
    report = json.loads((run_dir / "report.json").read_text())
    by_site = {s["site_id"]: s for s in report["sites"]}
    assert by_site[2]["status"] == "failed" and by_site[2]["error"]
    assert by_site[0]["status"] == by_site[1]["status"] == "ok"


def test_report_files_agree_with_audits(run_dir):
    report = json.loads((run_dir / "report.json").read_text())
    assert report["schema_version"] == SCHEMA_VERSION
    audits = _audits(run_dir)
    with open(run_dir / "report.csv") as fh:
        rows = {int(r["site_id"]): r for r in csv.DictReader(fh)}
    for site in report["sites"]:
        if site["status"] != "ok":
            continue
        result = audits[f"site-{site['site_id']}"]["result"]
        game, paper = site["audit"]["one_sided"], result["one_sided"]
        for key in ("c_lb", "c_eps_lb", "eps_tilde"):
            assert game[key]["mean"] == pytest.approx(paper[key]["mean"])
            column = f"audit_one_sided_{key}_mean"
            assert float(rows[site["site_id"]][column]) == pytest.approx(game[key]["mean"])
        assert game["ceiling"] == pytest.approx(paper["ceiling"])
        for rep in (r["one_sided"] for r in result["repeats"]):
            assert rep["eps_tilde"] == pytest.approx(max(0.0, rep["c_eps_lb"] - rep["c_lb"]))
            assert rep["c_lb"] <= rep["ceiling"] + 1e-9
        assert game["rm_rn_eps_lb"] is not None and site["audit"]["o1_eps_lb"] is not None
        assert set(game["flags"]) >= {"saturated", "c_lb_not_tight"}
    html = (run_dir / "report.html").read_text()
    assert "lower bound" in html and "ceiling" in html.lower()
    assert (run_dir / "report.md").exists()


def test_report_holds_no_raw_records(run_dir):
    data = SiteData.load(run_files(run_dir).site_file(0))
    pixels = [str(int(v)) for v in data.train_x[0].reshape(-1)[:12]]
    needle = ",".join(pixels)
    for name in ("report.json", "report.csv", "report.md", "report.html"):
        text = (run_dir / name).read_text().replace(" ", "")
        assert needle not in text
    report = json.loads((run_dir / "report.json").read_text())
    assert "scores" not in json.dumps(report["sites"])


def test_server_files_hold_no_reconstruction_or_raw_record(run_dir):
    """The inversion audit's numbers reach the server; its reconstructions, the kept
    updates and the records they came from stay in the sites' own folders."""
    layout = run_files(run_dir)
    site_local = (layout.sites, layout.site_state)
    galleries = [p.read_bytes() for p in layout.site_state.glob("site-*-inversion.png")]
    kept = sorted(p.name for p in layout.site_state.glob("site-*-inversion-round-*.pt"))
    assert len(galleries) == 2 and kept == [
        "site-0-inversion-round-1.pt",
        "site-1-inversion-round-1.pt",
        "site-2-inversion-round-1.pt",
    ]
    records = []
    for site in (0, 1, 2):
        data = SiteData.load(layout.site_file(site))
        records += [x.tobytes() for x in data.train_x[:20]]
        records += [",".join(str(int(v)) for v in x.reshape(-1)[:16]) for x in data.train_x[:20]]
    server_files = [
        p
        for p in run_dir.rglob("*")
        if p.is_file() and not any(p.is_relative_to(d) for d in site_local)
    ]
    assert len(server_files) > 10
    for path in server_files:
        content = path.read_bytes()
        assert not path.name.endswith(".png") and b"\x89PNG" not in content, path
        assert not any(g[100:400] in content for g in galleries), path
        flat = content.replace(b" ", b"")
        for record in records:
            needle = record.encode() if isinstance(record, str) else record
            assert needle not in flat, path
    for name in ("site-0", "site-1"):
        (entry,) = _audits(run_dir)[name]["inversion"]
        assert entry["round"] == 1 and entry["measure"] == "ssim"
        assert all(isinstance(v, int | float | str) or v is None for v in entry.values())
    report = json.loads((run_dir / "report.json").read_text())
    sites = {s["site_id"]: s for s in report["sites"]}
    assert [e["round"] for e in sites[0]["privacy"]["inversion"]] == [1]
    page = (run_dir / "site-reports" / "site-0.html").read_text()
    assert "Can the server rebuild your records" in page
    assert 'src="../site_state/site-0-inversion.png"' in page


def test_resume_reruns_only_missing_audits(run_dir, capsys):
    kept = run_dir / "audits" / "site-1.json"
    kept_time = kept.stat().st_mtime_ns
    ckpt_time = (run_dir / "global_model.pt").stat().st_mtime_ns
    (run_dir / "audits" / "site-0.json").unlink()
    stray = run_dir / "audits" / "site-9.json"  # of no listed site: the report's warning
    stray.write_bytes(kept.read_bytes())
    # Site 2 fails again: the run says so on stderr and exits with the lost-sites status.
    assert cli_main(["run", "--resume", str(run_dir)]) == 75
    stray.unlink()
    said = [line for line in capsys.readouterr().err.splitlines() if "panoramia-fl:" in line]
    assert said[0] == f"panoramia-fl: {stray}: site 9 is not in partition.json, so its " + (
        "audit file is no site of this consortium's and is left out of the report"
    )
    assert said[1].startswith("panoramia-fl: Site audits lost: site 2 failed (SplitError: ")
    assert (
        said[-1]
        == f"panoramia-fl: audit the lost sites again with: panoramia-fl run --resume {run_dir}"
    )
    assert kept.stat().st_mtime_ns == kept_time
    assert (run_dir / "global_model.pt").stat().st_mtime_ns == ckpt_time
    audits = _audits(run_dir)
    assert audits["site-0"]["status"] == "ok"
    assert audits["site-2"]["status"] == "failed"  # retried, fails again for the same reason


def test_report_command_regenerates(run_dir):
    (run_dir / "report.json").unlink()
    assert cli_main(["report", str(run_dir)]) == 0
    assert json.loads((run_dir / "report.json").read_text())["sites"]


def test_two_point_sweep(tmp_path):
    base = _raw("base")
    base["partition"] = {"scheme": "iid", "num_sites": 2}
    (tmp_path / "base.yaml").write_text(yaml.safe_dump(base))
    sweep = {
        "name": "s",
        "base": "base.yaml",
        "output_dir": str(tmp_path / "runs"),
        "points": {
            # The private point's sites also audit their DP-SGD white-box and their own
            # update; the other's server holds only each round's sum.
            "eps=1": {
                "dp.target_epsilon": 1,
                "audit.gradient_canaries": 1000,
                "audit.updates": {"rounds": [1]},
            },
            "no DP": {"dp.target_epsilon": "inf", "fl.secure_aggregation": "ideal"},
        },
        "overrides": {"dp.enabled": True},
    }
    (tmp_path / "sweep.yaml").write_text(yaml.safe_dump(sweep))
    assert cli_main(["sweep", str(tmp_path / "sweep.yaml")]) == 0
    folder = tmp_path / "runs" / "s"
    result = json.loads((folder / "sweep.json").read_text())
    assert len(result["points"]) == 2
    html = (folder / "sweep.html").read_text()
    assert "white-box mechanism f-DP eps lower bound" in html
    eps = {p["label"]: p for p in result["points"]}
    assert set(eps) == {"eps=1", "no_DP"}
    private, public = eps["eps=1"], eps["no_DP"]
    assert private["private"] is True and public["private"] is False
    assert 0 < private["theoretical_eps"] <= 1.0 + 1e-6
    assert public["theoretical_eps"] is None
    for point in (private, public):
        assert point["global_accuracy"] is not None
        assert all(site["status"] == "ok" for site in point["sites"])
    for site in private["sites"]:
        white_box = site["privacy"]["gradient_canaries"]
        assert white_box["n_canaries"] == 2000 and white_box["steps"] > 0
        for level in ("mechanism", "server"):
            bound = white_box["levels"][level]["eps_lb_fdp"]
            assert 0 <= bound <= site["privacy"]["dp_epsilon"]
        # The checks of the site's real DP-SGD steps: every one passes on an honest run.
        conformance = white_box["conformance"]
        assert conformance["steps"] == white_box["steps"] and len(conformance["checks"]) > 10
        assert [c["message"] for c in conformance["checks"] if not c["passed"]] == []
        page = (folder / "eps=1" / "site-reports" / f"site-{site['site_id']}.html").read_text()
        assert "white-box, mechanism level" in page and 'id="conformance"' in page
    assert all(s["privacy"]["gradient_canaries"] is None for s in public["sites"])
    # The coins and statistics stay at the site: the server's files hold only the summary.
    run = folder / "eps=1"
    assert sorted(p.name for p in (run / "site_state").glob("*gradient-canaries*")) == [
        "site-0-gradient-canaries.npz",
        "site-1-gradient-canaries.npz",
    ]
    assert all((p.stat().st_mode & 0o077) == 0 for p in (run / "site_state").glob("*.npz"))
    for name in ("report.json", "audits/site-0.json"):
        assert '"coins"' not in (run / name).read_text()
    _says_what_the_server_learns_from_the_updates(folder, private)
    _the_report_is_written_again_without_training(folder)
    _a_stopped_sweep_reports_what_finished_and_continues(folder, tmp_path / "sweep.yaml")


def _interval(saved: dict) -> Interval:
    return Interval(**saved)


def _says_what_the_server_learns_from_the_updates(folder, private) -> None:
    """The sweep's "What each party can measure" table: the sites' updates of round 1 beside
    the round's global model (here the final one) at the private point; only the sum under
    secure aggregation at the other."""
    rows = {}
    lines = (folder / "sweep.md").read_text().split("## What each party can measure")[1]
    for line in lines.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if cells and cells[0] in ("eps=1", "no_DP"):
            rows[cells[0], int(cells[1])] = cells
    header = lines.split("\n| ")[1].split(" |\n")[0].split(" | ")
    update, versus, bounds = (
        header.index(h)
        for h in (
            "server: the site's update, largest two-sided eps_tilde [95% CI] (its round)",
            "model users, same round: global model's two-sided eps_tilde [95% CI]; update vs it",
            "server: that update's RM;RN two-sided / O(1) [95% CI] (the guarantee against the "
            "server that covers it)",
        )
    )
    for site in private["sites"]:
        (line,) = site["updates"]
        cells = rows["eps=1", site["site_id"]]
        assert (
            cells[update]
            == f"{fmt_est(_interval(line['eps_tilde_two_sided']))} (round 1; audited 1)"
        )
        (model,) = site["by_round"]
        assert cells[versus].startswith(fmt_est(_interval(model["eps_tilde_two_sided"])) + "; ")
        # Round 1's update is covered by the DP-SGD epsilon after round 1, the run's.
        assert line["dp_epsilon"] == pytest.approx(site["privacy"]["dp_epsilon"])
        assert cells[bounds].endswith(f"(DP-SGD eps {line['dp_epsilon']:.2f} after the round)")
    for site_id in (0, 1):
        cells = rows["no_DP", site_id]
        assert (cells[update], cells[versus], cells[bounds]) == (SUM_ONLY, *[SUM_ONLY_SHORT] * 2)


def _the_report_is_written_again_without_training(folder) -> None:
    """``panoramia-fl report SWEEP_DIR`` after an upgrade: the sweep's report and its points'
    from their saved runs, nothing trained or audited again."""
    sweep_json = (folder / "sweep.json").read_text()
    saved = ("global_model.pt", "checkpoints/*", "audits/*", "metrics.jsonl")
    kept = {p: p.stat().st_mtime_ns for name in saved for p in folder.glob(f"*/{name}")}
    assert len(kept) > 8
    # sweep.json lists the points (labels, overrides, run folders): it is all that is read.
    for name in ("sweep.html", "sweep.md", "eps=1/report.html"):
        (folder / name).unlink()
    (folder / "sweep.json").write_text(sweep_json.replace('"global_accuracy"', '"stale"'))
    assert cli_main(["report", str(folder)]) == 0
    assert (folder / "sweep.json").read_text() == sweep_json
    assert (folder / "sweep.html").exists() and (folder / "eps=1" / "report.html").exists()
    assert {p: p.stat().st_mtime_ns for p in kept} == kept


def _a_stopped_sweep_reports_what_finished_and_continues(folder, sweep_file) -> None:
    """sweep.json as the sweep writes it after its first point (stopped in the second):
    ``report`` shows the finished point and names the other; the same sweep run again
    continues it, without training or auditing a finished point again."""
    saved = ("global_model.pt", "checkpoints/*", "audits/*", "metrics.jsonl")
    kept = {p: p.stat().st_mtime_ns for name in saved for p in folder.glob(f"*/{name}")}
    first = SweepPoint("eps=1", {}, run_files(folder / "eps=1"))
    write_sweep_progress(folder, [first], report_config, ["no_DP"])
    (folder / "sweep.md").unlink()
    assert cli_main(["report", str(folder)]) == 0
    assert [p["label"] for p in json.loads((folder / "sweep.json").read_text())["points"]] == [
        "eps=1"
    ]
    assert "Not finished: no_DP. The sweep stopped before" in (folder / "sweep.md").read_text()
    assert cli_main(["sweep", str(sweep_file)]) == 0
    result = json.loads((folder / "sweep.json").read_text())
    assert [p["label"] for p in result["points"]] == ["eps=1", "no_DP"]
    assert result["unfinished"] == []
    assert {p: p.stat().st_mtime_ns for p in kept} == kept


def test_cli_config_error_names_key(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("fl: {rounds: -1}\n")
    assert cli_main(["run", str(bad)]) == 2
    assert "fl.rounds" in capsys.readouterr().err


def test_audit_command_on_saved_model(run_dir, tmp_path, capsys):
    out = tmp_path / "audit.json"
    args = ["audit", str(run_dir / "global_model.pt"), "--config", str(run_dir / "config.yaml")]
    assert cli_main([*args, "--site", "1", "--out", str(out)]) == 0
    assert "was trained with" not in capsys.readouterr().err  # the run's own config
    result = json.loads(out.read_text())
    assert result["schema_version"] == 3  # the audit's result, its one-sided game nested
    rep = result["repeats"][0]["one_sided"]
    assert rep["eps_tilde"] == pytest.approx(max(0.0, rep["c_eps_lb"] - rep["c_lb"]))
    assert cli_main([*args, "--site", "9"]) == 2
    # A config other than the checkpoint's own metadata says: a warning naming the key.
    other = ["--set", "dp.level=client", "--set", "dp.client.noise_multiplier=1.0"]
    assert cli_main([*args, "--site", "9", *other]) == 2
    err = capsys.readouterr().err
    assert "was trained with dp.level 'none', the config says 'client'" in err
