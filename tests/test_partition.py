import numpy as np
import pytest

from panoramia_fl.ml.datasets import Dataset, load_dataset
from panoramia_fl.ml.partition import PartitionConfig, PartitionError, partition, partition_summary


@pytest.fixture(scope="module")
def digits() -> Dataset:
    return load_dataset("digits")


def _all(sites):
    return np.concatenate([np.concatenate([s.train, s.holdout, s.test]) for s in sites])


@pytest.mark.parametrize("scheme", ["iid", "dirichlet", "quantity"])
def test_disjoint_complete_deterministic(digits, scheme):
    cfg = PartitionConfig(scheme=scheme, num_sites=4, alpha=0.5)
    a = partition(digits, cfg, seed=3)
    b = partition(digits, cfg, seed=3)
    idx = _all(a)
    assert len(idx) == len(np.unique(idx)) == len(digits)
    for sa, sb in zip(a, b, strict=True):
        assert np.array_equal(sa.train, sb.train) and np.array_equal(sa.holdout, sb.holdout)
    c = partition(digits, cfg, seed=4)
    assert not all(np.array_equal(x.train, y.train) for x, y in zip(a, c, strict=True))


def test_split_fractions(digits):
    cfg = PartitionConfig(scheme="iid", num_sites=2, holdout_fraction=0.25, test_fraction=0.1)
    for site in partition(digits, cfg, seed=0):
        n = len(site.train) + len(site.holdout) + len(site.test)
        assert abs(len(site.holdout) - 0.25 * n) <= 1
        assert abs(len(site.test) - 0.1 * n) <= 1


def _label_skew(dataset, sites):
    """Mean total-variation distance between site label distributions and the global one."""
    glob = np.bincount(dataset.y, minlength=10) / len(dataset.y)
    tvs = []
    for s in sites:
        h = np.bincount(dataset.y[s.train], minlength=10)
        tvs.append(0.5 * np.abs(h / h.sum() - glob).sum())
    return float(np.mean(tvs))


def test_dirichlet_skew_grows_as_alpha_shrinks(digits):
    skew = {
        alpha: _label_skew(
            digits,
            partition(digits, PartitionConfig(num_sites=4, alpha=alpha, min_train=1), seed=0),
        )
        for alpha in (0.1, 1.0, 100.0)
    }
    iid = _label_skew(digits, partition(digits, PartitionConfig(scheme="iid", num_sites=4), seed=0))
    assert skew[0.1] > skew[1.0] > skew[100.0]
    assert skew[0.1] > 0.3 and iid < 0.1


def test_quantity_skew_explicit_sizes_and_power_law(digits):
    sites = partition(
        digits, PartitionConfig(scheme="quantity", num_sites=3, sizes=[100, 300, 600]), seed=0
    )
    assert [len(s.train) + len(s.holdout) + len(s.test) for s in sites] == [100, 300, 600]
    sizes = sorted(
        len(s.train)
        for s in partition(
            digits, PartitionConfig(scheme="quantity", num_sites=4, power=1.5), seed=0
        )
    )
    assert sizes[-1] > 3 * sizes[0]


def test_natural_site_column():
    x = np.zeros((90, 1, 2, 2), dtype=np.uint8)
    y = np.arange(90) % 3
    sites_col = np.repeat(np.array(["a", "b", "c"]), 30)
    ds = Dataset(
        name="t", modality="image", x=x, y=y, num_classes=3, input_shape=(1, 2, 2), sites=sites_col
    )
    sites = partition(ds, PartitionConfig(scheme="natural", num_sites=3, min_train=5), seed=0)
    for k, s in enumerate(sites):
        idx = np.concatenate([s.train, s.holdout, s.test])
        assert set(sites_col[idx]) == {"abc"[k]}
    with pytest.raises(PartitionError, match="site column"):
        partition(
            Dataset(name="t", modality="image", x=x, y=y, num_classes=3, input_shape=(1, 2, 2)),
            PartitionConfig(scheme="natural"),
            seed=0,
        )


def test_groups_stay_together():
    groups = np.repeat(np.arange(30), 4)
    ds = Dataset(
        name="t",
        modality="text",
        x=np.arange(120)[:, None],
        y=None,
        num_classes=0,
        input_shape=(1,),
        groups=groups,
    )
    for s in partition(ds, PartitionConfig(scheme="iid", num_sites=3, min_train=5), seed=1):
        for part in (s.train, s.holdout, s.test):
            for g in np.unique(groups[part]):
                assert np.all(np.isin(np.flatnonzero(groups == g), part))


def test_too_small_site_names_site_and_sizes(digits):
    cfg = PartitionConfig(scheme="quantity", num_sites=2, sizes=[10, 500], min_train=20)
    with pytest.raises(PartitionError, match=r"site 0: train split has \d+ records"):
        partition(digits, cfg, seed=0)


def test_summary_has_sizes_and_histograms(digits):
    sites = partition(digits, PartitionConfig(num_sites=3), seed=0)
    summary = partition_summary(digits, sites, scheme="dirichlet", seed=0)
    assert [s["train"] for s in summary["sites"]] == [len(s.train) for s in sites]
    assert sum(summary["sites"][0]["label_histogram"]["train"]) == len(sites[0].train)
