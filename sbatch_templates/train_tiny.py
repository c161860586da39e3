"""A tiny PyTorch training job for the slurm-ext sbatch templates.

A two-layer MLP learns a fixed linear map on synthetic data. It runs on the GPU when one
is visible and on the CPU otherwise, as one process or under torchrun (DDP: gloo on the
CPU, nccl on GPUs). With --checkpoint-dir it saves a checkpoint after every epoch and
resumes from the newest one; with --requeue-on-usr1 a SIGUSR1 (sbatch --signal=B:USR1@N,
forwarded by the template) makes it checkpoint, run `scontrol requeue $SLURM_JOB_ID` and exit.
With SLURM_EXT_PROGRESS_FILE set, local rank 0 appends "<unix time> <steps done>" to that
file about once a second; the node agent reads it to protect a guaranteed job's speed.

The last line it prints is `SLURM_EXT_TRAIN_DONE {json}` (rank 0), which the tests read.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

IN_FEATURES = 16


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--steps-per-epoch", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=32, help="per process")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--epoch-seconds", type=float, default=0.0, help="extra sleep per epoch")
    p.add_argument("--checkpoint-dir", type=Path, default=None)
    p.add_argument("--requeue-on-usr1", action="store_true")
    p.add_argument("--gpu-mem-fraction", type=float, default=1.0, help="cap on this GPU's memory")
    p.add_argument(
        "--progress-interval", type=float, default=1.0, help="seconds between progress lines"
    )
    return p.parse_args(argv)


class Usr1Flag:
    """Set by SIGUSR1; the training loop checks it between steps."""

    def __init__(self) -> None:
        self.raised = False

    def __call__(self, signum: int, frame: object) -> None:
        self.raised = True


class ProgressLog:
    """Appends "<unix time> <steps done>" lines to $SLURM_EXT_PROGRESS_FILE, at most one per
    `interval` seconds. A file that cannot be written turns it off (with one message):
    progress reporting must never stop the training."""

    def __init__(self, path: str | None, interval: float) -> None:
        self.interval = interval
        self.last = -1e18
        self.file = None
        if path:
            try:
                self.file = open(path, "a", encoding="utf-8")  # closed in close()
            except OSError as exc:
                print(f"progress file {path}: {exc}; not reporting progress", flush=True)

    def step(self, done: int, force: bool = False) -> None:
        now = time.time()
        if self.file is None or (not force and now - self.last < self.interval):
            return
        try:
            self.file.write(f"{now:.3f} {done}\n")
            self.file.flush()
        except OSError as exc:
            print(f"progress file: {exc}; not reporting progress", flush=True)
            self.close()
            return
        self.last = now

    def close(self) -> None:
        if self.file is not None:
            try:
                self.file.close()
            except OSError:
                pass
            self.file = None


def latest_checkpoint(ckpt_dir: Path | None) -> Path | None:
    if ckpt_dir is None or not ckpt_dir.is_dir():
        return None
    found = sorted(ckpt_dir.glob("epoch-*.pt"))
    return found[-1] if found else None


def save_checkpoint(
    ckpt_dir: Path, epoch: int, model: nn.Module, opt: torch.optim.Optimizer
) -> Path:
    """Write atomically (tmp file + rename) so a kill mid-write never leaves a broken latest."""
    ckpt_dir.mkdir(parents=True, exist_ok=True)
    path = ckpt_dir / f"epoch-{epoch:04d}.pt"
    tmp = path.with_suffix(".tmp")
    torch.save({"epoch": epoch, "model": model.state_dict(), "opt": opt.state_dict()}, tmp)
    os.replace(tmp, path)
    return path


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = torch.cuda.is_available()
    device = torch.device(f"cuda:{local_rank}" if cuda else "cpu")
    if cuda:
        torch.cuda.set_device(device)
        if args.gpu_mem_fraction < 1.0:
            torch.cuda.set_per_process_memory_fraction(args.gpu_mem_fraction, device)
    if world > 1:
        dist.init_process_group(backend="nccl" if cuda else "gloo")

    def log(msg: str) -> None:
        print(f"[rank {rank}/{world} {device}] {msg}", flush=True)

    torch.manual_seed(args.seed)  # same initial weights on every rank
    model: nn.Module = nn.Sequential(nn.Linear(IN_FEATURES, 32), nn.ReLU(), nn.Linear(32, 1)).to(
        device
    )
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    start_epoch = 0
    resumed_from = None
    ckpt = latest_checkpoint(args.checkpoint_dir)
    if ckpt is not None:
        state = torch.load(ckpt, map_location=device)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["opt"])
        start_epoch = state["epoch"] + 1
        resumed_from = state["epoch"]
        log(f"resumed from {ckpt} (epoch {resumed_from})")
    if world > 1:
        model = nn.parallel.DistributedDataParallel(model)

    usr1 = Usr1Flag()
    if args.requeue_on_usr1:
        signal.signal(signal.SIGUSR1, usr1)

    gen = torch.Generator().manual_seed(1000 + rank)  # each rank its own data shard
    true_w = torch.linspace(-1.0, 1.0, IN_FEATURES).unsqueeze(1)
    loss_fn = nn.MSELoss()
    first_loss = last_loss = None
    epoch = start_epoch - 1
    progress = ProgressLog(
        os.environ.get("SLURM_EXT_PROGRESS_FILE") if local_rank == 0 else None,
        args.progress_interval,
    )
    done = start_epoch * args.steps_per_epoch
    progress.step(done, force=True)
    for epoch in range(start_epoch, args.epochs):
        for _ in range(args.steps_per_epoch):
            x = torch.randn(args.batch_size, IN_FEATURES, generator=gen)
            y = x @ true_w + 0.01 * torch.randn(args.batch_size, 1, generator=gen)
            x, y = x.to(device), y.to(device)
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            last_loss = loss.item()
            if first_loss is None:
                first_loss = last_loss
            done += 1
            progress.step(done)
        if args.epoch_seconds > 0:
            time.sleep(args.epoch_seconds)
        log(f"epoch {epoch} loss {last_loss:.5f}")
        if args.checkpoint_dir is not None and rank == 0:
            path = save_checkpoint(args.checkpoint_dir, epoch, _unwrap(model), opt)
            log(f"checkpoint {path}")
        if usr1.raised:
            progress.step(done, force=True)
            progress.close()
            return _requeue(args, epoch, _unwrap(model), opt, log)
    progress.step(done, force=True)
    progress.close()
    if world > 1:
        # drop the DDP wrapper (its reducer holds the process group) before the group
        # goes (see the exit below for what torch's gloo path can still do)
        model = _unwrap(model)
        dist.barrier()
        dist.destroy_process_group()
    if rank == 0:
        summary = {
            "world_size": world,
            "device": str(device),
            "start_epoch": start_epoch,
            "resumed_from": resumed_from,
            "epochs": args.epochs,
            "last_epoch": epoch,
            "first_loss": first_loss,
            "last_loss": last_loss,
            "restart_count": int(os.environ.get("SLURM_RESTART_COUNT", "0")),
        }
        print("SLURM_EXT_TRAIN_DONE " + json.dumps(summary), flush=True)
    return 0


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def _requeue(args: argparse.Namespace, epoch: int, model: nn.Module, opt, log) -> int:
    """SIGUSR1: make sure the newest epoch is on disk, then ask Slurm to requeue this job."""
    if args.checkpoint_dir is not None:
        save_checkpoint(args.checkpoint_dir, epoch, model, opt)
    job_id = os.environ.get("SLURM_JOB_ID")
    if not job_id:
        log("SIGUSR1: checkpoint saved; not in a Slurm job, exiting")
        return 0
    log(f"SIGUSR1: checkpoint saved at epoch {epoch}; scontrol requeue {job_id}")
    res = subprocess.run(
        ["scontrol", "requeue", job_id], capture_output=True, text=True, check=False
    )
    if res.returncode != 0:
        log(f"scontrol requeue failed: {res.stderr.strip()}")
        return 1
    return 0


if __name__ == "__main__":
    code = main()
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        # torch's gloo threads can still abort a rank in C++ destructors at interpreter
        # exit ("terminate called without an active exception"), after training, the
        # checkpoint (written and renamed) and the process group's end: seen twice in the
        # elastic template test under load, once after the DDP wrapper was dropped. With
        # everything flushed there is nothing left to run, so leave without them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)
