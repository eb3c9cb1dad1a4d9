"""Plugins: a user's package outside the repository registers a model and a dataset; runs
import it in the driver, the Ray workers and every ClientApp; bad plugins get named errors.

The simulated run uses the example plugin (``examples/plugin``) copied out of the checkout.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from builders import TINY_AUDIT, run_files

from panoramia_fl.contracts.plugins import PluginError, import_plugins
from panoramia_fl.ml.datasets import DataError
from panoramia_fl.simulations.cli import main as cli_main
from panoramia_fl.simulations.experiment_config import validate_config
from panoramia_fl.simulations.run_dir import prepare_run_dir

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "plugin"


@pytest.fixture
def outside(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder outside the repository on ``sys.path`` (as PYTHONPATH would put it), holding
    a copy of the example plugin."""
    packages = tmp_path / "site-packages-of-the-user"
    shutil.copytree(EXAMPLE / "clinic_plugin", packages / "clinic_plugin")
    monkeypatch.syspath_prepend(str(packages))
    return packages


def _module(folder: Path, name: str, source: str) -> str:
    (folder / f"{name}.py").write_text(source)
    return name


def test_a_module_that_cannot_be_imported_is_named_with_its_own_error(outside: Path):
    with pytest.raises(PluginError, match=r"plugins: module 'no_such_plugin' cannot be imported: "):
        validate_config({"plugins": ["no_such_plugin"]})
    broken = _module(outside, "broken_plugin", "import os\nraise RuntimeError('no licence')\n")
    with pytest.raises(PluginError, match=r"'broken_plugin' .* RuntimeError: no licence \(.*:2\)"):
        import_plugins([broken])
    with pytest.raises(PluginError, match="not a module name"):
        validate_config({"plugins": ["/abs/path.py"]})


def test_a_plugin_that_calls_sys_exit_as_it_is_imported_is_named(outside: Path, capsys):
    """Its own exit code would end the run with no message (and could pass for one of the
    CLI's); the run stops with a named error instead, exit 2."""
    quitter = _module(outside, "quitting_plugin", "import sys\n\nsys.exit(3)\n")
    with pytest.raises(PluginError, match=r"'quitting_plugin' called sys\.exit\(3\) as it was imp"):
        import_plugins([quitter])
    assert cli_main(["run", "--plugin", quitter, str(EXAMPLE / "clinic.yaml")]) == 2
    err = capsys.readouterr().err
    assert "panoramia-fl: error: plugins: module 'quitting_plugin' called sys.exit(3)" in err


def test_a_plugin_cannot_replace_a_builtin_name(outside: Path):
    """A plugin registering the built-in ``small_cnn`` is refused as it registers, naming
    both modules (docs/plugins.md), whether or not the built-in's module was imported yet;
    the built-in keeps its name."""
    from panoramia_fl.ml.models import MODELS

    source = (
        "from panoramia_fl.ml.models import MODELS\n\n"
        "@MODELS.register('small_cnn', modality='image')\n"
        "def mine(*, num_classes, dp, input_shape):\n"
        "    raise AssertionError('the impostor was built')\n"
    )
    impostor = _module(outside, "impostor_plugin", source)
    with pytest.raises(PluginError) as caught:
        validate_config({"plugins": [impostor]})
    assert str(caught.value) == (
        "plugins: module 'impostor_plugin': model 'small_cnn' is a built-in name (registered "
        "by panoramia_fl.ml.models.image); impostor_plugin must register its own under another name"
    )
    assert MODELS.get("small_cnn").__module__ == "panoramia_fl.ml.models.image"


def test_builders_and_loaders_with_the_wrong_signature_are_refused_as_they_register(
    outside: Path,
):
    bad_model = _module(
        outside,
        "bad_model_plugin",
        "from panoramia_fl.ml.models import MODELS\n"
        "@MODELS.register('bad_net')\n"
        "def bad_net(classes, *, dp):\n"
        "    raise AssertionError('never called')\n",
    )
    with pytest.raises(
        PluginError,
        match=r"plugins: module 'bad_model_plugin': model 'bad_net': builder .* lacks num_classes",
    ):
        validate_config({"plugins": [bad_model]})
    bad_loader = _module(
        outside,
        "bad_loader_plugin",
        "from panoramia_fl.ml.datasets import DATASETS\n"
        "@DATASETS.register('bad_scans')\n"
        "def bad_scans(root):\n"
        "    raise AssertionError('never called')\n",
    )
    with pytest.raises(PluginError, match=r"'bad_scans': loader .* must take \(root, options\)"):
        import_plugins([bad_loader])


def test_a_dataset_without_a_public_split_when_the_audit_needs_one(outside: Path, tmp_path):
    plugin = _module(
        outside,
        "private_only_plugin",
        "import numpy as np\n"
        "from panoramia_fl.ml.datasets import DATASETS, Dataset\n"
        "@DATASETS.register('private_only')\n"
        "def private_only(root, options):\n"
        "    x = np.zeros((200, 1, 8, 8), np.uint8)\n"
        "    return Dataset('private_only', 'image', x, np.arange(200) % 2, 2, (1, 8, 8))\n",
    )
    config = validate_config(
        {
            "plugins": [plugin],
            "data": {"name": "private_only"},
            "partition": {"scheme": "iid", "num_sites": 2},
            "audit": {"reference_pool": True},
        }
    )
    with pytest.raises(
        DataError, match="audit.reference_pool: dataset 'private_only' has no public"
    ):
        prepare_run_dir(config, run_files(tmp_path / "run"))


def test_a_plugin_strategy_is_checked_and_built_like_the_built_in_ones(outside: Path):
    from panoramia_fl.server.strategy import StrategySettings, make_strategy
    from panoramia_fl.simulations.run_dir import DatasetMeta
    from panoramia_fl.simulations.run_task import check_run_task

    plugin = _module(
        outside,
        "median_plugin",
        "from flwr.serverapp.strategy import FedMedian\n"
        "from panoramia_fl.server.strategy import STRATEGIES, SiteAwareMixin\n"
        "@STRATEGIES.register('site_median')\n"
        "class SiteFedMedian(SiteAwareMixin, FedMedian):\n"
        "    pass\n",
    )
    raw = {"plugins": [plugin], "fl": {"strategy": "site_median"}, "data": {"name": "digits"}}
    config = validate_config(raw)
    check_run_task(config, DatasetMeta("digits", "image", 10, (1, 8, 8)))
    strategy = make_strategy(
        StrategySettings(name="site_median", fraction_train=1.0),
        num_sites=2,
        site_of_node={11: 0, 12: 1},
    )
    assert type(strategy).__name__ == "SiteFedMedian" and strategy.sites_per_round == 2


def _config(outside: Path, tmp_path: Path, **overrides) -> dict:
    raw = yaml.safe_load((EXAMPLE / "clinic.yaml").read_text())
    raw["fl"]["rounds"] = 1
    raw["audit"]["settings"] = TINY_AUDIT
    raw.update(overrides)
    return raw


def test_a_batchnorm_model_under_dp_names_the_layer_before_any_site_starts(
    outside, tmp_path, capsys
):
    # The plugin comes from --plugin here: without it clinic_cnn would be an unknown name.
    raw = _config(outside, tmp_path, plugins=[])
    raw["model"]["options"]["norm"] = "batch"
    config_file = tmp_path / "clinic.yaml"
    config_file.write_text(yaml.safe_dump(raw))
    dp = ["--set", "dp.enabled=true", "--set", "dp.noise_multiplier=1.0"]
    run_dir = tmp_path / "run"
    argv = ["run", str(config_file), "--plugin", "clinic_plugin", "--out", str(run_dir), *dp]
    assert cli_main(argv) == 2
    error = capsys.readouterr().err
    assert "layer 'block.1' (BatchNorm2d): BatchNorm cannot support training" in error
    assert not (run_dir / "config.yaml").exists()  # nothing written for it


@pytest.mark.ray
def test_a_run_with_the_plugin_audits_every_site_in_ray_workers(outside, tmp_path):
    """The plugin's model, under Opacus, in the Ray workers (which import the plugin) and
    in the sites' audits; without DP the same model trains through the same calls, minus
    Opacus's wrapping."""
    raw = _config(outside, tmp_path)  # plugins: [clinic_plugin], as in the example
    raw["dp"] = {"enabled": True, "noise_multiplier": 1.0}
    config_file = tmp_path / "clinic.yaml"
    config_file.write_text(yaml.safe_dump(raw))
    run_dir = tmp_path / "run"
    assert cli_main(["run", str(config_file), "--out", str(run_dir)]) == 0
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["plugins"] == ["clinic_plugin"]
    report = json.loads((run_dir / "report.json").read_text())
    assert report["dp_level"] == "record"
    assert [(s["site_id"], s["status"]) for s in report["sites"]] == [(0, "ok"), (1, "ok")]
    for site in report["sites"]:
        assert site["audit"]["two_sided"]["eps_tilde"]["mean"] >= 0
        assert site["privacy"]["dp_epsilon"] > 0
