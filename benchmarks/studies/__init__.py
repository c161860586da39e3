"""Studies behind published figures (docs/benchmarks.md), run as modules from the repository
root: `python -m benchmarks.studies.targets`. README.md says what each answers."""
