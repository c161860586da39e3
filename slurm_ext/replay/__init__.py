"""`slurm-ext replay`: a trace replayed live on Slurm, time-compressed (docs/simulator.md)."""
