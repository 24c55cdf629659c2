# a2acc: two commands do all set-up on a fresh machine.
#   make run   -> creates .venv, installs a2acc, runs the main job on the embedded default
#   make test  -> same environment, runs ruff, mypy and the whole test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.deps-stamp
RUN_DIR := build/run

.PHONY: run test lint typecheck unit install bench clean

PIP_LOG := build/pip-install.log
# install quietly, errors loud: pip's output goes to $(PIP_LOG) and is shown only when a step fails
PIP = $(BIN)/pip install --disable-pip-version-check -c constraints.txt

$(STAMP): pyproject.toml setup.py constraints.txt
	@mkdir -p build
	@echo "a2acc: creating $(VENV) and installing the pinned dependencies (constraints.txt; log: $(PIP_LOG))"
	@$(PY) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else "a2acc needs Python >= 3.10 (PY=$(PY))")'
	@$(PY) -m venv $(VENV)
	@$(PIP) -q --upgrade pip setuptools wheel >$(PIP_LOG) 2>&1 || { cat $(PIP_LOG); exit 1; }
	@$(PIP) -q -e ".[dev,plot]" --config-settings editable_mode=strict >>$(PIP_LOG) 2>&1 \
		|| { cat $(PIP_LOG); exit 1; }
	@# the CPU build of torch 2.13.0 is what this machine provides (a wheel beside pip's find-links); the
	@# package itself accepts torch >= 2.1, < 3 (extra "torch")
	@$(PIP) -q "torch==2.13.0" >>$(PIP_LOG) 2>&1 \
		|| echo "a2acc: warning: torch 2.13.0 could not be installed; the runtime tests will be skipped ($(PIP_LOG))"
	@touch $(STAMP)

# strict editable installs link files present at install time: refresh the link tree (fast, no downloads)
install: $(STAMP)
	@mkdir -p build
	@$(BIN)/pip install -q --disable-pip-version-check --no-deps --no-build-isolation -e . \
		--config-settings editable_mode=strict >build/pip-refresh.log 2>&1 || { cat build/pip-refresh.log; exit 1; }
	@$(BIN)/python -m a2acc.runtime.activate --install-hook >/dev/null

run: install
	@mkdir -p $(RUN_DIR)
	$(BIN)/a2acc traffic gen moe --topology dgx-h100 --servers 4 --skew 0.8 --seed 7 --size 256M -o $(RUN_DIR)/moe.npy
	$(BIN)/a2acc traffic show $(RUN_DIR)/moe.npy
	$(BIN)/a2acc plan --topology dgx-h100 --servers 4 --traffic $(RUN_DIR)/moe.npy --algorithm direct -o $(RUN_DIR)/direct.json
	$(BIN)/a2acc verify $(RUN_DIR)/direct.json
	$(BIN)/a2acc report $(RUN_DIR)/direct.json
	$(BIN)/a2acc plan --topology dgx-h100 --servers 4 --traffic $(RUN_DIR)/moe.npy --algorithm fast \
		--opt compare_kuhn=true --timings -o $(RUN_DIR)/fast.json
	$(BIN)/a2acc verify $(RUN_DIR)/fast.json
	@rm -rf $(RUN_DIR)/algos $(RUN_DIR)/algos.manifest.json
	$(BIN)/a2acc compile --topology dgx-h100 --servers 4 --traffic $(RUN_DIR)/moe.npy --algorithm fast \
		--backend msccl-xml --opt dialect=rccl --timings -o $(RUN_DIR)/algos
	$(BIN)/a2acc verify $(RUN_DIR)/algos/*.xml --manifest $(RUN_DIR)/algos.manifest.json --opt dialect=rccl
	$(BIN)/a2acc bounds --topology dgx-h100 --servers 4 --traffic $(RUN_DIR)/moe.npy
	@rm -f $(RUN_DIR)/compare.png $(RUN_DIR)/compare.json
	$(BIN)/a2acc compare --topology dgx-h100 --servers 4 --traffic $(RUN_DIR)/moe.npy --sizes 64M:256M:x4 \
		--plot $(RUN_DIR)/compare.png -J $(RUN_DIR)/compare.json

lint: install
	@mkdir -p build
	$(BIN)/ruff check compiler backends runtime_patches tests benchmarks examples setup.py
	$(BIN)/ruff format --check compiler backends runtime_patches tests benchmarks examples setup.py

typecheck: install
	$(BIN)/mypy -p a2acc

# two workers: the suite's multi-process tests (Gloo ranks, worker pools) wait on each other as much as they
# compute, and on CI's two cores this takes the suite from ~11.5 to ~8 minutes (A2ACC_TEST_WORKERS=0: one process)
A2ACC_TEST_WORKERS ?= 2
unit: install
	$(BIN)/pytest -q -n $(A2ACC_TEST_WORKERS)

test: lint typecheck unit

bench: install
	@for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b; done

clean:
	rm -rf build $(VENV) .mypy_cache .pytest_cache .ruff_cache
