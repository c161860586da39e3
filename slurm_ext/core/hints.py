"""Job hints carried in a job's `--comment` as space-separated `key=value` tokens.

The one convention every part of the suite reads (templates write it, the submit hook and
the predictor read it), e.g. `--comment="model=resnet50 elastic=1-4 opt_out=cpu"`:

- `model=TAG`        workload key for the predictor (letters, digits, `._:/@+-`, <= 128)
- `elastic=MIN-MAX`  the job can run on MIN..MAX GPUs (1 <= MIN <= MAX <= 1024)
- `opportunistic=0|1` may run on spare GPU capacity (AntMan-style co-location)
- `checkpoint=0|1`   the job checkpoints and resumes, so the service may requeue it
                     (only together with Slurm's own --requeue flag)
- `opt_out=cpu,gpu`  keep the job's own CPU and/or GPU request (no rewriting of those)
- `slurm_ext=off`    opt out of all rewriting

Other tokens are ignored; a repeated key takes its last value; an invalid value is
ignored (and named in `Hints.errors`). etc/job_submit.lua holds a small Lua twin of this
parser, tested against the same cases (tests/test_hints.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

KEY_RE = re.compile(r"[A-Za-z0-9._:/@+-]{1,128}")  # use fullmatch: `$` would allow a newline
_ELASTIC_RE = re.compile(r"([0-9]{1,4})-([0-9]{1,4})")
_SPACE_RE = re.compile(r"[ \t\n\v\f\r]+")  # ASCII only, as Lua's %s
MAX_GPUS = 1024
OPT_OUT_ITEMS = ("cpu", "gpu")


@dataclass(frozen=True)
class Hints:
    model: str | None = None
    elastic: tuple[int, int] | None = None  # (min, max) GPUs
    opportunistic: bool = False
    opt_out: frozenset[str] = frozenset()  # subset of OPT_OUT_ITEMS
    all_off: bool = False  # slurm_ext=off
    errors: tuple[str, ...] = ()
    checkpoint: bool = False

    def opted_out(self, item: str) -> bool:
        """True when the user asked to keep their own `item` ('cpu' or 'gpu') request."""
        return self.all_off or item in self.opt_out


def parse_hints(comment: str | None) -> Hints:
    """Parse the hint tokens of a job comment; never raises on user text."""
    values: dict[str, str] = {}
    for token in _SPACE_RE.split(comment or ""):
        key, sep, value = token.partition("=")
        if sep and key in (
            "model",
            "elastic",
            "opportunistic",
            "opt_out",
            "slurm_ext",
            "checkpoint",
        ):
            values[key] = value
    errors: list[str] = []
    model = values.get("model")
    if model is not None and not KEY_RE.fullmatch(model):
        errors.append(f"model: invalid tag {model!r}")
        model = None
    elastic = None
    if "elastic" in values:
        m = _ELASTIC_RE.fullmatch(values["elastic"])
        lo, hi = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
        if m and 1 <= lo <= hi <= MAX_GPUS:
            elastic = (lo, hi)
        else:
            errors.append(f"elastic: expected MIN-MAX GPUs, got {values['elastic']!r}")
    opportunistic = _flag(values, "opportunistic", errors)
    checkpoint = _flag(values, "checkpoint", errors)
    opt_out: set[str] = set()
    if "opt_out" in values:
        for item in values["opt_out"].split(","):
            if item in OPT_OUT_ITEMS:
                opt_out.add(item)
            else:
                errors.append(f"opt_out: unknown item {item!r} (known: cpu, gpu)")
    all_off = values.get("slurm_ext") == "off"
    if "slurm_ext" in values and not all_off:
        errors.append(f"slurm_ext: only 'off' is meaningful, got {values['slurm_ext']!r}")
    return Hints(
        model,
        elastic,
        opportunistic,
        frozenset(opt_out),
        all_off,
        tuple(errors),
        checkpoint=checkpoint,
    )


def _flag(values: dict[str, str], key: str, errors: list[str]) -> bool:
    if key not in values:
        return False
    if values[key] in ("0", "1"):
        return values[key] == "1"
    errors.append(f"{key}: expected 0 or 1, got {values[key]!r}")
    return False
