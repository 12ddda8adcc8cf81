"""Room to write: free disk space and the per-file size limit (RLIMIT_FSIZE), checked before and after a step.

Checked from the state of the disk, never from an error's text: a tool that runs out of room says so in its
own words ("iostream error", "N requested and M written").
"""

import os
import resource
from pathlib import Path

MIB = 1024 * 1024
NEARLY_FULL_BYTES = 4 * MIB


def free_bytes(folder: Path) -> int:
    stats = os.statvfs(folder)
    return stats.f_bavail * stats.f_frsize


def file_size_limit() -> int | None:
    soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def shortage(folder: Path, needed: int) -> str | None:
    """Why `needed` bytes cannot be written in `folder`, or None if they fit."""
    limit = file_size_limit()
    if limit is not None and needed > limit:
        return f"it needs about {needed // MIB} MiB, but files may grow to {limit // MIB} MiB only here (ulimit -f)"
    free = free_bytes(folder)
    if needed > free:
        return f"it needs about {needed // MIB} MiB, but {folder} has {free // MIB} MiB free"
    return None


def ran_out(output: Path) -> str | None:
    """After a failed write of `output`: the reason if it was a full disk or the file size limit."""
    size = output.stat().st_size if output.is_file() else 0
    limit = file_size_limit()
    if limit is not None and size >= limit:
        return f"the output reached the {limit // MIB} MiB limit on file size here (ulimit -f)"
    if free_bytes(output.parent) < NEARLY_FULL_BYTES:
        return f"the disk holding {output.parent} is full"
    return None
