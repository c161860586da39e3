"""Tables and plots of simulation results (plain text; matplotlib only when plotting)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from slurm_ext.sim.simjob import SimJob

COLUMNS = (
    ("policy", "policy", "{}"),
    ("avg JCT s", "avg_jct_s", "{:.0f}"),
    ("vs Slurm", "vs_slurm", "{:.3f}"),
    ("vs FIFO", "vs_fifo", "{:.3f}"),
    ("vs SRTF", "vs_srtf", "{:.3f}"),
    ("median s", "median_jct_s", "{:.0f}"),
    ("p95 s", "p95_jct_s", "{:.0f}"),
    ("p99 s", "p99_jct_s", "{:.0f}"),
    ("avg queue s", "avg_queue_s", "{:.0f}"),
    ("GPU util", "gpu_utilization", "{:.3f}"),
    ("preempt", "preemptions", "{}"),
    ("timeouts", "timeouts", "{}"),
    ("runtime s", "runtime_s", "{:.2f}"),
)


def table(
    rows: Sequence[dict], markdown: bool = False, columns: Sequence[tuple[str, str, str]] = COLUMNS
) -> str:
    """Rows as a table; `columns` are (heading, row key, format) triples."""
    head = [h for h, _, _ in columns]
    body = [[fmt.format(r[k]) if k in r else "-" for _, k, fmt in columns] for r in rows]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join(lines + ["| " + " | ".join(b) + " |" for b in body])
    widths = [max(len(x) for x in col) for col in zip(head, *body, strict=True)]
    fmt_row = "  ".join("{:>" + str(w) + "}" for w in widths).format
    return "\n".join([fmt_row(*head)] + [fmt_row(*b) for b in body])


def plot_cdf(runs: dict[str, Sequence[SimJob]], path: str | Path) -> None:
    """Write a JCT CDF (log x) per policy to a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, jobs in runs.items():
        jct = sorted(j.finish - j.submit for j in jobs if j.finish is not None)
        n = len(jct)
        ax.step(jct, [(i + 1) / n for i in range(n)], where="post", label=name)
    ax.set_xscale("log")
    ax.xaxis.set_minor_formatter(NullFormatter())  # labelled minor ticks overlap on short ranges
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of jobs")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
