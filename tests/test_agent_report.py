"""Report format, signatures, secret file checks and delivery to a real loopback server."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from nodeagent.report import ReportError, ReportSender, post_reports
from slurm_ext.core.reports import (
    SIGNATURE_HEADER,
    JobReport,
    SecretFileError,
    decode_reports,
    encode_reports,
    read_secret,
    sign,
    verify,
)

SECRET = b"s3cret-shared"


def make_report(job_id: int = 42, node: str = "gpu01", **kw) -> JobReport:
    base = dict(
        node=node,
        job_id=job_id,
        gpu_seconds=120.0,
        gpu_util_mean=0.5,
        gpu_util_peak=0.9,
        gpu_mem_peak_bytes=2**30,
        cpu_cores_alloc=8,
        cpu_cores_used=3.5,
        gpu_energy_j=1000.0,
        cpu_energy_j=200.0,
        gpu_uuids=("GPU-a", "GPU-b"),
        gpu_type="NVIDIA H100 80GB HBM3",
        samples=24,
        period_start=1000.0,
        period_end=1060.0,
        final=False,
    )
    base.update(kw)
    return JobReport(**base)


def test_encode_decode_round_trip():
    reports = [make_report(1), make_report(2, cpu_cores_alloc=None, final=True)]
    assert decode_reports(encode_reports("gpu01", reports)) == reports


def test_encode_refuses_foreign_node():
    with pytest.raises(ValueError, match="names node"):
        encode_reports("gpu02", [make_report()])


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda d: d.update(version=9), "version"),
        (lambda d: d.pop("node"), "node name"),
        (lambda d: d["reports"][0].pop("gpu_seconds"), "missing"),
        (lambda d: d["reports"][0].update(extra=1), "unknown"),
        (lambda d: d["reports"][0].update(job_id="42"), "job_id: wrong type"),
        (lambda d: d["reports"][0].update(final=1), "final: wrong type"),
        (lambda d: d["reports"][0].update(samples=True), "samples: wrong type"),
        (lambda d: d["reports"][0].update(gpu_util_mean=1.5), "outside 0..1"),
        (lambda d: d["reports"][0].update(gpu_energy_j=-1), "negative"),
        (lambda d: d["reports"][0].update(node="other"), "differs"),
        (lambda d: d["reports"][0].update(period_end=1.0), "period_end before"),
        (lambda d: d.update(reports={}), "must be a list"),
    ],
)
def test_decode_rejects_malformed(mutate, message):
    doc = json.loads(encode_reports("gpu01", [make_report()]))
    mutate(doc)
    with pytest.raises(ValueError, match=message):
        decode_reports(json.dumps(doc).encode())


def test_decode_rejects_non_json():
    with pytest.raises(ValueError, match="not JSON"):
        decode_reports(b"\xff{")


def test_sign_and_verify():
    body = encode_reports("gpu01", [make_report()])
    sig = sign(body, SECRET)
    assert len(sig) == 64
    assert verify(body, SECRET, sig)
    assert not verify(body + b" ", SECRET, sig)
    assert not verify(body, b"other", sig)
    assert not verify(body, SECRET, None)
    assert not verify(body, SECRET, "")


def test_read_secret_permissions(tmp_path):
    p = tmp_path / "secret"
    p.write_bytes(b"  abc\n")
    os.chmod(p, 0o600)
    assert read_secret(p) == b"abc"
    os.chmod(p, 0o640)
    with pytest.raises(SecretFileError, match="0640.*group/other"):
        read_secret(p)
    os.chmod(p, 0o604)
    with pytest.raises(SecretFileError, match="group/other"):
        read_secret(p)
    with pytest.raises(SecretFileError, match="cannot stat"):
        read_secret(tmp_path / "absent")
    e = tmp_path / "empty"
    e.write_bytes(b"\n")
    os.chmod(e, 0o600)
    with pytest.raises(SecretFileError, match="empty"):
        read_secret(e)


class _Service:
    """A tiny real HTTP service on 127.0.0.1 that verifies signatures like the real one.

    `jobs`: keep only reports of these job ids. An agent reads every job cgroup of the
    machine, so one under test also reports the jobs that tests running beside it (another
    pytest worker) start."""

    def __init__(self, jobs: set[int] | None = None) -> None:
        self.jobs = jobs
        self.received: list[JobReport] = []
        self.refused = 0
        self.fail_with: int | None = None
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if self.path != "/v1/reports":
                    self.send_response(404)
                elif service.fail_with:
                    self.send_response(service.fail_with)
                elif not verify(body, SECRET, self.headers.get(SIGNATURE_HEADER)):
                    service.refused += 1
                    self.send_response(401)
                else:
                    try:
                        got = decode_reports(body)
                        keep = service.jobs
                        service.received.extend(r for r in got if keep is None or r.job_id in keep)
                        self.send_response(204)
                    except ValueError:
                        self.send_response(400)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def service():
    s = _Service()
    yield s
    s.close()


def test_post_reports_signed_and_refused(service):
    post_reports(service.url, "gpu01", [make_report(7)], SECRET, timeout=5)
    assert [r.job_id for r in service.received] == [7]
    with pytest.raises(ReportError, match="401") as info:
        post_reports(service.url, "gpu01", [make_report(8)], b"wrong", timeout=5)
    assert info.value.retriable
    assert service.refused == 1
    assert [r.job_id for r in service.received] == [7]


def test_sender_spools_while_down_then_delivers_in_order(service, tmp_path):
    service.fail_with = 503
    sender = ReportSender(
        service.url, "gpu01", SECRET, tmp_path / "spool", backoff_base_s=10, backoff_max_s=40
    )
    assert sender.send([make_report(1)], now=0.0) == 0
    assert sender.next_try == 10.0
    assert sender.send([make_report(2)], now=5.0) == 0  # still backing off: no attempt
    assert len(sender.pending()) == 2
    assert sender.flush(now=10.0) == 0  # second failure doubles the delay
    assert sender.next_try == 30.0
    service.fail_with = None
    assert sender.flush(now=29.0) == 0
    assert sender.flush(now=30.0) == 2
    assert [r.job_id for r in service.received] == [1, 2]
    assert sender.pending() == [] and sender.failures == 0


def test_sender_spool_survives_restart_and_is_bounded(service, tmp_path):
    service.fail_with = 503
    spool = tmp_path / "spool"
    first = ReportSender(service.url, "gpu01", SECRET, spool, max_spool_files=3)
    for job in range(1, 6):
        first.enqueue([make_report(job)])
    assert first.dropped_batches == 2
    service.fail_with = None
    second = ReportSender(service.url, "gpu01", SECRET, spool, max_spool_files=3)
    assert second.flush(now=0.0) == 3
    assert [r.job_id for r in service.received] == [3, 4, 5]


def test_sender_drops_batch_the_service_calls_malformed(service, tmp_path):
    service.fail_with = 400
    sender = ReportSender(service.url, "gpu01", SECRET, tmp_path / "spool")
    assert sender.send([make_report(1)], now=0.0) == 0
    assert sender.pending() == [] and sender.dropped_batches == 1


def test_sender_unreachable_service_backs_off(tmp_path):
    sender = ReportSender("http://127.0.0.1:9", "gpu01", SECRET, tmp_path / "s", timeout=2)
    assert sender.send([make_report(1)], now=100.0) == 0
    assert sender.failures == 1 and sender.next_try == 105.0
    assert len(sender.pending()) == 1
