"""The one registry (``contracts.registry``) and the project's registries built on it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import get_args

import pytest
import torch

from panoramia_fl.contracts.errors import NameTakenError, UnknownNameError, UserError
from panoramia_fl.contracts.plugins import PluginError, import_plugins
from panoramia_fl.contracts.registry import Registry

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """A throw-away package ``<name>`` whose ``THINGS`` registry has three built-ins: ``a``
    and ``b`` in their own modules, ``ghost`` in a module that forgets to register it."""
    name = f"regtest_{tmp_path.name}".replace("-", "_")
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text(
        textwrap.dedent(f"""
        from panoramia_fl.contracts.registry import Registry

        THINGS = Registry(
            "thing",
            config_key="things.name",
            builtins={{"a": "{name}.a", "b": "{name}.b", "ghost": "{name}.ghost"}},
        )
        """)
    )
    for letter in "ab":
        (pkg / f"{letter}.py").write_text(
            textwrap.dedent(f"""
            from {name} import THINGS

            @THINGS.register("{letter}", colour="{letter}-colour")
            def make():
                return "{letter}"
            """)
        )
    (pkg / "ghost.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
        del sys.modules[module]


def test_register_get_meta_and_names() -> None:
    reg: Registry[type] = Registry("shape", config_key="geometry.shape")

    @reg.register("square", corners=4)
    class Square:
        pass

    assert Square.__name__ == "Square"  # the decorator hands the value back unchanged
    assert reg.get("square") is Square
    assert reg.meta("square") == {"corners": 4}
    with pytest.raises(TypeError):
        reg.meta("square")["corners"] = 5  # type: ignore[index]  # the write must fail
    assert reg.names() == ["square"]


def test_a_lookup_imports_only_the_module_of_that_builtin(plugins) -> None:
    package = __import__(plugins)
    things = package.THINGS
    assert things.names() == ["a", "b", "ghost"]  # listing imports nothing
    assert f"{plugins}.a" not in sys.modules and f"{plugins}.b" not in sys.modules

    assert things.get("a")() == "a"
    assert f"{plugins}.a" in sys.modules and f"{plugins}.b" not in sys.modules
    assert things.meta("b") == {"colour": "b-colour"}
    assert f"{plugins}.b" in sys.modules
    with pytest.raises(RuntimeError, match=f"{plugins}.ghost does not register"):
        things.get("ghost")


def test_an_unknown_name_is_a_user_error_naming_the_key_and_the_known_names(plugins) -> None:
    things = __import__(plugins).THINGS
    with pytest.raises(UnknownNameError) as caught:
        things.get("zzz")
    assert isinstance(caught.value, KeyError) and isinstance(caught.value, UserError)
    assert str(caught.value) == "things.name: unknown thing 'zzz'; known: ['a', 'b', 'ghost']"
    assert f"{plugins}.a" not in sys.modules  # nothing imported to say so
    with pytest.raises(UnknownNameError, match="unknown thing 'zzz'"):
        things.meta("zzz")


def test_a_name_is_registered_once(plugins) -> None:
    things = __import__(plugins).THINGS
    first = things.get("a")
    with pytest.raises(
        NameTakenError, match=rf"thing 'a' is a built-in name \(registered by {plugins}\.a\)"
    ):
        things.register("a")(lambda: "impostor")
    assert things.get("a") is first
    things.register("c")(lambda: "c")
    with pytest.raises(NameTakenError, match="thing 'c' is already registered") as caught:
        things.register("c")(lambda: "again")
    assert isinstance(caught.value, ValueError) and "test_registry" in str(caught.value)


def test_a_plugin_cannot_take_a_builtin_name_before_its_module_is_imported(
    plugins, tmp_path
) -> None:
    """docs/plugins.md: a name registered by a plugin and a built-in is refused as it
    registers, naming both; the built-in's own module still imports afterwards."""
    impostor = f"{plugins}_impostor"
    (tmp_path / f"{impostor}.py").write_text(
        f"from {plugins} import THINGS\n\n@THINGS.register('b')\ndef mine():\n    return 'mine'\n"
    )
    assert f"{plugins}.b" not in sys.modules
    with pytest.raises(PluginError) as caught:
        import_plugins([impostor])
    assert str(caught.value) == (
        f"plugins: module '{impostor}': thing 'b' is a built-in name (registered by "
        f"{plugins}.b); {impostor} must register its own under another name"
    )
    assert __import__(plugins).THINGS.get("b")() == "b"


# --------------------------------------------------------------------------- the project's


def _project_registries() -> dict[str, Registry]:
    from panoramia_fl.audit.panoramia.components import CLASSIFIERS, GENERATORS
    from panoramia_fl.ml.datasets import DATASETS
    from panoramia_fl.ml.models import MODELS
    from panoramia_fl.ml.tasks.base import TASKS
    from panoramia_fl.server.client_dp import CLIPPINGS
    from panoramia_fl.server.strategy import STRATEGIES

    return {
        "data.name": DATASETS,
        "model.name": MODELS,
        "task.modality": TASKS,
        "audit.generator.kind": GENERATORS,
        "membership classifiers": CLASSIFIERS,
        "fl.strategy": STRATEGIES,
        "dp.client.clipping": CLIPPINGS,
    }


@pytest.mark.parametrize("key", list(_project_registries()))
def test_every_builtin_name_is_registered_by_its_module(key) -> None:
    registry = _project_registries()[key]
    for name in registry.names():
        assert registry.get(name) is not None
    with pytest.raises(UnknownNameError, match=rf"unknown {registry.kind} 'no_such'; known: \["):
        registry.get("no_such")


def test_config_choices_are_the_registered_names() -> None:
    from panoramia_fl.server.client_dp import CLIPPING_SIDES, CLIPPINGS
    from panoramia_fl.simulations.experiment_config import ClientDPConfig

    def choices(model, field: str) -> list[str]:
        return sorted(get_args(model.model_fields[field].annotation))

    assert choices(ClientDPConfig, "clipping") == CLIPPINGS.names()
    assert choices(ClientDPConfig, "clipping_side") == sorted(CLIPPING_SIDES)


def test_a_strategy_is_any_registered_name_and_an_unknown_one_stops_the_run_first() -> None:
    # fl.strategy is free text (a plugin may register one); the run checks it before Ray.
    from panoramia_fl.simulations.experiment_config import validate_config
    from panoramia_fl.simulations.run_dir import DatasetMeta
    from panoramia_fl.simulations.run_task import check_run_task

    config = validate_config({"fl": {"strategy": "fedmedian"}, "data": {"name": "digits"}})
    meta = DatasetMeta(name="digits", modality="image", num_classes=10, input_shape=(1, 8, 8))
    with pytest.raises(UnknownNameError, match=r"fl.strategy: unknown strategy 'fedmedian'"):
        check_run_task(config, meta)


def test_an_image_run_never_imports_transformers() -> None:
    code = textwrap.dedent("""
        import sys
        from panoramia_fl.audit.panoramia.components import CLASSIFIERS, GENERATORS
        from panoramia_fl.ml.datasets import DATASETS
        from panoramia_fl.ml.tasks import build_task

        DATASETS.get("digits")
        task = build_task("image", model_name="small_cnn", num_classes=10, input_shape=(1, 8, 8))
        task.make_model()
        GENERATORS.get("cgan"), GENERATORS.get("reference_pool"), CLASSIFIERS.get("image")
        assert "transformers" not in sys.modules, "transformers imported"
        assert "panoramia_fl.audit.text.generator" not in sys.modules
    """)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr


def test_a_generator_for_another_modality_is_refused() -> None:
    from panoramia_fl.audit.config import AuditConfig
    from panoramia_fl.audit.panoramia.components import AuditContext, make_generator

    image_task = SimpleNamespace(modality="image")
    context = AuditContext(task=image_task, device=torch.device("cpu"))  # type: ignore[arg-type]  # a stand-in task
    with pytest.raises(UnknownNameError, match="'mst' makes tabular records, not image"):
        make_generator(AuditConfig(generator={"kind": "mst"}), context)


def test_a_model_for_another_modality_is_refused() -> None:
    from panoramia_fl.ml.tasks import build_task

    task = build_task("tabular", model_name="small_cnn", num_classes=2, input_shape=(3,))
    with pytest.raises(UserError, match="model.name: 'small_cnn' is a model for image records"):
        task.make_model()
