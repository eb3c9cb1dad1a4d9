"""Attribute inference in process on a small slice of RAND HIE: null targets stay at their
stated rate, a target over-fitted on the members reads above 0, a bad field is named.

The games are ``benchmarks/attribute_inference.py``'s at test size (its 120-game run and
its positive control are in docs/attribute_inference.md).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from builders import (
    load_run_of,
    make_result,
    ok_audit,
    report_config,
    run_files,
    site_pages,
    write_report_of,
    write_run,
)
from launchers import load_benchmark
from scipy import stats

from panoramia_fl.audit.result import Interval
from panoramia_fl.audit.tabular.attribute_attack import UnknownFieldError, sensitive_attribute
from panoramia_fl.audit.tabular.attribute_result import AttributeInferenceResult
from panoramia_fl.contracts.errors import UserError
from panoramia_fl.contracts.json_values import json_safe
from panoramia_fl.reporting.assembly.aggregate import build_report
from panoramia_fl.reporting.evidence.evidence_pack import site_pack_html
from panoramia_fl.reporting.layout.attribute_report import ATTRIBUTE_ADVANTAGE, ATTRIBUTE_EPS_LB
from panoramia_fl.reporting.site.site_report import site_page_alone
from panoramia_fl.simulations.config_keys import ConfigError
from panoramia_fl.simulations.experiment_config import load_config
from panoramia_fl.simulations.run_dir import DatasetMeta
from panoramia_fl.simulations.run_task import check_run_task

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
FIELD = "health"
SMALL = dict(members=200, nonmembers=150, public=300, other=300)


@pytest.fixture(scope="module")
def bench():
    module = load_benchmark("attribute_inference")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield module, module.load(max_rows=2600)
    torch.set_num_threads(threads)


def test_null_targets_stay_at_their_level_and_an_overfit_target_does_not(bench) -> None:
    module, data = bench
    sizes = module.Sizes(**SMALL)
    tally = module.null_tally(
        data, targets=6, games_per_target=2, epochs=5, field_name=FIELD, seed=0, sizes=sizes
    )
    assert tally.games == 12
    for reading, positive in tally.positive.items():
        # Each side claims beta/2 against a null target, the two-sided reading beta.
        level = module.BETA if reading == "two-sided" else module.BETA / 2
        allowed = int(stats.binom.ppf(0.999, tally.games, level))
        assert positive <= allowed, f"{reading}: {positive}/{tally.games} null games > 0"
    (control,) = module.positive_control(
        data, epochs=(150,), targets=1, field_name=FIELD, seed=0, repeats=3, sizes=sizes
    )
    assert control.eps_lb[0] > 0
    # The model, not the population, singles out the members' values.
    assert control.advantage[0] > max(0.05, control.baseline_advantage[0])


def test_an_unknown_field_is_named_with_the_fields(bench) -> None:
    module, data = bench
    rows = data.x[:5]
    assert sensitive_attribute(FIELD, data.schema, rows).width == 4
    with pytest.raises(UnknownFieldError, match="audit.attribute_inference.field") as err:
        sensitive_attribute("high_spending", data.schema, rows)
    assert isinstance(err.value, UserError)
    assert "'high_spending' is not a field" in str(err.value)
    assert "fields: plan, health, coins" in str(err.value)
    with pytest.raises(UnknownFieldError, match="image records have no fields"):
        sensitive_attribute(FIELD, None, rows, modality="image")


def test_a_run_refuses_an_unknown_field_before_any_site_starts(bench) -> None:
    module, data = bench
    config = load_config(CONFIGS / "tabular.yaml", ["audit.attribute_inference.field=incme"])
    with pytest.raises(UnknownFieldError, match="'incme' is not a field.*income"):
        check_run_task(config, DatasetMeta.of(data.data))
    with pytest.raises(ConfigError, match="audit.attribute_inference: .*holdout_fraction"):
        load_config(CONFIGS / "tabular.yaml", ["partition.holdout_fraction=0"])


def _inferred(eps_lb: float) -> AttributeInferenceResult:
    """A site's attribute-inference summary (two repeats), as the audit returns it."""

    def over(*values: float) -> Interval:
        return Interval.of(list(values))

    return AttributeInferenceResult(
        field=FIELD,
        levels=4,
        n_members=500,
        n_nonmembers=300,
        n_reference=700,
        reference="public",
        pairs=280,
        beta=0.05,
        eps_lb=over(eps_lb, eps_lb),
        eps_lb_member=over(eps_lb, eps_lb),
        eps_lb_nonmember=over(0.0, 0.0),
        ceiling=3.0,
        accuracy_members=over(0.71, 0.73),
        accuracy_nonmembers=over(0.55, 0.57),
        advantage=over(0.16, 0.16),
        baseline_accuracy_members=over(0.61, 0.61),
        baseline_accuracy_nonmembers=over(0.62, 0.62),
        baseline_advantage=over(-0.01, -0.01),
        majority_share=0.55,
        seconds=0.3,
    )


def test_the_result_reaches_the_page_the_report_and_the_ordering_check(tmp_path) -> None:
    """The site's page says it in a sentence and a table, the consortium report has a row per
    site, and the bound joins the ordering check: 1.4 above DP eps 1.2 is a violation."""
    result = make_result([1.0, 1.0], [1.0, 1.0], rm_rn=[0.25, 0.25], o1=[0.5, 0.5])
    audits = {
        s: ok_audit(s, result, dp=1.2) | {"attribute_inference": json_safe(_inferred(eps))}
        for s, eps in ((0, 1.4), (1, 0.0))
    }
    run = write_run(tmp_path / "run", n_sites=2, dp=1.2, audits=audits)
    write_report_of(run)
    page = site_pages(run, 0).html_path.read_text()
    assert "Does the model reveal your members&#x27; health?" in page
    assert 'id="attribute-inference"' in page and "advantage +16.0%" in page
    assert "The model singles out your members&#x27; true value: eps lower bound 1.400" in page
    report_md = (run / "report.md").read_text()
    assert "## Attribute inference" in report_md
    assert "| 0 | health | 1.400 [1.400, 1.400] | 0.160 [" in report_md
    sites = {s["site_id"]: s for s in json.loads((run / "report.json").read_text())["sites"]}
    (violation,) = sites[0]["checks"]["bound_violations"]
    assert violation["bound"] == ATTRIBUTE_EPS_LB.key and violation["level"] == 0.025
    assert sites[1]["checks"]["bound_violations"] == []
    (site0, _) = build_report(load_run_of(run)).sites
    assert ATTRIBUTE_ADVANTAGE.value(site0) == pytest.approx(0.16)
    layout = run_files(run)
    pack = site_pack_html(site_page_alone(layout, 0, report_config(layout)), dp_level="record")
    assert "Inferring a sensitive field (attribute inference)" in pack
    assert "1.400 [1.400, 1.400]" in pack
