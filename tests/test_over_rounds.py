"""Leakage over rounds: the config's round selection, the by-round lines, what a resumed
run asks each site for, the wire, and the report's plot and summary line."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from builders import by_round_lines, make_result, run_files, with_class_slices
from flwr.app import ConfigRecord

from panoramia_fl.audit.panoramia.over_rounds import RoundLeakage, first_leaking_round
from panoramia_fl.audit.site_results import SiteResults
from panoramia_fl.contracts.json_values import from_dict, json_safe
from panoramia_fl.contracts.run_log import RoundRecord
from panoramia_fl.contracts.site_audit import SiteAudit, SiteAuditFile
from panoramia_fl.contracts.wire import AuditInstructions, WireError, audit_record, audit_reply
from panoramia_fl.reporting.layout.columns import md_table
from panoramia_fl.reporting.layout.site_columns import PER_CLASS_COLUMNS
from panoramia_fl.reporting.numbers.formatting import first_leaking_text, first_leaks_line
from panoramia_fl.reporting.numbers.meanings import NOTES, Note
from panoramia_fl.reporting.pages import plots
from panoramia_fl.server.round_audits import plan_audits, with_rounds
from panoramia_fl.server.run_writer import append_round, write_site_audit
from panoramia_fl.simulations.experiment_config import ConfigError, validate_config

# --- config -------------------------------------------------------------------------------


def _config(**audit: Any):
    return validate_config({"fl": {"rounds": 8}, "audit": audit})


def test_rounds_and_every_pick_the_checkpoints_the_final_one_included() -> None:
    assert _config(rounds=[4, 1, 2]).audit.audited_rounds(8) == (1, 2, 4, 8)
    assert _config(every=3).audit.audited_rounds(8) == (3, 6, 8)
    assert _config().audit.audited_rounds(8) == ()
    # A site's own updates: those rounds' global models are audited too, to read beside them.
    updates = _config(rounds=[3], updates={"rounds": [1, 2, 4]}).audit
    assert updates.update_rounds(8) == (1, 2, 4)
    assert updates.audited_rounds(8) == (1, 2, 3, 4, 8)
    assert _config(updates={"every": 4}).audit.audited_rounds(8) == (4, 8)


@pytest.mark.parametrize(
    ("audit", "named"),
    [
        ({"rounds": [1, 2], "every": 2}, "audit.rounds and audit.every"),
        ({"rounds": [0, 3, 9]}, "audit.rounds: [0, 9] outside 1..fl.rounds (8)"),
        ({"rounds": []}, "audit.rounds: an empty list"),
        ({"every": 9}, "audit.every: 9 is more than fl.rounds (8)"),
        ({"every": 0}, "audit.every"),
        ({"updates": {}}, "audit.updates: give rounds: [...] or every: k"),
        ({"updates": {"rounds": [9]}}, "audit.updates.rounds: [9] outside 1..fl.rounds (8)"),
        ({"updates": {"rounds": [1], "every": 2}}, "audit.updates.rounds and audit.updates.every"),
        ({"updates": {"every": 2}, "enabled": False}, "audit.updates: the updates are audited"),
    ],
)
def test_bad_round_selections_are_named(audit: dict[str, Any], named: str) -> None:
    with pytest.raises(ConfigError, match=re.escape(named)):
        _config(**audit)


# --- by-round lines ---------------------------------------------------------------------


def test_a_line_round_trips_and_the_first_leaking_round_is_found() -> None:
    lines = by_round_lines([1, 2, 4])
    assert [from_dict(RoundLeakage, json_safe(e)) for e in lines] == lines
    assert first_leaking_round(lines) == 2
    assert first_leaking_round(lines[:1]) is None
    with pytest.raises(ValueError, match="'side' is missing"):
        from_dict(RoundLeakage, {k: v for k, v in json_safe(lines[0]).items() if k != "side"})


# --- what each site is asked, and its file ----------------------------------------------


def _ok_file(
    site: int, *, by_round: list[RoundLeakage], model_round: int = 8
) -> SiteAuditFile[SiteResults]:
    result = make_result([0.5, 0.75], [0.75, 1.5])
    return SiteAuditFile(
        site_id=site,
        status="ok",
        n_members=100,
        n_holdout=10,
        model_round=model_round,
        results=SiteResults(panoramia=result, by_round=by_round),
    )


def test_a_resumed_run_asks_only_for_the_rounds_a_site_lacks(tmp_path: Path) -> None:
    rounds = (1, 2, 4, 8)
    layout = run_files(tmp_path)
    write_site_audit(layout, _ok_file(0, by_round=by_round_lines([1, 2, 4, 8])))
    write_site_audit(layout, _ok_file(1, by_round=by_round_lines([1, 8])))
    write_site_audit(layout, _ok_file(2, by_round=[], model_round=6))  # another model
    plans = {p.site: p for p in plan_audits(layout, [0, 1, 2, 3], 8, rounds)}
    assert 0 not in plans
    assert (plans[1].main, plans[1].rounds) == (False, (2, 4))
    assert (plans[2].main, plans[2].rounds) == (True, (1, 2, 4))
    assert (plans[3].main, plans[3].rounds) == (True, (1, 2, 4))
    # Without a round selection nothing but the main audit is asked for.
    assert [p.site for p in plan_audits(layout, [0, 1, 2, 3], 8, ())] == [2, 3]


def test_new_lines_join_the_kept_ones_with_the_round_accuracy(tmp_path: Path) -> None:
    for r in range(1, 9):
        append_round(run_files(tmp_path), RoundRecord(round=r, global_accuracy=r / 10))
    from panoramia_fl.server.round_audits import global_accuracy

    before = _ok_file(1, by_round=by_round_lines([1]))
    merged = with_rounds(
        before,
        by_round_lines([2, 4]),
        before=before,
        rounds=(1, 2, 4, 8),
        accuracy=global_accuracy(run_files(tmp_path)),
    )
    lines = merged.results.by_round
    assert [e.round for e in lines] == [1, 2, 4, 8]
    assert [e.global_accuracy for e in lines] == [0.1, 0.2, 0.4, 0.8]
    # The final round's line is the main audit's two-sided result.
    final = before.results.panoramia
    assert final is not None and final.two_sided is not None
    assert lines[-1].eps_tilde_two_sided == final.two_sided.eps_tilde
    reread = from_dict(SiteAuditFile[SiteResults], json.loads(json.dumps(json_safe(merged))))
    assert reread == merged and reread.results.audited_rounds() == {1, 2, 4, 8}
    # One line per round, in round order, wherever the lines come from.
    with pytest.raises(
        ValueError, match=r"one entry per round, in round order, got rounds \[4, 2\]"
    ):
        SiteResults(by_round=by_round_lines([2, 4])[::-1])


# --- the wire ---------------------------------------------------------------------------


def test_audit_query_and_reply_carry_the_rounds() -> None:
    asked = AuditInstructions(seed=3, rounds=(1, 2), main=False)
    assert AuditInstructions.from_record(asked.to_record()) == asked
    assert AuditInstructions.from_record(ConfigRecord({"seed": 3})) == AuditInstructions(3)
    with pytest.raises(WireError, match="asks for no audit"):
        AuditInstructions.from_record(ConfigRecord({"seed": 3, "main-audit": False}))
    with pytest.raises(WireError, match="'audit-rounds' must be a list of rounds >= 1"):
        AuditInstructions.from_record(ConfigRecord({"seed": 3, "audit-rounds": [0]}))
    reply = SiteAudit(
        site_id=1,
        n_members=10,
        n_holdout=0,
        elapsed_s=1.0,
        results=SiteResults(by_round=by_round_lines([1, 2])),
    )
    record = audit_record(reply)
    assert json.loads(str(record["by-round-json"]))[1]["round"] == 2  # a list, as in the file
    assert audit_reply(record, SiteResults) == reply
    empty = dataclasses.replace(reply, results=SiteResults())
    with pytest.raises(WireError, match="holds no audit"):
        audit_reply(audit_record(empty), SiteResults)
    record["by-round-json"] = json.dumps(json_safe(by_round_lines([1, 2])[::-1]))
    with pytest.raises(
        WireError, match=r"one entry per round, in round order, got rounds \[2, 1\]"
    ):
        audit_reply(record, SiteResults)


# --- the report's views -----------------------------------------------------------------


def test_the_views_draw_the_curve_and_name_the_first_leaking_round() -> None:
    lines = by_round_lines([1, 2, 4])
    svg = plots.by_round_plot(lines)
    assert svg is not None and svg.startswith("<svg")
    assert plots.by_round_plot([]) is None
    assert first_leaking_text(lines).startswith("Leakage first shows at round 2,")
    assert first_leaking_text(lines[:1]).startswith("No audited round (1)")
    assert first_leaks_line({"2": 4, "10": None}) == [
        f"{NOTES[Note.FIRST_LEAK]}: site 2: round 4; site 10: none"
    ]
    assert first_leaks_line({}) == []
    table = md_table(PER_CLASS_COLUMNS, with_class_slices(make_result([0.5], [1.0])).per_class)
    assert [row.split(" | ")[0] for row in table[2:]] == ["| 0", "| 1"]
    assert "0.006" in table[2]
