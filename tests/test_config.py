import re
from pathlib import Path

import pytest

from panoramia_fl.simulations.config_file import dump_config
from panoramia_fl.simulations.experiment_config import (
    RAY_ADDRESS_ENV,
    ConfigError,
    evaluation_threads_beside_training,
    load_config,
    validate_config,
)

REPO = Path(__file__).resolve().parents[1]


def test_default_config_is_valid():
    config = load_config(REPO / "configs" / "default.yaml")
    assert config.partition.scheme == "dirichlet" and config.partition.num_sites >= 2
    assert config.data.name == "fashion_mnist"
    # quick audits with intervals: the explicit repeat count survives quick mode
    assert config.audit.settings.quick and config.audit.settings.repeats == 5


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"fl": {"rounds": 0}}, "fl.rounds"),
        ({"fl": {"roundz": 3}}, "fl.roundz: unknown key"),
        ({"partition": {"scheme": "random"}}, "partition.scheme"),
        ({"dp": {"enabled": True}}, "dp: set exactly one of target_epsilon or noise_multiplier"),
        ({"audit": {"settings": {"beta": 1.5}}}, "audit.settings.beta"),
        ({"audit": {"settings": {"splits": {"generator": -1}}}}, "audit.settings.splits.generator"),
        (
            {"audit": {"inversion": {"learning_rate": float("inf")}}},
            "audit.inversion.learning_rate: Input should be a finite number",
        ),
        ({"audit": {"inversion": {"sites": []}}}, "audit.inversion.sites: a non-empty list"),
        (
            {"partition": {"num_sites": 2}, "audit": {"inversion": {"sites": [0, 2]}}},
            "audit.inversion.sites: [2] outside",
        ),
    ],
)
def test_bad_values_name_the_key(raw, key):
    with pytest.raises(ConfigError, match=re.escape(key)):
        validate_config(raw)


def test_torch_threads_auto_is_the_whole_cpus_ray_gives_a_site(tmp_path, monkeypatch):
    monkeypatch.delenv(RAY_ADDRESS_ENV, raising=False)
    two_cores = ["ray.num_cpus=2"]
    default = load_config(REPO / "configs" / "default.yaml", two_cores).resources
    # Two sites on two cores: one thread a site, the numbers a pinned torch_threads: 1 gave.
    assert default.torch_threads == "auto"
    assert default.train_threads == default.audit_threads == 1
    shares = validate_config({"resources": {"num_cpus": 2, "audit_num_cpus": 0.5}}).resources
    assert (shares.train_threads, shares.audit_threads) == (2, 1)
    path = tmp_path / "c.yaml"
    path.write_text("resources: {num_cpus: 2.9, audit_num_cpus: 3}\n")
    assert load_config(path).resources.train_threads == 2
    pinned = load_config(path, ["resources.torch_threads=3"]).resources
    assert (pinned.train_threads, pinned.audit_threads) == (3, 3)
    for bad in (0, 1.5, "all", True):
        with pytest.raises(ConfigError, match=r"resources\.torch_threads: 'auto' or a whole"):
            validate_config({"resources": {"torch_threads": bad}})


def test_num_cpus_auto_shares_the_machine_among_the_sites(monkeypatch):
    """``auto``: the machine's CPUs (``ray.num_cpus`` when set) over the sites, whole, at least
    one; one in a cluster the run joins. The number is what config.yaml records."""
    monkeypatch.delenv(RAY_ADDRESS_ENV, raising=False)

    def resources(sites: int, machine: int, **ray: object):
        raw = {"partition": {"num_sites": sites}, "ray": {"num_cpus": machine, **ray}}
        return validate_config(raw).resources

    assert (resources(2, 2).train_cpus, resources(2, 2).audit_cpus) == (1.0, 1.0)
    sixteen = resources(2, 16)
    assert (sixteen.train_cpus, sixteen.train_threads, sixteen.audit_threads) == (8.0, 8, 8)
    assert resources(3, 16).train_cpus == 5.0 and resources(32, 16).train_cpus == 1.0
    assert resources(2, 16, address="10.0.0.1:6379").train_cpus == 1.0
    monkeypatch.setenv(RAY_ADDRESS_ENV, "10.0.0.1:6379")
    assert resources(2, 16).train_cpus == 1.0
    pinned = validate_config({"ray": {"num_cpus": 16}, "resources": {"audit_num_cpus": 3}})
    assert (pinned.resources.train_cpus, pinned.resources.audit_cpus) == (1.0, 3.0)
    assert "num_cpus: 1.0" in dump_config(pinned)
    for bad in (0, -1, "all", True):
        with pytest.raises(ConfigError, match=r"resources\.num_cpus: 'auto' or a number"):
            validate_config({"resources": {"num_cpus": bad}})


def test_the_central_evaluation_beside_training_takes_the_cores_the_sites_leave(monkeypatch):
    """A round's central evaluation runs in the driver beside the next round's training: it
    takes the machine's CPUs that the sites training at once do not hold, at least one; one
    in a cluster the run joins."""
    monkeypatch.delenv(RAY_ADDRESS_ENV, raising=False)

    def threads(sites: int, machine: int, *, fraction: float = 1.0, **resources: object) -> int:
        raw = {
            "partition": {"num_sites": sites},
            "fl": {"fraction_train": fraction},
            "ray": {"num_cpus": machine},
            "resources": resources,
        }
        return evaluation_threads_beside_training(validate_config(raw))

    assert threads(2, 2) == 1 and threads(2, 16) == 1  # auto: the sites hold every core
    assert threads(2, 16, num_cpus=2) == 12
    assert threads(8, 16, fraction=0.5, num_cpus=1) == 12  # four sites a round
    assert threads(3, 16, num_cpus=6) == 4  # two fit at once; the third waits
    assert threads(32, 16, num_cpus=1) == 1
    monkeypatch.setenv(RAY_ADDRESS_ENV, "10.0.0.1:6379")
    assert threads(2, 16, num_cpus=2) == 1


def test_only_the_listed_sites_run_the_inversion_audit(tmp_path):
    from panoramia_fl.simulations.apps import inversion_settings

    config = validate_config(
        {"partition": {"num_sites": 3}, "audit": {"inversion": {"sites": [1]}}}
    )
    attacking = [s for s in range(3) if inversion_settings(config, s, tmp_path) is not None]
    assert attacking == [1]
    every = validate_config({"partition": {"num_sites": 3}, "audit": {"inversion": {}}})
    assert all(inversion_settings(every, s, tmp_path) is not None for s in range(3))


def test_overrides_and_round_trip(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("name: x\nfl: {rounds: 2}\n")
    config = load_config(path, ["fl.rounds=4", "dp.enabled=true", "dp.target_epsilon=2"])
    assert config.fl.rounds == 4 and config.dp.enabled and config.dp.target_epsilon == 2
    (tmp_path / "resolved.yaml").write_text(dump_config(config))
    assert load_config(tmp_path / "resolved.yaml") == config


def test_infinite_epsilon_means_no_dp(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("dp: {enabled: true, target_epsilon: .inf}\n")
    config = load_config(path)
    assert not config.dp.enabled


def test_missing_and_malformed_files(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("fl: [1, 2\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config(REPO / "configs" / "default.yaml", ["fl.rounds"])
