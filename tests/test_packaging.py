"""The set-up path a fresh machine takes: README's commands, the Makefile, CI, pins."""

import re
import subprocess
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_readme_opens_with_run_and_test_commands():
    text = (REPO / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands[:2] == ["make run", "make test"]


def test_ci_runs_readme_test_command_from_scratch():
    ci = (REPO / ".ci" / "run").read_text()
    assert "rm -rf .venv" in ci and re.search(r"^make test$", ci, re.M)


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


def test_pins_and_console_script():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    deps = project["dependencies"]
    assert "torch==2.14.1" in deps and "torchvision==0.29.1" in deps
    assert any(d.startswith("flwr[simulation]>=1.42,<1.43") for d in deps)
    assert any(d.startswith("opacus>=1.6,<1.7") for d in deps)
    assert project["scripts"]["panoramia-fl"] == "simulations.cli:main"


def _imports(package: str, forbidden: str) -> list[Path]:
    pattern = re.compile(rf"^\s*(from|import) ({forbidden})\b", re.M)
    return [p for p in (REPO / package).rglob("*.py") if pattern.search(p.read_text())]


def test_import_direction():
    """audit/ stands alone; the server and clients never import the harness."""
    assert _imports("audit", "server|clients|simulations") == []
    assert _imports("server", "clients|simulations") == []
    assert _imports("clients", "server|simulations") == []
    assert _imports("contracts", "audit|server|clients|simulations") == []
