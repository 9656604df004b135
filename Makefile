# Two entry points: `make reproduce` (the whole workbook, full profile) and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
PROFILE ?= full
STAMP := $(VENV)/.installed-stamp
TEST_STAMP := $(VENV)/.test-deps-stamp

.PHONY: install reproduce smoke test bench models clean-runs browser lab readme

$(STAMP): pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e .
	$(PY) -m ipykernel install --sys-prefix --name python3 >/dev/null
	touch $(STAMP)

install: $(STAMP)

# What the tests need beyond the package: TRL (pinned extra; torch pinned in the same command so it is
# never upgraded) and verl's core algorithms without verl's dependencies (scale/requirements-verl-cpu.txt).
$(TEST_STAMP): $(STAMP) scale/requirements-verl-cpu.txt
	$(PY) -m pip install -q -e ".[trl]" torch==2.13.0
	$(PY) -m pip install -q --no-deps -r scale/requirements-verl-cpu.txt
	$(PY) -m pip install -q --no-deps tensorboard==2.21.0 absl-py==2.5.1
	touch $(TEST_STAMP)

# Headless Chromium for the report page's browser test (tests/test_index_page.py): $GPOLIB_CHROMIUM (its executable)
# or chromium, chromium-browser, google-chrome or chrome on PATH. Where none is found, Debian's package is installed
# if apt-get runs as root or through a sudo that asks no password (measured here: apt-get update + install,
# 130 packages, about 7 min on a busy 2-core machine); otherwise one line says how to get it and the browser test
# reports itself not run, the rest of the suite runs.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
CHROMIUM_FOUND = [ -n "$$GPOLIB_CHROMIUM" ] || command -v chromium || command -v chromium-browser || \
  command -v google-chrome || command -v chrome
browser:
	@if { $(CHROMIUM_FOUND); } >/dev/null 2>&1; then :; \
	elif command -v apt-get >/dev/null 2>&1 && { [ -z "$(SUDO)" ] || sudo -n true 2>/dev/null; }; then \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq chromium >/dev/null; \
	else echo "browser: no Chromium found and none installable without a password (apt-get as root or passwordless sudo):" \
	  "the browser test is not run; install Chromium or set GPOLIB_CHROMIUM to its executable (docs/development.md)"; fi

# JupyterLab on the notebooks with the project's kernel (the venv's python3, registered by install).
lab: $(STAMP)
	cd notebooks && OMP_WAIT_POLICY=PASSIVE ../$(PY) -m jupyter lab $(if $(SUDO),,--allow-root) $(LAB_ARGS)

# RECOMPUTE=1: recompute the training runs too (default: reuse finished runs of the same configuration and data)
RECOMPUTE ?=
# JOBS=n: first train every unfinished run in n one-thread processes (gpolib.workbook.prefetch; n about the core count),
# then execute the notebooks, which reuse them (a notebook alone trains its runs one after another)
JOBS ?=
reproduce: $(STAMP)
	$(if $(JOBS),$(if $(RECOMPUTE),,OMP_WAIT_POLICY=PASSIVE $(PY) -m gpolib.workbook.prefetch --profile $(PROFILE) --jobs $(JOBS)))
	$(PY) -m gpolib reproduce --profile $(PROFILE) $(if $(RECOMPUTE),--recompute)

smoke: $(STAMP)
	$(PY) -m gpolib reproduce --profile smoke

test: $(TEST_STAMP) browser
	OMP_NUM_THREADS=2 OMP_WAIT_POLICY=PASSIVE $(PY) -m pytest -q -rs tests notebooks --nbval-lax --sanitize-with notebooks/sanitize.cfg

bench: $(STAMP)
	$(PY) -m pip install -q -e ".[bench]"
	$(PY) -m gpolib bench

# the generated blocks of README.md and docs/ (phenomena, scoreboard, layout, times) rebuilt from the tree
readme: $(STAMP)
	$(PY) -m gpolib.workbook.readme --write

models: $(STAMP)
	$(PY) -m gpolib pretrain --arch dense
	$(PY) -m gpolib pretrain --arch moe
	$(PY) -m gpolib pretrain --arch moe-fine --micro-batches 4
