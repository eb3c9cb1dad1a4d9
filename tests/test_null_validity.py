"""The whole pipeline under the null: targets that never saw the members claim no leakage.

Runs ``benchmarks/null_validity.py``'s games at test size (2 null targets x 10 games per
modality, both sides, calibration on; the tabular classifier tries one learning rate, not
two, which halves its cost) and its positive control. Under a valid audit each
count of positive games is dominated by Binomial(games, beta); the test allows up to that
distribution's 99.9% quantile (level beta/2 for each eps_tilde and RM;RN side, beta for O(1)),
which a leaking feature, a label mix or a missing union penalty exceeds.
"""

from __future__ import annotations

import pytest
import torch
from launchers import load_benchmark
from scipy import stats

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bench():
    module = load_benchmark("null_validity")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield module
    torch.set_num_threads(threads)


@pytest.mark.parametrize("modality", ["image", "tabular"])
def test_null_targets_stay_at_zero_and_an_overfit_target_does_not(bench, modality) -> None:
    mod = bench.load_modality(modality, "digits")
    classifier = {"gbm_learning_rates": [0.1]} if modality == "tabular" else None
    tally = bench.null_tally(mod, targets=2, repeats=10, seed=0, classifier=classifier)
    beta = bench.audit_config(repeats=1, seed=0).beta
    assert tally.games == 20
    for metric, positive in tally.positive.items():
        # Each eps_tilde and RM;RN side claims beta/2 against a null target, O(1) beta.
        level = beta if metric == "O(1)" else beta / 2
        allowed = int(stats.binom.ppf(0.999, tally.games, level))
        assert positive <= allowed, f"{modality} {metric}: {positive}/{tally.games} null games > 0"
    control = bench.positive_control(mod, repeats=2, seed=0, classifier=classifier)
    assert control.two_sided is not None and control.two_sided.eps_tilde.mean > 0
