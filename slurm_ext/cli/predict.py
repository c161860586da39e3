"""`slurm-ext predict ...`: build the decision table, explain a row, dry-run the hook (slurm_ext.predict)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from slurm_ext.cli.options import json_option
from slurm_ext.cli.output import echo_json, echo_safe
from slurm_ext.core.config import ConfigError, load_config
from slurm_ext.core.resources import write_file
from slurm_ext.predict.cpu import (
    ANY_GPU,
    PredictorFile,
    decide_cpus,
    default_decision,
    with_elastic_keys,
)
from slurm_ext.predict.elastic import ElasticJob, allocate_elastic
from slurm_ext.predict.from_store import samples_from_store
from slurm_ext.predict.hook import render_hook
from slurm_ext.predict.rewrite import HookConfig, JobRequest, plan_rewrite
from slurm_ext.predict.samples import SampleError, load_samples
from slurm_ext.predict.table import TableError, evidence_path, load_table, write_table
from slurm_ext.store.db import StoreError


def _config(path: str | None) -> PredictorFile:
    try:
        return load_config(PredictorFile, path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from exc


def load_elastic(path: str) -> tuple[list[ElasticJob], dict[int, str]]:
    """Elastic workloads from JSON: [{"key", "min_gpus", "max_gpus", "throughput": [...]}, ...]."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise click.ClickException(f"{path}: cannot read elastic workloads: {exc}") from exc
    if not isinstance(data, list):
        raise click.ClickException(f"{path}: expected a JSON list of workloads")
    jobs, keys = [], {}
    for i, rec in enumerate(data):
        try:
            jobs.append(
                ElasticJob(
                    i,
                    int(rec["min_gpus"]),
                    int(rec["max_gpus"]),
                    tuple(float(t) for t in rec["throughput"]),
                )
            )
            keys[i] = str(rec["key"])
        except (KeyError, TypeError, ValueError) as exc:
            raise click.ClickException(f"{path}: workload [{i}]: {exc}") from exc
    return jobs, keys


@click.group()
def predict() -> None:
    """CPU-per-GPU and elastic-GPU predictions, and the submit hook's table."""


@predict.command()
@click.option(
    "--samples",
    "samples_path",
    type=click.Path(dir_okay=False),
    help="CpuSample JSON lines (or --from-store).",
)
@click.option(
    "--from-store",
    "store_path",
    type=click.Path(dir_okay=False),
    help="The service's store (SQLite, opened read-only): one sample per reported job.",
)
@click.option(
    "--out",
    "out",
    type=click.Path(dir_okay=False),
    help="Table to write atomically (default: the config's table_path).",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    help="predictor.toml (defaults if absent).",
)
@click.option(
    "--elastic",
    "elastic_path",
    type=click.Path(dir_okay=False),
    help="Elastic workloads JSON (with --free-gpus).",
)
@click.option(
    "--free-gpus", type=click.IntRange(min=0), default=0, help="GPUs free for elastic jobs now."
)
@json_option
def build(
    samples_path: str | None,
    store_path: str | None,
    out: str | None,
    config_path: str | None,
    elastic_path: str | None,
    free_gpus: int,
    as_json: bool,
) -> None:
    """Fit every workload's cores-per-GPU curve and write the table + evidence JSON."""
    if (samples_path is None) == (store_path is None):
        raise click.UsageError("give exactly one of --samples FILE.jsonl or --from-store STORE.db")
    file = _config(config_path)
    cfg = file.predictor
    out = out or cfg.table_path
    from_store = None
    if store_path is not None:
        try:
            from_store = samples_from_store(store_path, file.gpu_types)
        except StoreError as exc:
            raise click.ClickException(str(exc)) from exc
        samples = from_store.samples
    else:
        try:
            samples = load_samples(samples_path)
        except SampleError as exc:
            raise click.ClickException(str(exc)) from exc
    decisions = decide_cpus(samples, cfg)
    gpus: dict[str, int] = {}
    if elastic_path:
        jobs, keys = load_elastic(elastic_path)
        for job_id, n in allocate_elastic(jobs, free_gpus).items():
            gpus[keys[job_id]] = max(gpus.get(keys[job_id], 0), n)
        decisions = with_elastic_keys(decisions, gpus, cfg)
    try:
        write_table(out, decisions, gpus)
    except (TableError, OSError) as exc:
        raise click.ClickException(f"{out}: {exc}") from exc
    fitted = sum(d.source == "fit" for d in decisions)
    skipped = dict(sorted(from_store.skipped.items())) if from_store else {}
    unmapped = sorted(from_store.unmapped_gpu_types) if from_store else []
    if as_json:
        echo_json(
            {
                "table": str(out),
                "rows": len(decisions),
                "fitted": fitted,
                "samples": len(samples),
                "elastic_gpus": gpus,
                "skipped_jobs": skipped,
                "unmapped_gpu_types": unmapped,
            }
        )
        return
    click.echo(
        f"wrote {len(decisions)} rows ({fitted} fitted) from {len(samples)} samples to {out}"
    )
    for reason, n in skipped.items():
        click.echo(f"skipped {n} jobs: {reason}")
    for name in unmapped:
        click.echo(f"GPU name {name!r} has no [gpu_types] entry: its jobs count as untyped")


@predict.command()
@click.argument("key")
@click.option("--table", "table_path", required=True, type=click.Path(dir_okay=False))
@click.option("--config", "config_path", type=click.Path(dir_okay=False))
@json_option
def show(key: str, table_path: str, config_path: str | None, as_json: bool) -> None:
    """The decision for KEY (all GPU types) with its samples and fit."""
    table = load_table(table_path)
    if not table.valid:
        raise click.ClickException(
            f"{table_path}: table ignored by the hook: {'; '.join(table.problems)}"
        )
    rows = sorted(
        (r for r in table.rows.values() if r.key == key),
        key=lambda r: (r.gpu_type != ANY_GPU, r.gpu_type),
    )
    default = None if rows else default_decision(key, ANY_GPU, _config(config_path).predictor)
    try:
        evidence = json.loads(evidence_path(table_path).read_text()).get(key, {})
    except (OSError, json.JSONDecodeError, AttributeError):
        evidence = {}
    if as_json:
        echo_json(
            {
                "key": key,
                "in_table": bool(rows),
                "site_default_cpus_per_gpu": default.cpus_per_gpu if default else None,
                "rows": [
                    {
                        "gpu_type": r.gpu_type,
                        "cpus_per_gpu": r.cpus_per_gpu,
                        "gpus": r.gpus,
                        "evidence": evidence.get(r.gpu_type) or None,
                    }
                    for r in rows
                ],
            }
        )
        return
    if default is not None:
        click.echo(
            f"{key}: not in the table: the hook leaves its jobs unchanged "
            f"(site default {default.cpus_per_gpu} cores/GPU applies via Slurm's DefCpuPerGPU)"
        )
        return
    for row in rows:
        echo_safe(
            f"{key} gpu_type={row.gpu_type}: {row.cpus_per_gpu} cores/GPU"
            + (f", elastic GPUs {row.gpus}" if row.gpus else "")
        )
        ev = evidence.get(row.gpu_type)
        if not ev:
            echo_safe("  (no evidence recorded)")
            continue
        echo_safe(f"  source: {ev['source']}: {ev['reason']}")
        if ev.get("fit"):
            f = ev["fit"]
            echo_safe(
                f"  fit: {f['model']} plateau={f['plateau']:.3f} shape={f['shape']:.2f} rmse={f['rmse']:.4f} n={f['n']}"
            )
        if ev.get("samples"):
            pts = ", ".join(f"{c:g}:{u:.2f}" for c, u in ev["samples"])
            echo_safe(f"  samples (cores/GPU:util): {pts}")


@predict.command()
@click.option("--table", "table_path", required=True, type=click.Path(dir_okay=False))
@click.option(
    "--dry-run", is_flag=True, required=True, help="Only print the rewrite (the sole mode)."
)
@click.option("--respect-explicit-cpus/--override-explicit-cpus", default=True)
@click.option("--max-cpus-per-gpu", type=click.IntRange(0, 1024), default=0)
@click.option(
    "--gpus-per-node",
    type=click.IntRange(0, 1024),
    default=0,
    help="GPUs on the partition's nodes, as the hook's GPUS_PER_NODE (0: unknown).",
)
def apply(
    table_path: str,
    dry_run: bool,
    respect_explicit_cpus: bool,
    max_cpus_per_gpu: int,
    gpus_per_node: int,
) -> None:
    """Read a job (JSON, job_desc field names) on stdin; print what the hook would change."""
    try:
        job = JobRequest.from_json(json.loads(sys.stdin.read()))
    except (json.JSONDecodeError, ValueError) as exc:
        raise click.ClickException(f"stdin: {exc}") from exc
    rw = plan_rewrite(
        job,
        load_table(table_path),
        HookConfig(respect_explicit_cpus, max_cpus_per_gpu, gpus_per_node),
    )
    click.echo(
        json.dumps({"changes": rw.changes, "note": rw.note, "reason": rw.reason}, sort_keys=True)
    )


@predict.command()
@click.option("--workloads", "path", required=True, type=click.Path(dir_okay=False))
@click.option("--free-gpus", type=click.IntRange(min=0), required=True)
@json_option
def elastic(path: str, free_gpus: int, as_json: bool) -> None:
    """Split FREE_GPUS among elastic workloads by the DP allocator; print GPUs per key."""
    jobs, keys = load_elastic(path)
    shares = [(keys[job_id], n) for job_id, n in allocate_elastic(jobs, free_gpus).items()]
    if as_json:  # one entry per workload, in the file's order (a key may repeat)
        echo_json({"free_gpus": free_gpus, "workloads": [{"key": k, "gpus": n} for k, n in shares]})
        return
    for key, n in shares:
        click.echo(f"{key}\t{n}")


@predict.command("hook")
@click.argument("out", type=click.Path(dir_okay=False))
@click.option(
    "--table",
    "table_path",
    required=True,
    help="Absolute path of the predictor table the hook reads (it may not exist yet).",
)
@click.option("--respect-explicit-cpus/--override-explicit-cpus", default=True)
@click.option("--max-cpus-per-gpu", type=click.IntRange(0, 1024), default=0)
@click.option(
    "--gpus-per-node",
    type=click.IntRange(0, 1024),
    default=0,
    help="GPUs on the partition's nodes, as the hook's GPUS_PER_NODE (0: unknown).",
)
@click.option("--force", is_flag=True, help="Replace OUT if it exists.")
def hook(
    out: str,
    table_path: str,
    respect_explicit_cpus: bool,
    max_cpus_per_gpu: int,
    gpus_per_node: int,
    force: bool,
) -> None:
    """Write the submit hook (job_submit.lua) with its settings to OUT ('-': stdout)."""
    try:
        text = render_hook(table_path, respect_explicit_cpus, max_cpus_per_gpu, gpus_per_node)
        if out == "-":
            click.echo(text, nl=False)
            return
        write_file(out, text, force=force)
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"wrote {out} (table {table_path}, gpus_per_node {gpus_per_node})", err=True)
