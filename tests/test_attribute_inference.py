"""Attribute inference in process on a small slice of RAND HIE: null targets stay at their
stated rate, a target over-fitted on the members reads above 0, a bad field is named.

The games are ``benchmarks/attribute_inference.py``'s at test size (its 120-game run and
its positive control are in docs/attribute_inference.md).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from launchers import load_benchmark
from scipy import stats

from audit.tabular.attribute_attack import UnknownFieldError, sensitive_attribute
from contracts.errors import UserError
from simulations.config import load_config
from simulations.config_keys import ConfigError
from simulations.run_dir import DatasetMeta
from simulations.run_task import check_run_task

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
    width = data.x.shape[1]
    assert sensitive_attribute(FIELD, data.schema, width).width == 4
    with pytest.raises(UnknownFieldError, match="audit.attribute_inference.field") as err:
        sensitive_attribute("high_spending", data.schema, width)
    assert isinstance(err.value, UserError)
    assert "'high_spending' is not a field" in str(err.value)
    assert "fields: plan, health, coins" in str(err.value)
    with pytest.raises(UnknownFieldError, match="image records have no fields"):
        sensitive_attribute(FIELD, None, 64, modality="image")


def test_a_run_refuses_an_unknown_field_before_any_site_starts(bench) -> None:
    module, data = bench
    config = load_config(CONFIGS / "tabular.yaml", ["audit.attribute_inference.field=incme"])
    with pytest.raises(UnknownFieldError, match="'incme' is not a field.*income"):
        check_run_task(config, DatasetMeta.of(data.data))
    with pytest.raises(ConfigError, match="audit.attribute_inference: .*holdout_fraction"):
        load_config(CONFIGS / "tabular.yaml", ["partition.holdout_fraction=0"])
