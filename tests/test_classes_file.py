"""The co-location classes come from one file that the node agents and the service both
read (slurm_ext.core.classes): the same lists in both daemons, from the file each
config names, and an error naming the file and the key on bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.agent import Agent
from nodeagent.config import AgentConfig
from nodeagent.gpu import SimulatedGpuReader
from slurm_ext.core.classes import load_classes
from slurm_ext.core.config import ConfigError, load_config
from slurm_ext.core.model import GUARANTEED, OPPORTUNISTIC, Job, JobClasses, JobState, Node
from slurm_ext.policy import classify
from slurm_ext.service.loop import Service, ServiceConfig
from slurm_ext.service.opportunistic_requeue import eligible
from slurm_ext.store.db import Store
from slurm_ext.testing.snapshot_client import ReplayClient

REPO = Path(__file__).resolve().parents[1]
CLASSES = (
    'opportunistic_qos = ["spot"]\nguaranteed_qos = ["gold"]\n'
    'opportunistic_partitions = ["shared"]\nguaranteed_partitions = ["train"]\n'
    'default_class = "opportunistic"\n'
)
JOBS = [  # (qos, partition): QOS first, then partition, then the default
    ("spot", "train"), ("gold", "shared"), ("normal", "shared"), ("normal", "train"),
    ("normal", "gpu"), (None, "train,shared"), ("", ""),
]  # fmt: skip


def test_the_service_and_the_agent_read_the_same_lists_from_one_file(tmp_path):
    classes = tmp_path / "classes.toml"
    classes.write_text(CLASSES)
    service = tmp_path / "service.toml"
    service.write_text(f'classes_file = "{classes}"\nstore = "{tmp_path / "s.db"}"\nport = 0\n')
    agent = tmp_path / "agent.toml"
    agent.write_text(f'classes_file = "{classes}"\nstate_file = ""\nnode_name = "n1"\n')
    scfg, acfg = load_config(ServiceConfig, service), load_config(AgentConfig, agent)
    store = Store(tmp_path / "s.db")
    svc = Service(scfg, ReplayClient([], [Node("n1", gpus=1)]), store)
    node = Agent(acfg, SimulatedGpuReader(1), None)
    want = JobClasses(("spot",), ("gold",), ("shared",), ("train",), OPPORTUNISTIC)
    assert svc.classes == node.coloc.classes == load_classes(str(classes)) == want
    got = [classify(q, p, svc.classes) for q, p in JOBS]
    assert got == [classify(q, p, node.coloc.classes) for q, p in JOBS]
    assert got == [OPPORTUNISTIC, GUARANTEED, OPPORTUNISTIC, GUARANTEED] + [OPPORTUNISTIC] * 3
    # what the service would requeue follows the same file
    running = Job(job_id=1, state=JobState.RUNNING, qos="normal", partition="gpu", requeue=True)
    assert eligible(running, svc.classes)
    assert not eligible(running, JobClasses())  # the defaults: guaranteed
    store.close()


def test_without_a_file_both_take_the_shipped_defaults(tmp_path):
    shipped = load_classes(str(REPO / "etc" / "classes.toml"))
    assert shipped == JobClasses()
    assert AgentConfig().classes_file == ServiceConfig().classes_file == ""
    if not Path("/etc/slurm-ext/classes.toml").exists():
        assert load_classes("") == JobClasses()


@pytest.mark.parametrize(
    ("text", "key", "message"),
    [
        ('opportunistic_qos = "spot"\n', "opportunistic_qos", "expected a list"),
        ("guaranteed_qos = [1]\n", "guaranteed_qos[0]", "expected a string"),
        ('default_class = "vip"\n', "default_class", "must be one of"),
        ('opportunistic_partition = ["x"]\n', "opportunistic_partition", "unknown key"),
        ('opportunistic_qos = ["a"]\nguaranteed_qos = ["a"]\n', "", "both list a"),
    ],
)
def test_a_bad_classes_file_is_an_error_naming_the_file_and_the_key(text, key, message, tmp_path):
    path = tmp_path / "classes.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_classes(str(path))
    assert err.value.path == str(path) and err.value.key == key
    assert message in str(err.value)
    with pytest.raises(ConfigError, match="file not found"):
        load_classes(str(tmp_path / "missing.toml"))  # a file that is named must exist


def test_the_service_exits_2_naming_the_classes_file_and_key(tmp_path):
    classes = tmp_path / "classes.toml"
    classes.write_text('default_class = "vip"\n')
    service = tmp_path / "service.toml"
    service.write_text(f'classes_file = "{classes}"\nstore = "{tmp_path / "s.db"}"\nport = 0\n')
    r = subprocess.run(
        [sys.executable, "-m", "slurm_ext.cli", "serve", "--once", "--config", str(service)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and f"{classes}: default_class: must be one of" in r.stderr
