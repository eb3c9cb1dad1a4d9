"""The report's inputs (audit files, round logs, the partition) read through their contracts,
and what a bad or missing one does to the report."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from builders import (
    canary_block,
    failed_audit,
    load_run_of,
    make_result,
    ok_audit,
    schema_2,
    site_report_of,
    write_report_of,
    write_run,
)

from panoramia_fl.contracts.errors import RunFileError
from panoramia_fl.reporting import build_report
from panoramia_fl.reporting.schemas.schema import report_json
from panoramia_fl.simulations.cli import main as cli_main


def test_eps_tilde_is_copied_not_recomputed(tmp_path: Path) -> None:
    # Repeats straddle zero: mean of max(0, .) differs from max(0, mean difference).
    result = make_result([1.0, 2.0], [1.5, 1.0])
    assert result.one_sided.eps_tilde.mean == 0.25
    run = write_run(tmp_path / "r", n_sites=1, audits={0: ok_audit(0, result)})
    site = report_json(build_report(load_run_of(run)))["sites"][0]
    game = site["audit"]["one_sided"]
    assert game["eps_tilde"]["mean"] == 0.25
    assert max(0.0, game["c_eps_lb"]["mean"] - game["c_lb"]["mean"]) != 0.25
    assert site["privacy"]["dp_epsilon"] is None and game["rm_rn_eps_lb"] is None


def test_unreadable_audit_file_fails_that_site_only(tmp_path: Path) -> None:
    run = write_run(
        tmp_path / "r", n_sites=2, audits={0: ok_audit(0, make_result([1.0, 1.5], [2.0, 2.5]))}
    )
    (run / "audits" / "site-1.json").write_text("{not json")
    sites = report_json(build_report(load_run_of(run)))["sites"]
    assert sites[0]["status"] == "ok"
    assert sites[0]["audit"]["one_sided"]["eps_tilde"]["mean"] == 1.0
    assert sites[1]["status"] == "failed" and "site-1.json" in sites[1]["error"]


def test_malformed_audit_file_is_read_through_its_contract(tmp_path: Path) -> None:
    """The report reads audit files through contracts.site_audit.SiteAuditFile: a bad value
    fails that site, naming the problem, and the others stay."""
    ok = ok_audit(0, make_result([1.0, 1.5], [2.0, 2.5]))
    run = write_run(
        tmp_path / "r", n_sites=2, audits={0: ok, 1: ok | {"site_id": 1, "status": "done"}}
    )
    sites = report_json(build_report(load_run_of(run)))["sites"]
    assert sites[0]["status"] == "ok"
    assert (
        sites[1]["status"] == "failed"
        and "site-1.json: key 'status' must be one of ['ok', 'failed'], got 'done'"
        in sites[1]["error"]
    )


def _standings(run: Path, sites: range) -> dict[int, Any]:
    return {
        s: json.loads((run / "site-reports" / f"site-{s}.json").read_text())["standing"]
        for s in sites
    }


def test_an_audit_file_of_no_listed_site_is_left_out_with_a_warning(tmp_path: Path) -> None:
    """A copy of site 1's audit filed as site 7, which partition.json does not list, is no
    site of the consortium: the report names it in a warning, counts three sites, and the
    real sites' ranks stay what they were (issue 40, item 4)."""
    audits = {s: ok_audit(s, make_result([1.0, 1.0], [1.5 + s, 1.75 + s])) for s in range(3)}
    run = write_run(tmp_path / "r", n_sites=3, audits=audits)
    assert write_report_of(run).warnings == []
    before = _standings(run, range(3))
    (run / "audits" / "site-7.json").write_text(json.dumps(audits[1] | {"site_id": 7}))
    files = write_report_of(run)
    report = json.loads(files.json_path.read_text())
    assert [s["site_id"] for s in report["sites"]] == [0, 1, 2]
    assert report["consortium"]["n_sites"] == report["consortium"]["n_ok"] == 3
    assert _standings(run, range(3)) == before
    assert not (run / "site-reports" / "site-7.json").exists()
    (warning,) = files.warnings
    assert "site-7.json: site 7 is not in partition.json" in warning and "left out" in warning


def _string_in(audit: dict[str, Any], path: tuple[str | int, ...]) -> dict[str, Any]:
    """``audit`` with the number at ``path`` written as a string."""
    data = json.loads(json.dumps(audit))
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = str(node[path[-1]])
    return data


@pytest.mark.parametrize(
    "path, key",
    [
        (("result", "eps_tilde", "mean"), "result.eps_tilde.mean"),  # a schema-2 file
        (("result", "one_sided", "eps_tilde", "mean"), "result.one_sided.eps_tilde.mean"),
        (("result", "repeats", 1, "mia_auc"), "result.repeats[1].mia_auc"),
        (("canary", "eps_lb"), "canary.eps_lb"),
        (("n_members",), "n_members"),
    ],
)
def test_a_string_in_a_number_field_fails_that_site_naming_file_and_key(
    tmp_path: Path, path: tuple[str | int, ...], key: str
) -> None:
    """``eps_tilde.mean: "0.5"`` in an audit file: that site is failed, its error names the
    file and the key, and the other site stays (issue 40, item 5: a TypeError traceback
    before)."""
    audit = ok_audit(1, make_result([1.0, 1.0], [1.5, 1.75])) | {"canary": canary_block(1.5, 3.0)}
    if path[:2] == ("result", "eps_tilde"):
        audit["result"] = schema_2(audit["result"])
    audits = {0: ok_audit(0, make_result([1.0, 1.0], [2.0, 2.5])), 1: _string_in(audit, path)}
    run = write_run(tmp_path / "r", n_sites=2, audits=audits)
    files = write_report_of(run)
    sites = json.loads(files.json_path.read_text())["sites"]
    assert sites[0]["status"] == "ok"
    assert sites[1]["status"] == "failed"
    assert f"site-1.json: key '{key}' must be " in sites[1]["error"]
    page = site_report_of(run, 1).html_path.read_text()
    assert f"key &#x27;{key}&#x27; must be " in page


@pytest.mark.parametrize(
    "change, why",
    [
        ({"site_id": 0}, "claims to be site 0's audit, but is site 1's file"),
        ({"n_members": -5}, "key 'n_members' is -5, not a number of records"),
        ({"n_members": 9000}, "key 'n_members' is 9000, but partition.json gives the site 601"),
        ({"n_holdout": 3}, "key 'n_holdout' is 3, but partition.json gives the site 100"),
    ],
)
def test_audit_file_site_and_sizes_are_checked_against_the_partition(
    tmp_path: Path, change: dict[str, Any], why: str
) -> None:
    result = make_result([1.0, 1.5], [2.0, 2.5])
    run = write_run(
        tmp_path / "r",
        n_sites=2,
        audits={0: ok_audit(0, result), 1: ok_audit(1, result) | change},
    )
    sites = report_json(build_report(load_run_of(run)))["sites"]
    assert sites[0]["status"] == "ok"
    assert sites[1]["status"] == "failed" and why in sites[1]["error"]
    assert "site-1.json" in sites[1]["error"]


def _empty_rounds(run: Path, rounds: list[int]) -> None:
    """metrics.jsonl with ``rounds`` aggregating nothing (every site's update rejected)."""
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    for line in lines:
        if line["round"] in rounds:
            line["failures"] = {
                s: "rejected: train reply: non-finite weights" for s in line["sites"]
            }
            line["sites"] = {}
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_rounds_that_aggregated_nothing_are_reported_first(tmp_path: Path) -> None:
    result = make_result([1.0, 1.5], [2.0, 2.5])
    run = write_run(tmp_path / "r", n_sites=2, audits={0: ok_audit(0, result)})
    _empty_rounds(run, [2])
    files = write_report_of(run)
    report = json.loads(files.json_path.read_text())
    assert report["consortium"]["empty_rounds"] == [2]
    md = files.md_path.read_text()
    first = md.split("\n## ")[0]
    assert "Round 2: no site's update was aggregated" in first
    _empty_rounds(run, [1, 3])
    files = write_report_of(run)
    first = files.md_path.read_text().split("\n## ")[0]
    assert "No site's update was aggregated in any of the 3 rounds" in first
    assert "non-finite weights" in first and "initial, untrained one" in first
    html_first = files.html_path.read_text().split('id="headline"')[0]
    assert "No site&#x27;s update was aggregated in any of the 3 rounds" in html_first


def test_one_round_that_aggregated_nothing_reads_as_one(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", n_sites=2, audits={}, n_rounds=1)
    _empty_rounds(run, [1])
    first = write_report_of(run).md_path.read_text().split("\n## ")[0]
    assert "No site's update was aggregated in the run's one round" in first


def test_a_run_stopped_before_any_round_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing logged, nothing audited: the report says the run stopped before its first
    round (on stderr too), not that sites were lost."""
    run = write_run(tmp_path / "r", n_sites=2, audits={}, n_rounds=0)
    assert cli_main(["report", str(run)]) == 0
    assert "panoramia-fl: The run stopped before its first round" in capsys.readouterr().err
    first = (run / "report.md").read_text().split("\n## ")[0]
    assert "The run stopped before its first round finished" in first
    assert "Sites were lost" not in first


OOM = "OutOfMemoryError: Task was killed due to the node running low on memory."


def test_a_run_that_lost_sites_opens_with_them(tmp_path: Path) -> None:
    """A failed audit, a missing one and a round that lost one site's update (Ray's memory
    killer): the report's first lines say so (before the headline), in both formats; a
    run that audits nothing has no missing audits."""
    audits = {0: ok_audit(0, make_result([1.0, 1.5], [2.0, 2.5])), 1: failed_audit(1)}
    run = write_run(tmp_path / "r", n_sites=3, audits=audits)
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    lines[0]["failures"] = {"2": OOM}
    del lines[0]["sites"]["2"]
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    files = write_report_of(run)
    first = files.md_path.read_text().split("\n## Headline")[0]
    assert "> **Sites were lost in this run.**" in first
    assert "> - Site audits lost: site 1 failed (CUDA OOM in" in first
    assert "site 2 has no audit file." in first
    assert f"> - Round 1 lost the update of site 2 (site 2: {OOM})." in first
    assert "> - Ray's memory killer ended site processes" in first
    html_first = files.html_path.read_text().split('id="headline"')[0]
    assert "Sites were lost in this run." in html_first and "Round 1 lost the update" in html_first
    with (run / "config.yaml").open("a") as fh:
        fh.write("audit: {enabled: false}\n")
    (run / "audits" / "site-1.json").unlink()
    first = write_report_of(run).md_path.read_text().split("\n## Headline")[0]
    assert "Site audits lost" not in first and "Round 1 lost the update of site 2" in first


def test_bad_run_inputs_name_the_file(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", n_sites=1, audits={})
    with (run / "metrics.jsonl").open("a") as fh:
        fh.write("{truncated\n")
    with pytest.raises(RunFileError, match=r"metrics\.jsonl:4"):
        write_report_of(run)
    (run / "partition.json").unlink()
    with pytest.raises(RunFileError, match=r"partition\.json"):
        write_report_of(run)
