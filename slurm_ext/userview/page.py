"""The user view's one HTML page: the queue as the service ranks it, each job's reasons,
free GPUs and fragmentation. Self-contained (inline CSS, no script, no external asset),
so it works behind any firewall and the listener can forbid everything else (CSP).

Every value from the store (user names, Slurm's reasons) is escaped: a job's name or
comment never reaches this page, but a user name or reason string might carry markup.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from html import escape

from slurm_ext.core.durations import duration
from slurm_ext.policy import reason_words
from slurm_ext.userview.rows import FreeGpus

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#1d1d1f;background:#fff}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
.meta{color:#555;margin:0 0 1em}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:.25em .6em;border-bottom:1px solid #ddd;vertical-align:top}
th{background:#f2f2f5;font-weight:600}td.n{text-align:right;font-variant-numeric:tabular-nums}
tr.RUNNING td:first-child{border-left:4px solid #2e8b57}
tr.PENDING td:first-child{border-left:4px solid #d08c00}
tr:target{background:#fff6d5}
.cards{display:flex;gap:1em;flex-wrap:wrap}
.card{border:1px solid #ddd;border-radius:6px;padding:.5em 1em;min-width:9em}
.card b{display:block;font-size:1.5em}
td small{color:#444}table.nodes{width:auto}
.promoted{color:#b3261e;font-weight:600}
"""


def _card(title: str, value: str, note: str = "") -> str:
    small = f"<br><small>{escape(note)}</small>" if note else ""
    return f'<div class="card">{escape(title)}<b>{escape(value)}</b>{small}</div>'


def _pool_lines(pools: Sequence[dict]) -> str:
    """Free and fragmented GPUs per partition and GPU type, one line each."""
    lines = "".join(
        f"<li>{escape(p['partition'] or '-')} / {escape(p['gpu_type'] or 'untyped')}: "
        f"{p['free']} free, {p['stranded']} on nodes that cannot take the widest job "
        f"waiting there ({p['widest_waiting']} GPUs)</li>"
        for p in pools
    )
    return f'<ul class="meta">{lines}</ul>'


def _reasons(r: dict) -> str:
    """Slurm's reason, then the service's: its queue, its index and the index's group."""
    why = [escape(r["policy_reason"])] if r["policy_reason"] else []  # names the group
    if r["value_set"] is not None:
        mode = escape((r["mode"] or "value").replace("_", " "))
        why.append(f"{mode} set to {r['value_set']}")
    words = ""
    if r["state"] == "PENDING" and r["reason"]:  # Slurm's reason in words
        words = f" ({escape(reason_words(r['reason']))})"
    return f"<b>{escape(r['reason'] or '-')}</b>{words}<br><small>{'; '.join(why)}</small>"


def _job_row(r: dict) -> str:
    state = escape(r["state"])
    promoted = ' <span class="promoted">promoted</span>' if r["promoted"] else ""
    # no history group: the order is 2D-LAS (or another policy's), not a Gittins index
    gittins = "-" if r["gittins"] is None or not r["group"] else f"{r['gittins']:.3g}"
    return (
        f'<tr id="job-{r["job_id"]}" class="{state}">'
        f'<td class="n">{"-" if r["rank"] is None else r["rank"]}</td>'
        f'<td class="n"><a href="#job-{r["job_id"]}">{r["job_id"]}</a></td>'
        f"<td>{escape(r['user'] or '-')}</td><td>{state}{promoted}</td>"
        f'<td class="n">{r["gpus"]}</td><td class="n">{"-" if r["queue"] is None else r["queue"]}</td>'
        f'<td class="n">{gittins}</td><td>{escape(r["group"] or "-")}</td>'
        f'<td class="n">{duration(r["attained_gpu_s"])}</td>'
        f'<td class="n">{"-" if r["wait_s"] is None else duration(r["wait_s"])}</td>'
        f"<td>{_reasons(r)}</td></tr>"
    )


def render_page(
    rows: Sequence[dict],
    nodes: Sequence[dict],
    free: FreeGpus,
    last: dict | None,
    as_of: float,
    max_rows: int,
    privacy: str,
    pools: Sequence[dict] = (),
) -> bytes:
    """The whole page as UTF-8 bytes; at most `max_rows` jobs (the JSON has them all).
    pools: `rows.free_gpus_by_pool`, shown as one line each when there are several."""
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(as_of))
    waiting = sum(1 for r in rows if r["state"] == "PENDING")
    running = sum(1 for r in rows if r["state"] == "RUNNING")
    if last:
        pass_note = f"last pass {max(0.0, as_of - last['started_at']):.0f} s before this page"
    else:
        pass_note = "no pass yet"
    cards = "".join(
        [
            _card("Waiting jobs", str(waiting)),
            _card("Running jobs", str(running)),
            _card(
                "Free GPUs", str(free.free), f"on {sum(1 for n in nodes if n['gpus_free'])} nodes"
            ),
            _card(
                "Fragmented",
                f"{free.stranded} GPUs",
                f"free on nodes that cannot take the widest waiting job ({free.widest_waiting} GPUs)"
                if free.widest_waiting
                else "no job waits",
            ),
        ]
    )
    head = (
        "<tr><th>rank</th><th>job</th><th>user</th><th>state</th><th>GPUs</th><th>queue</th>"
        "<th>Gittins</th><th>index group</th><th>GPU-time attained</th><th>waited</th>"
        "<th>why (Slurm; the service)</th></tr>"
    )
    body = "".join(_job_row(r) for r in rows[:max_rows])
    more = (
        f'<p class="meta">{len(rows) - max_rows} more jobs: /v1/queue lists them all.</p>'
        if len(rows) > max_rows
        else ""
    )
    node_head = (
        "<tr><th>node</th><th>partitions</th><th>GPU type</th><th>state</th><th>GPUs</th>"
        "<th>used</th><th>free</th></tr>"
    )
    node_body = "".join(
        f"<tr><td>{escape(n['node'])}</td><td>{escape(n.get('partitions') or '-')}</td>"
        f"<td>{escape(n['gpu_type'] or '-')}</td><td>{escape(n['state'])}</td>"
        f'<td class="n">{n["gpus"]}</td><td class="n">{n["gpus_used"]}</td>'
        f'<td class="n">{n["gpus_free"]}</td></tr>'
        for n in nodes
    )
    pool_note = _pool_lines(pools) if len(pools) > 1 else ""
    privacy_note = (
        " User names, job names and accounts are hidden on this site."
        if privacy == "anonymous"
        else ""
    )
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>slurm-ext: why is my job waiting?</title><style>{CSS}</style></head>
<body><h1>Why is my job waiting?</h1>
<p class="meta">The queue as the slurm-ext service ranks it, as of {escape(when)}
({escape(pass_note)}). Jobs that have used the least GPU time so far go first: see
"Why is my job waiting?" in the user guide.{privacy_note} Find your job: /#job-ID.</p>
<div class="cards">{cards}</div>
<h2>Queue</h2><table>{head}{body}</table>{more}
<h2>Nodes</h2>{pool_note}<table class="nodes">{node_head}{node_body}</table>
</body></html>
"""
    return page.encode()
