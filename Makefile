# The two set-up commands (README): `make demo` and `make test`. Both install what they need.
VENV := .venv
BIN := $(VENV)/bin

.PHONY: deps demo test lint bench

deps:
	bash scripts/install-deps.sh

demo: deps
	$(BIN)/python -m slurm_ext.demo

# two workers, a test file each at a time: the live tests mostly wait on Slurm, and each
# worker starts its own session clusters on free loopback ports (README, Set-up)
test: deps
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

lint:
	$(BIN)/ruff check . && $(BIN)/ruff format --check .

# every product benchmark (benchmarks/run_all.py); `make bench BENCH=--quick` runs each at
# its smallest sizes, `make bench BENCH="bench_sim bench_writes"` only those
bench: deps
	$(BIN)/python -m benchmarks.run_all $(BENCH)
