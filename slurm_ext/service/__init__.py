"""The priority service: the pass loop beside slurmctld and what it writes, keeps and serves."""
