"""sbatch templates for DL jobs: loading, typed variables, rendering."""
