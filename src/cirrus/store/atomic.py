"""Make a file appear whole or not at all: fsync it, rename it into place, fsync the folder."""

import os
import tempfile
from pathlib import Path


def fsync_dir(folder: Path) -> None:
    descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def publish(temporary: Path, final: Path) -> None:
    """Rename a finished, fsynced file onto its final name (same filesystem), durably."""
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(temporary, final)
    fsync_dir(final.parent)


def write_bytes_atomic(final: Path, data: bytes, scratch: Path) -> None:
    """Write `data` to `final` through a temporary file in `scratch` (on the same filesystem)."""
    scratch.mkdir(parents=True, exist_ok=True)
    descriptor, name = tempfile.mkstemp(dir=scratch, suffix=".tmp")
    temporary = Path(name)
    try:
        with os.fdopen(descriptor, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        publish(temporary, final)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
