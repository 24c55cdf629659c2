# a2acc: two commands do all set-up on a fresh machine.
#   make run   -> creates .venv, installs a2acc, runs the main job on the embedded default
#   make test  -> same environment, runs ruff, mypy and the whole test suite
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.deps-stamp
RUN_DIR := build/run

.PHONY: run test lint typecheck unit install bench clean

$(STAMP): pyproject.toml setup.py
	@mkdir -p build
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip "setuptools>=69" wheel
	$(BIN)/pip install -q -e ".[dev,plot]" --config-settings editable_mode=strict
	# the CPU build of torch 2.13.0 is what this machine provides (a wheel beside pip's find-links); the
	# package itself accepts any torch >= 2.1 (extra "torch")
	$(BIN)/pip install -q "torch==2.13.0" || echo "warning: torch 2.13.0 could not be installed; runtime tests will be skipped"
	touch $(STAMP)

# strict editable installs link files present at install time: refresh the link tree (fast, no downloads)
install: $(STAMP)
	@mkdir -p build
	@$(BIN)/pip install -q --no-deps --no-build-isolation -e . --config-settings editable_mode=strict 2>build/pip-install.log \
		|| { cat build/pip-install.log; exit 1; }
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

unit: install
	$(BIN)/pytest -q

test: lint typecheck unit

bench: install
	@for b in benchmarks/*.py; do echo "== $$b"; $(BIN)/python $$b; done

clean:
	rm -rf build $(VENV) .mypy_cache .pytest_cache .ruff_cache
