"""The service's placement pin on a real slurmctld cannot resize a job Slurm has started.

`scontrol update ReqNodeList=` on a running job sets that job's nodes (slurmctld reads it
as a resize: it shrank the two-node job below to one on 22.05), and the live placement
replay saw pins arrive just after Slurm had started the job. The service pins by
excluding every other node instead, which slurmctld refuses for a job that is no longer
pending (src/slurmctld/job_mgr.c, ESLURM_JOB_NOT_PENDING): the pin lands on a waiting job
and nowhere else."""

from __future__ import annotations

import pytest
from conftest import wait_for
from test_service_live import squeue

from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.slurm.client import SlurmError
from slurm_ext.store.db import Store

pytestmark = pytest.mark.slurm


def _show(c, job: int) -> str:
    return c.run("scontrol", "show", "job", str(job))


def _service(client, tmp_path) -> Service:
    return Service(ServiceConfig(placement=True), client, Store(tmp_path / "s.db"))


def test_a_pin_reaches_a_waiting_job_and_is_refused_for_a_running_one(live, tmp_path):
    c, client = live
    svc = _service(client, tmp_path)
    names = [n.name for n in client.nodes()]
    running = c.sbatch("-N2", "--gres=gpu:1", "-J", "two")  # on two nodes
    wait_for(lambda: squeue(c)[running][0] == "RUNNING", what="two-node job running")
    before = _show(c, running)
    on = next(j for j in client.jobs() if j.job_id == running).nodes
    assert len(on) == 2
    one = on[0]  # a pin on one of its nodes: ReqNodeList alone would shrink it to that node
    with pytest.raises(SlurmError):
        svc.writes.set_placement(running, (one,), names)
    after = _show(c, running)
    assert next(j for j in client.jobs() if j.job_id == running).nodes == on
    assert "NumNodes=2" in after and "JobState=RUNNING" in after
    assert before.count("NodeList=") == after.count("NodeList=")

    waiting = c.sbatch("--gpus=1", "--begin=now+60", "-J", "wait")  # pending, not held
    svc.writes.set_placement(waiting, (names[-1],), names)
    excluded = next(j for j in client.jobs() if j.job_id == waiting).excluded_nodes
    assert sorted(excluded) == sorted(names[:-1])  # every node but the pinned one
    svc.writes.set_placement(waiting, None, names)  # the service's pin lifted
    assert next(j for j in client.jobs() if j.job_id == waiting).excluded_nodes == ()
    svc.store.close()
