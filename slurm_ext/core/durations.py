"""How every command and the user view print a length of time: `1h02m`, never raw seconds.

Its own module so that the CLI (slurm_ext/cli/output.py) and the user view's page
(slurm_ext/userview/page.py, no click) print durations alike.
"""

from __future__ import annotations


def duration(seconds: float) -> str:
    """Seconds as the largest two units: 45s, 3m05s, 1h02m, 2d04h (negative: 0s)."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s}s"
    m, s = divmod(s, 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    if h < 24:
        return f"{h}h{m:02d}m"
    d, h = divmod(h, 24)
    return f"{d}d{h:02d}h"
