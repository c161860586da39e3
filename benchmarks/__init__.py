"""Product benchmarks, run as modules from the repository root: `python -m benchmarks.bench_sim`,
all of them with `make bench` (run_all.py). Studies that check published figures are in
benchmarks/studies/. Not part of the installed package."""
