"""The service's opportunistic requeue rule (slurm_ext/service/opportunistic_requeue.py): which
jobs it picks from Slurm's view and the agents' reports, that it picks what the simulator
picks, the paused-since field on the wire and in the store, and a live requeue."""

from __future__ import annotations

import math
import time

import pytest
from conftest import wait_for

from nodeagent.accounts import JobAccount
from slurm_ext.core.config import ConfigError, load_config
from slurm_ext.core.model import Job, JobClasses, JobState
from slurm_ext.core.reports import JobReport, decode_reports, encode_reports
from slurm_ext.policy import PolicyConfig, overdue
from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.service.opportunistic_requeue import OpportunisticSection, overdue_jobs, paused_for
from slurm_ext.sim.coloc import ShareConfig, SharingSimulator
from slurm_ext.sim.engine import SimConfig
from slurm_ext.sim.sharing import JobProfile
from slurm_ext.sim.traces import TraceJob
from slurm_ext.store.db import Store

ON = OpportunisticSection(max_pause_s=300.0)
CLASSES = JobClasses()  # the defaults: QOS "opportunistic" and "scavenger"


def job(job_id: int, **kw) -> Job:
    base = dict(
        job_id=job_id,
        state=JobState.RUNNING,
        qos="opportunistic",
        partition="gpu",
        requeue=True,
        nodes=("n1",),
        start_time=1000.0,
    )
    base.update(kw)
    return Job(**base)


def report(job_id: int, end: float, paused: float | None, node: str = "n1", **kw) -> JobReport:
    base = dict(
        node=node,
        job_id=job_id,
        gpu_seconds=1.0,
        gpu_util_mean=0.0,
        gpu_util_peak=0.5,
        gpu_mem_peak_bytes=0,
        cpu_cores_alloc=None,
        cpu_cores_used=0.0,
        gpu_energy_j=0.0,
        cpu_energy_j=0.0,
        gpu_uuids=("GPU-0",),
        gpu_type="",
        samples=3,
        period_start=1000.0,
        period_end=end,
        paused_since=paused,
    )
    base.update(kw)
    return JobReport(**base)


def test_only_running_opted_in_opportunistic_jobs_paused_long_enough_by_fresh_reports():
    now = 2000.0
    jobs = [
        job(1),  # paused 400 s: goes
        job(2),  # paused 200 s: stays
        job(3, qos="normal"),  # guaranteed by its QOS: never, whatever the agent says
        job(4, requeue=False),  # not opted in
        job(5, state=JobState.PENDING),
        job(6),  # its report is stale: it may have resumed
        job(7, start_time=1900.0),  # report from the stint before a requeue
        job(8),  # final report: it left the node
        job(9),  # reported by a node it does not run on
        job(10, nodes=("n1", "n2")),  # paused on one of its two nodes
        job(11, qos="", partition="scavenge"),  # opportunistic by partition
        job(12),  # running, not paused
        job(13),  # its node's clock is 20 min ahead: not believed
        job(14, start_time=1500.0),  # a report begun 500 s before this stint: the last one's
        job(15),  # its agent restarted (and thawed it): the new period says running
        job(16, qos="gold", partition="scavenge"),  # a guaranteed QOS outranks the partition
    ]
    reps = {
        1: [report(1, 1990.0, 1590.0)],
        2: [report(2, 1990.0, 1790.0)],
        3: [report(3, 1990.0, 1000.0)],
        4: [report(4, 1990.0, 1000.0)],
        5: [report(5, 1990.0, 1000.0)],
        6: [report(6, 1600.0, 1100.0)],
        7: [report(7, 1800.0, 1100.0)],
        8: [report(8, 1990.0, 1000.0, final=True)],
        9: [report(9, 1990.0, 1000.0, node="n7")],
        10: [report(10, 1990.0, None), report(10, 1990.0, 1600.0, node="n2")],
        11: [report(11, 1990.0, 1600.0)],
        12: [report(12, 1990.0, None)],
        13: [report(13, 3200.0, 1000.0)],
        14: [report(14, 1990.0, 1100.0, period_start=1000.0)],
        15: [report(15, 1900.0, 1400.0), report(15, 1990.0, None, period_start=1950.0)],
        16: [report(16, 1990.0, 1000.0)],
    }
    cfg = OpportunisticSection(max_pause_s=300.0)
    classes = JobClasses(opportunistic_partitions=("scavenge",), guaranteed_qos=("gold",))
    assert overdue_jobs(jobs, lambda j: reps[j], now, cfg, classes) == [1, 10, 11]
    # measured on the agent's clock: a report 10 s old says 400 s, not 410
    assert paused_for(jobs[0], reps[1], now, cfg) == 400.0
    off = OpportunisticSection()
    assert overdue_jobs(jobs, lambda j: reps[j], now, off, classes) == []
    longer = OpportunisticSection(max_pause_s=450)
    assert overdue_jobs(jobs, lambda j: reps[j], now, longer, classes) == []


def test_the_service_picks_what_the_simulator_requeues():
    """The simulator's requeue (sharing sim, 300 s bound): at each requeue, the service's
    rule on the same snapshot - each paused job running on its node, an agent report at
    that moment - picks exactly the job the simulator requeued, and a second earlier
    nothing."""
    trace = [
        TraceJob(1, 1, 0.0, 5000.0, model_tag="a", time_limit_s=7200.0),
        TraceJob(3, 1, 0.0, 500.0, model_tag="c", time_limit_s=600.0),
        TraceJob(2, 1, 10.0, 1000.0, model_tag="b", opportunistic=True, time_limit_s=3000.0),
        TraceJob(4, 1, 20.0, 1000.0, model_tag="d", opportunistic=True, time_limit_s=3000.0),
    ]
    prof = {t.job_id: JobProfile(0.99, 0.1) for t in trace}
    seen: list[tuple[float, int, dict[int, float], dict[int, str]]] = []

    class Recording(SharingSimulator):
        def _requeue_paused(self, j, now):
            nodes = {o.id: self.shares.placed[o][0][0] for o in self.on_shards}
            seen.append((now, j.id, dict(self.shares.paused_since), nodes))
            super()._requeue_paused(j, now)

    cluster = SimConfig(nodes=1, gpus_per_node=2, preemptive=False)
    sim = Recording(
        trace, PolicyConfig(policy="fifo"), cluster, ShareConfig(max_pause_s=300.0), prof
    )
    sim.run()
    assert seen and sim.opp_requeues == len(seen)
    for now, chosen, since, nodes in seen:
        assert overdue(since, now, 300.0) == [chosen]
        jobs = [job(j, nodes=(nodes[j],), start_time=since[j]) for j in since]
        for t, want in ((now, [chosen]), (now - 1.0, [])):
            reps = {
                j: [report(j, t, since[j], node=nodes[j], period_start=since[j])] for j in since
            }
            assert overdue_jobs(jobs, lambda j, r=reps: r[j], t, ON, CLASSES) == want


def test_paused_since_on_the_wire_is_checked_and_optional():
    paused = report(5, 1060.0, 1030.0)
    assert decode_reports(encode_reports("n1", [paused])) == [paused]
    running = report(5, 1060.0, None)
    body = encode_reports("n1", [running])
    assert b"paused_since" not in body  # what an older service reads
    assert decode_reports(body) == [running]
    for bad, why in (
        (b'"paused_since":999.0', "outside period_start..period_end"),
        (b'"paused_since":1061', "outside period_start..period_end"),
        (b'"paused_since":"1030"', "wrong type str"),
        (b'"paused_since":NaN', "not finite"),
        (b'"paused_since":true', "wrong type bool"),
    ):
        hostile = body.replace(b'"period_end"', bad + b',"period_end"')
        with pytest.raises(ValueError, match=why):
            decode_reports(hostile)


def test_store_keeps_paused_since_and_reads_old_rows(tmp_path):
    store = Store(tmp_path / "s.db")
    store.add_reports([report(5, 1060.0, 1030.0), report(6, 1060.0, None)])
    store.db.execute(  # a row an older service wrote: no paused_since in the payload
        "UPDATE job_reports SET payload = json_remove(payload, '$.paused_since') WHERE job_id=6"
    )
    assert [r.paused_since for r in store.reports()] == [1030.0, None]


def test_agent_account_reports_its_pause_within_the_period():
    a = JobAccount(job_id=5, first_seen=1000.0, last_seen=1060.0, paused_since=1030.0)
    assert a.report("n1", final=False).paused_since == 1030.0
    a.paused_since = 1070.0  # stamped after the last sample: clamped into the period
    r = a.report("n1", final=False)
    assert r.paused_since == 1060.0 and decode_reports(encode_reports("n1", [r])) == [r]
    a.paused_since = None
    assert a.report("n1", final=False).paused_since is None


def test_config_section_defaults_off_and_refuses_bad_values(tmp_path):
    assert ServiceConfig().opportunistic.max_pause_s == 0.0
    for text, key in (
        ("max_pause_s = -1.0", "max_pause_s"),
        ("max_per_pass = 0", "max_per_pass"),
        ("report_max_age_s = 0.0", "report_max_age_s"),
        ("max_pause_s = nan", "max_pause_s"),
    ):
        path = tmp_path / "service.toml"
        path.write_text(f"[opportunistic]\n{text}\n")
        with pytest.raises(ConfigError, match=key):
            load_config(ServiceConfig, path)
    assert not math.isnan(ServiceConfig().opportunistic.report_max_age_s)


# ---- live: a real slurmctld -----------------------------------------------------------


@pytest.mark.slurm
def test_service_requeues_a_job_reported_paused_too_long(live, tmp_path):
    """Two running jobs, both reported paused since they started (3 s and more) by their
    node's agent, once per Slurm release and backend: with a 2 s bound the opportunistic
    one that opted in is requeued (Restarts=1); the one that did not opt in is not, nor is
    the first under rules that make every job guaranteed, or under a 900 s bound."""
    c, client = live
    opted = c.sbatch("-N1", "--gres=gpu:1", "--requeue", "-J", "opp")
    plain = c.sbatch("-N1", "--gres=gpu:1", "--no-requeue", "-J", "opp-noreq")

    def running() -> dict[int, Job]:
        return {j.job_id: j for j in client.jobs() if j.state == JobState.RUNNING}

    wait_for(lambda: {opted, plain} <= running().keys(), what="jobs running")
    jobs = running()

    def pass_with(store: Store, max_pause_s: float, partitions: tuple[str, ...]) -> list[int]:
        cfg = ServiceConfig(
            store=str(tmp_path / "service.db"),
            port=0,
            history_source="store",
            opportunistic=OpportunisticSection(max_pause_s=max_pause_s),
        )
        classes = JobClasses(opportunistic_qos=(), opportunistic_partitions=partitions)
        return Service(cfg, client, store, classes=classes).run_pass().requeued

    store = Store(tmp_path / "service.db")
    started = max(jobs[j].start_time or 0.0 for j in (opted, plain))
    time.sleep(max(0.0, started + 3.0 - time.time()))
    now = time.time()
    store.add_reports(
        [
            report(j, now, s, node=jobs[j].nodes[0], period_start=s)
            for j in (opted, plain)
            for s in [jobs[j].start_time or now - 3.0]
        ]
    )
    part = jobs[opted].partition
    # every job guaranteed (no opportunistic QOS or partition): nobody goes
    assert pass_with(store, 2.0, ()) == []
    # a bound longer than the pause: nobody goes
    assert pass_with(store, 900.0, (part,)) == []
    assert pass_with(store, 2.0, (part,)) == [opted]
    show = c.run("scontrol", "show", "job", str(opted))
    assert "Restarts=1" in show, show
    assert "Restarts=0" in c.run("scontrol", "show", "job", str(plain))
    assert plain in running()
    # requeued: pending (or running again, a new stint); the old report no longer counts
    assert pass_with(store, 2.0, (part,)) == []


@pytest.mark.slurm
def test_serve_requeues_on_a_signed_agent_report(clean_queue, tmp_path):
    """End to end: `slurm-ext serve` with `[opportunistic] max_pause_s = 2`; a signed
    report over HTTP, as an agent sends it, says the job on its node has been paused for
    3 s; the service's next pass requeues it and logs so."""
    import os
    import socket

    from test_service_live import _post, start_service, stop, write_config

    from slurm_ext.core.reports import sign
    from slurm_ext.slurm.cli_backend import CliSlurmClient

    c = clean_queue
    secret = tmp_path / "secret"
    secret.write_bytes(os.urandom(32).hex().encode())
    secret.chmod(0o600)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    part = c.partition
    classes = tmp_path / "classes.toml"
    classes.write_text(f'opportunistic_qos = []\nopportunistic_partitions = ["{part}"]\n')
    config = write_config(
        tmp_path / "service.toml",
        c,
        port=port,
        report_secret_file=f'"{secret}"',
        classes_file=f'"{classes}"',
    )
    with config.open("a") as fh:
        fh.write("[opportunistic]\nmax_pause_s = 2.0\n")
    opp = c.sbatch("-N1", "--gres=gpu:1", "--requeue", "-J", "opp")
    client = CliSlurmClient(slurm_conf=str(c.conf_path), timeout=20, bin_dir=c.bin_dir)
    job = wait_for(
        lambda: next((j for j in client.jobs() if j.job_id == opp and j.running), None),
        what="job running",
    )
    log = tmp_path / "service.log"
    proc = start_service(config, log)
    try:
        time.sleep(max(0.0, (job.start_time or 0.0) + 3.5 - time.time()))
        now = time.time()
        body = encode_reports(
            job.nodes[0], [report(opp, now, now - 3.0, node=job.nodes[0], period_start=now - 3.0)]
        )
        url = f"http://127.0.0.1:{port}/v1/reports"
        wait_for(
            lambda: _post(url, body, sign(body, secret.read_bytes().strip())) == 200,
            what="report accepted",
        )
        wait_for(
            lambda: "Restarts=1" in c.run("scontrol", "show", "job", str(opp)),
            what="job requeued by the service",
        )
    finally:
        stop(proc)
    assert f"requeued opportunistic job {opp}" in log.read_text()
