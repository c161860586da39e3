# The two set-up commands (README): `make demo` and `make test`. Both install what they need.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: deps demo test lint bench

deps:
	bash scripts/install-deps.sh

demo: deps
	$(BIN)/python -m slurm_ext.demo

test: deps
	$(BIN)/python -m pytest -q

lint:
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

bench: deps
	$(BIN)/python benchmarks/run_all.py
