"""The set-up path a fresh machine takes: README's commands, the Makefile, CI, pins."""

import ast
import functools
import os
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_readme_opens_with_run_and_test_commands():
    text = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands[:2] == ["make run", "make test"]


def test_ci_runs_readme_test_command_from_scratch():
    """CI's commands, in order: the environment is removed, then README's test command is the
    one command that runs (whatever README says it is)."""
    readme = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", readme, re.S).group(1)
    readme_test = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()][1]
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    commands = [line for line in ci if line and not line.startswith(("#", "set ", "trap "))]
    assert commands[-2:] == ["rm -rf .venv", readme_test]


def test_licence_is_spdx_with_its_text():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"  # an SPDX expression, not the deprecated table
    assert project["license-files"] == ["LICENSE"]
    assert "Apache License" in (REPO / "LICENSE").read_text()[:200]


def test_make_clean_keeps_the_users_runs(tmp_path):
    """`make clean` in a copy of the checkout: the environment and caches go, runs/ stays."""
    (tmp_path / "Makefile").write_text((REPO / "Makefile").read_text())
    kept = tmp_path / "runs" / "default" / "report.json"
    removed = [tmp_path / d / "x" for d in (".venv", ".pytest_cache", ".ruff_cache", ".mypy_cache")]
    for path in [kept, *removed]:
        path.parent.mkdir(parents=True)
        path.write_text("{}")
    subprocess.run(["make", "clean"], cwd=tmp_path, capture_output=True, check=True)
    assert kept.read_text() == "{}"
    assert [p.parent.name for p in removed if p.parent.exists()] == []


def test_makefile_targets_create_venv_and_run_default():
    dry = subprocess.run(
        ["make", "-n", "-B", "run", "VENV=/nonexistent-venv"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "-m venv /nonexistent-venv" in dry
    assert "pip install --quiet -e '.[dev]'" in dry
    assert "panoramia-fl run configs/default.yaml" in dry
    test = subprocess.run(
        ["make", "-n", "-B", "test", "VENV=/nonexistent-venv"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "pytest" in test and "ruff check" in test and "bin/mypy" in test
    # The report pages are tested in Chromium: `make test` installs it first.
    assert "apt-get install -y -q chromium" in test


def test_a_new_venv_without_room_on_its_disk_is_refused_before_pip(tmp_path):
    """`make` names the folder and its free room before it creates a venv that cannot fit (the
    folder above VENV may not exist yet); with the room there, the same check says nothing."""
    venv = tmp_path / "not" / "yet" / ".venv"
    # PYTHON=false: were the check missing, creating the venv fails at once instead of
    # installing one.
    refused = subprocess.run(
        ["make", "venv", f"VENV={venv}", f"VENV_NEEDS_GB={10**9}", "PYTHON=false"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0
    assert f"{venv}: a new environment takes about {10**9} GB" in refused.stdout
    assert f"but {tmp_path} has " in refused.stdout and " GB free." in refused.stdout
    assert "-m venv" not in refused.stdout  # make stopped before the line that creates it
    assert not (tmp_path / "not").exists()
    room = subprocess.run(
        ["make", "-s", "venv-space", f"VENV={venv}", "VENV_NEEDS_GB=0"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert (room.returncode, room.stdout, room.stderr) == (0, "", "")


def _pin(deps: list[str], name: str) -> tuple[int, ...]:
    (version,) = (d.split("==")[1] for d in deps if d.split("==")[0] == name)
    return tuple(int(part) for part in version.split("."))


def test_pins_and_console_script():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"]
    # torch and torchvision are pinned exactly, to a matching pair: torchvision 0.(N+15)
    # is built against torch 2.N (a mismatched pair fails to import its C++ ops).
    torch_version, vision_version = _pin(deps, "torch"), _pin(deps, "torchvision")
    assert torch_version[0] == 2 and vision_version[0] == 0
    assert vision_version[1] == torch_version[1] + 15, (torch_version, vision_version)
    assert any(d.startswith("flwr[simulation]>=1.42,<1.43") for d in deps)
    assert any(d.startswith("opacus>=1.6,<1.7") for d in deps)
    assert project["scripts"]["panoramia-fl"] == "panoramia_fl.simulations.cli:program"


# The layout by concern: each top-level package and the packages of ours it may import.
# A layering (no cycles): the hospitals' side (server, clients) never sees the harness, the
# report reads result files only, and deployment sits on top of everything.
ALLOWED_IMPORTS: dict[str, frozenset[str]] = {
    # names, files and formats both sides agree on (the checkpoint's included), errors, the
    # registry
    "contracts": frozenset(),
    # inline SVG charts in data units: nothing of ours (numpy only)
    "charts": frozenset(),
    # PANORAMIA as a library: stands alone but for the user errors and the registry
    # (contracts imports neither Flower nor torch at import time)
    "audit": frozenset({"contracts"}),
    # contracts (errors, the checkpoint, the tabular encoding): the data layer needs no audit
    "ml": frozenset({"contracts"}),
    # generic: weights and evaluation come as arguments; audit for the types of a site's audit
    # (it checks each reply by them) and the canary clients' math
    "server": frozenset({"contracts", "audit"}),
    "clients": frozenset({"contracts", "audit", "ml"}),
    "reporting": frozenset({"audit", "contracts", "charts"}),  # result types, file names, charts
    "simulations": frozenset(
        {"audit", "charts", "contracts", "server", "clients", "ml", "reporting"}
    ),
    "deployment": frozenset(
        {"audit", "charts", "contracts", "server", "clients", "ml", "reporting", "simulations"}
    ),
}
PACKAGES = tuple(ALLOWED_IMPORTS)
MAX_PACKAGE_SHARE = 0.35
TOP = "panoramia_fl"
"""The one name the project installs; ``panoramia_fl/<package>`` links each package folder."""


def _linked_packages() -> set[str]:
    """The project's package list: the links in ``panoramia_fl/`` (each to ``../<package>``)."""
    links = [p for p in (REPO / TOP).iterdir() if p.is_symlink()]
    assert all(p.readlink() == Path("..", p.name) for p in links), links
    return {p.name for p in links}


def _short(module: str) -> str:
    """``panoramia_fl.audit.result`` -> ``audit.result`` (the folder path of our modules)."""
    return module.removeprefix(f"{TOP}.")


def _package_files(package: str) -> list[Path]:
    return sorted((REPO / package).rglob("*.py"))


@functools.cache
def _tree(path: Path) -> ast.Module:
    """One module's syntax tree, parsed once for the session: the layout tests below walk
    every module's imports a dozen times over (no test changes a tree it reads)."""
    return ast.parse(path.read_text(), filename=str(path))


def _our_imports(path: Path) -> list[tuple[int, str]]:
    """(line, top-level package) of every absolute import of one of ours, lazy ones included."""
    found = []
    for node in ast.walk(_tree(path)):
        if isinstance(node, ast.Import):
            names = [_short(alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [_short(node.module)]
        else:
            continue
        found += [(node.lineno, n.split(".")[0]) for n in names if n.split(".")[0] in PACKAGES]
    return found


def test_every_package_is_in_the_import_table():
    on_disk = {p.parent.name for p in REPO.glob("*/__init__.py")} - {TOP}
    assert on_disk == _linked_packages() == set(PACKAGES)
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    # setuptools and mypy take the one package (mypy the benchmark scripts beside it).
    assert config["tool"]["setuptools"]["packages"]["find"]["include"] == [f"{TOP}*"]
    assert config["tool"]["mypy"]["files"] == [TOP, "benchmarks"]
    # `flwr run .` ships the code of every package the apps import. Flower's FAB builder
    # skips links, so the manifest names the folders the links point to.
    fab_include = config["tool"]["flwr"]["app"]["fab-include"]
    assert fab_include[0] == f"{TOP}/__init__.py"
    assert sorted(fab_include[1:]) == sorted(f"{p}/**/*.py" for p in PACKAGES)


def _readme_layout_table() -> dict[str, frozenset[str]]:
    """README's Layout table: package -> the packages of ours its row says it may import
    ("all above" = every package in an earlier row)."""
    text = (REPO / "README.md").read_text()
    section = text.split("## Layout", 1)[1]
    rows = re.findall(r"^\| `(\w+)/` \|[^|]*\| (.*) \|$", section, re.M)
    table: dict[str, frozenset[str]] = {}
    for package, may_import in rows:
        if may_import.startswith("all above"):
            table[package] = frozenset(table)
        else:
            named = set(re.findall(r"`(\w+)`", may_import)) & set(PACKAGES)
            table[package] = frozenset(named - {package})
    return table


def test_readme_layout_table_matches_the_import_table():
    assert _readme_layout_table() == ALLOWED_IMPORTS


def test_readme_layout_table_names_every_top_level_folder():
    """Every folder of the checkout (tracked files, dot folders aside) has its row."""
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    folders = {p.split("/")[0] for p in tracked if "/" in p and not p.startswith(".")}
    section = (REPO / "README.md").read_text().split("## Layout", 1)[1]
    first_cells = re.findall(r"^\| ([^|]*) \|", section, re.M)
    named = {name for cell in first_cells for name in re.findall(r"`(\w+)/`", cell)}
    assert named == folders


def test_import_table_is_a_layering():
    """No cycles: some order puts every package after all it may import."""
    placed: list[str] = []
    while len(placed) < len(PACKAGES):
        ready = [p for p in PACKAGES if p not in placed and ALLOWED_IMPORTS[p] <= set(placed)]
        assert ready, f"cycle among {sorted(set(PACKAGES) - set(placed))}"
        placed += ready


def test_imports_follow_the_table():
    violations = [
        f"{path.relative_to(REPO)}:{line} imports {target}"
        for package in PACKAGES
        for path in _package_files(package)
        for line, target in _our_imports(path)
        if target != package and target not in ALLOWED_IMPORTS[package]
    ]
    assert violations == []


def _module_name(path: Path) -> str:
    """The module's folder path (``reporting.schema``), as :func:`_short` names imports."""
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_time_nodes(
    body: list[ast.stmt], *, lazy: bool = False, typing: bool = False
) -> Iterator[ast.Import | ast.ImportFrom]:
    """The imports a module runs when it is imported (with ``lazy``, also those inside its
    functions); those under ``if TYPE_CHECKING:`` (read by type checkers only) with
    ``typing``."""
    for node in body:
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        elif isinstance(node, ast.If):
            if typing or not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                yield from _import_time_nodes(node.body, lazy=lazy, typing=typing)
            yield from _import_time_nodes(node.orelse, lazy=lazy, typing=typing)
        elif isinstance(node, ast.Try):
            for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                yield from _import_time_nodes(block, lazy=lazy, typing=typing)
        elif isinstance(node, ast.With | ast.ClassDef) or (
            lazy and isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        ):
            yield from _import_time_nodes(node.body, lazy=lazy, typing=typing)


def _absolute(module: str, path: Path, node: ast.ImportFrom) -> str:
    """The module a ``from`` import names, relative ones (``from .schema import``) resolved."""
    if node.level == 0:
        return _short(node.module or "")
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _import_graph(*, lazy: bool, typing: bool = False) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports, relative imports included (``from a import
    b`` counts as importing ``a.b`` when that is a module)."""
    modules = {_module_name(p): p for package in PACKAGES for p in _package_files(package)}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in _import_time_nodes(_tree(path).body, lazy=lazy, typing=typing):
            if isinstance(node, ast.Import):
                targets.update(_short(alias.name) for alias in node.names)
            else:
                base = _absolute(name, path, node)
                # ``from . import plots`` imports reporting.pages.plots; its package is importing.
                targets.update([base] if node.module else [])
                targets.update(f"{base}.{alias.name}" for alias in node.names)
        graph[name] = {t for t in targets if t in modules and t != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    state: dict[str, str] = {}  # "open" while on the DFS stack, then "done"
    cycles: list[list[str]] = []

    def visit(module: str, stack: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycles.append(stack[stack.index(target) :] + [target])
            elif target not in state:
                visit(target, [*stack, target])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return cycles


@pytest.mark.parametrize(
    ("lazy", "typing"),
    [(False, False), (True, False), (True, True)],
    ids=["at import time", "lazy ones included", "type-only ones included"],
)
def test_no_module_import_cycle(lazy, typing):
    """No module imports one that imports it back, directly or through others: at import
    time a cycle makes the import order decide which names exist, and a lazy or type-only
    import back (``reporting.assembly.inputs`` -> ``run_config`` -> ``privacy_ledger`` -> ``inputs``
    once) is the same tangle, deferred."""
    assert _cycles(_import_graph(lazy=lazy, typing=typing)) == []


def test_reporting_modules_import_downwards():
    """Inside ``reporting`` too (its modules import each other relatively): the graph of its
    modules is acyclic, so each imports only modules below it, and it reaches them all
    (a relative import the graph missed would hide a cycle)."""
    graph = _import_graph(lazy=True, typing=True)
    inside = {m: {t for t in ts if t.startswith("reporting.")} for m, ts in graph.items()}
    inside = {m: ts for m, ts in inside.items() if m.startswith("reporting.")}
    assert _cycles(inside) == []
    assert {
        "reporting.schemas.schema",
        "reporting.numbers.metrics",
        "reporting.layout.columns",
    } <= set().union(*inside.values())


@pytest.mark.parametrize("package", PACKAGES)
def test_the_parts_of_a_package_import_downwards(package: str) -> None:
    """Inside each package, its parts (its modules, and its subpackages taken whole:
    ``audit.stats``, ``audit.panoramia``, ``audit.canaries``...) form a layering too: no
    circle among them, lazy imports included."""

    def part(module: str) -> str:
        return ".".join(module.split(".")[:2])

    graph = _import_graph(lazy=True, typing=True)
    parts: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if module.split(".")[0] == package and module != package:
            inside = {part(t) for t in targets if t.startswith(f"{package}.")}
            parts.setdefault(part(module), set()).update(inside - {part(module)})
    for targets in parts.values():
        targets &= set(parts)
    assert _cycles(parts) == []


def test_audit_is_grouped_by_concern() -> None:
    """``audit/``: at most 14 entries at its top level (the pipeline, the statistics, the
    canary audits, inversion, the dishonest server's attacks, the checks of a received
    model and the modalities each a package)."""
    entries = [p for p in (REPO / "audit").iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 14, sorted(p.name for p in entries)


def test_reporting_is_grouped_by_concern() -> None:
    """``reporting/``: at most 12 entries at its top level, each concern a subpackage (what
    the reports hold, the numbers and their meaning, pages, privacy, tables, the gate, a
    run's assembly, a site's report, the run's files, sweeps, evidence)."""
    entries = [p for p in (REPO / "reporting").iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 12, sorted(p.name for p in entries)
    assert all(p.is_dir() for p in entries if p.name != "__init__.py"), entries


MODALITIES = {"image", "tabular", "text"}
"""A family may hold one module per modality under one name (``models/image.py`` beside
``datasets/image.py``, ``audit/image/classifier.py`` beside ``audit/text/classifier.py``)."""


def test_each_module_name_says_one_thing() -> None:
    """Issue 55 found ``app.py``, ``config.py``, ``model_checks.py``, ``evidence.py``, ... each
    naming two modules of different meaning: a name names one module, or one per modality."""
    where: dict[str, list[Path]] = {}
    for package in PACKAGES:
        for path in _package_files(package):
            if path.name != "__init__.py":
                where.setdefault(path.stem, []).append(path.relative_to(REPO))
    twice = {
        name: [str(p) for p in paths]
        for name, paths in where.items()
        if len(paths) > 1
        and name not in MODALITIES
        and not all(p.parent.name in MODALITIES for p in paths)
    }
    assert twice == {}


def test_no_module_over_600_lines() -> None:
    """Every package's modules, the benchmark scripts and the tests: a module past 600 lines
    holds more than one job."""
    long = [
        f"{path.relative_to(REPO)}: {n} lines"
        for folder in (*PACKAGES, "benchmarks", "tests")
        for path in _package_files(folder)
        if (n := len(path.read_text().splitlines())) > 600
    ]
    assert long == []


def test_contracts_stay_light_and_audit_needs_no_flower():
    """Both sides of a run import ``contracts``: no torch, no numpy at import time; only
    ``contracts.wire`` imports Flower's records, and only ``contracts.checkpoint`` uses torch
    (inside its functions: a checkpoint is a torch file). ``audit`` (usable without Flower)
    imports only the standard-library modules of ``contracts``."""

    def third_party(path: Path, nodes: Iterable[ast.stmt | ast.AST]) -> list[str]:
        return [
            f"{path.relative_to(REPO)}:{node.lineno} imports {name}"
            for node in nodes
            if isinstance(node, ast.Import | ast.ImportFrom)
            for name in (
                [_short(a.name) for a in node.names]
                if isinstance(node, ast.Import)
                else [_short(node.module or "")]
            )
            if name.split(".")[0] not in sys.stdlib_module_names
            and name.split(".")[0] != "contracts"
            and not (name == "flwr.app" and path.name == "wire.py")
        ]

    at_import = [
        line
        for path in _package_files("contracts")
        for line in third_party(path, _import_time_nodes(_tree(path).body))
    ]
    assert at_import == []
    anywhere = [
        line
        for path in _package_files("contracts")
        if path.name != "checkpoint.py"
        for line in third_party(path, ast.walk(_tree(path)))
    ]
    assert anywhere == []
    audit_uses = {
        _short(node.module or "")
        for path in _package_files("audit")
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.ImportFrom) and _short(node.module or "").startswith("contracts")
    }
    assert audit_uses <= {
        "contracts.held_rounds",
        "contracts.errors",
        "contracts.json_values",
        "contracts.model_flags",
        "contracts.registry",
        "contracts.tabular_schema",
    }, audit_uses


def test_no_package_holds_most_of_the_code():
    """Package code only (not tests or benchmarks): no concern outgrows the others."""
    lines = {p: sum(len(f.read_text().splitlines()) for f in _package_files(p)) for p in PACKAGES}
    total = sum(lines.values())
    for package, n in sorted(lines.items(), key=lambda kv: -kv[1]):
        print(f"{package:<12} {n:>6} lines  {n / total:6.1%}")
    print(f"{'total':<12} {total:>6} lines")
    biggest = max(lines, key=lines.get)
    assert lines[biggest] / total <= MAX_PACKAGE_SHARE, biggest


def test_every_type_ignore_names_its_code_and_reason():
    """``# type: ignore[code]  # why`` on its line: a bare ignore hides every future error."""
    pattern = re.compile(r"#\s*type:\s*ignore(?!\[[\w\-, ]+\]\s+#\s*\S)")
    folders = (*PACKAGES, "tests", "benchmarks")
    bare = [
        f"{path.relative_to(REPO)}:{n}"
        for folder in folders
        for path in sorted((REPO / folder).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), start=1)
        if pattern.search(line)
    ]
    assert not bare, bare


def test_test_modules_share_builders_not_each_other():
    """Shared builders live in tests/builders.py; a test module importing another would run
    or break with it."""
    modules = {p.stem for p in (REPO / "tests").glob("test_*.py")}
    crossed = [
        f"{path.name}:{node.lineno} imports {name}"
        for path in sorted((REPO / "tests").glob("*.py"))
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for name in (
            [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        )
        if name.split(".")[0] in modules
    ]
    assert crossed == []


@pytest.mark.slow
def test_installed_the_project_is_one_name_and_its_examples_run_outside(tmp_path: Path):
    """In the environment the project is installed into, from a folder outside the checkout
    and with no PYTHONPATH of ours: ``panoramia_fl.*`` imports, none of the folder names
    does (a user's ``server`` or ``ml`` is theirs), and the example plugin and Flower app,
    copied out, register and build against the installed package."""
    for example in ("plugin/clinic_plugin", "flower_app/minimal_app.py"):
        copy = shutil.copytree if (REPO / "examples" / example).is_dir() else shutil.copy
        copy(REPO / "examples" / example, tmp_path / Path(example).name)
    code = f"""
import importlib.util, pathlib
import panoramia_fl
from panoramia_fl.deployment import flower_apps
print("taken:", [p for p in {sorted(PACKAGES)!r} if importlib.util.find_spec(p)])
import clinic_plugin, minimal_app
from panoramia_fl.ml.models import MODELS
server_app, client_app = minimal_app.make_apps(pathlib.Path("run"), rounds=1)
print("plugin:", MODELS.meta("clinic_cnn")["modality"], type(server_app).__name__)
print("from:", pathlib.Path(flower_apps.__file__).resolve().is_relative_to({str(REPO)!r}))
"""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"PYTHONPATH": "."}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines() == ["taken: []", "plugin: image ServerApp", "from: True"]
