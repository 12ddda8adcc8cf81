"""The usage journal: every usage record is appended here the moment it is metered, so a gateway killed before its
meter wrote the record to the database (SIGKILL, the OOM killer) loses nothing.

Why a journal and not a shorter flush interval: a write to the database is a round trip and a transaction, so
records are batched (every 0.2 s); an append to a local file is one `write` system call, and what it wrote is the
kernel's once it returns, whatever then happens to the process. It is not fsynced: a power loss can still lose the
records the kernel had not yet written back (Linux writes dirty pages back within about 30 s).

Segments: the meter starts a new segment before each flush and deletes the old one once every record in it is
written to the database or kept in the reconcile file. A segment left behind by a process that died holds records
that may or may not have been written; the next start appends them to the reconcile file, whose replay writes
them, and the store recognises a record it already has (records are keyed by their contents). Each segment names
its process, so a process recovers only the segments of processes that are gone.
"""

import contextlib
import json
import logging
import os
import uuid
from pathlib import Path

from cirrus.metering.reconcile import ReconcileFile
from cirrus.metering.record import UsageRecord

log = logging.getLogger(__name__)
SUFFIX = ".jsonl"


class UsageJournal:
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._fd = -1
        self._segment = self._open()

    def append(self, record: UsageRecord) -> None:
        """One `write` of one whole line: the kernel's once this returns."""
        line = json.dumps(record.as_dict(), separators=(",", ":")) + "\n"
        os.write(self._fd, line.encode("utf-8"))

    def rotate(self) -> Path:
        """Start a new segment; return the one that was current, to be discarded once its records are safe."""
        done = self._segment
        os.close(self._fd)
        self._segment = self._open()
        return done

    def discard(self, segment: Path) -> None:
        with contextlib.suppress(FileNotFoundError):
            segment.unlink()

    def close(self) -> None:
        """The meter wrote or kept every record: the current segment goes too."""
        os.close(self._fd)
        self.discard(self._segment)

    def recover(self, into: ReconcileFile) -> int:
        """Move the records of segments whose process is gone into the reconcile file; return how many."""
        moved = 0
        for segment in sorted(self.directory.glob(f"*{SUFFIX}")):
            if _owner_alive(segment):
                continue
            lines = [line for line in segment.read_text(encoding="utf-8").splitlines() if line.strip()]
            records = [_parsed(line) for line in lines]
            kept = [record for record in records if record is not None]
            if kept:
                into.append(kept)
            segment.unlink()
            moved += len(kept)
        if moved:
            log.warning(
                "recovered %d usage records from the journal of a gateway that stopped abruptly", moved
            )
        return moved

    def _open(self) -> Path:
        segment = self.directory / f"{os.getpid()}-{uuid.uuid4().hex}{SUFFIX}"
        self._fd = os.open(segment, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        return segment


def _owner_alive(segment: Path) -> bool:
    pid_text = segment.name.split("-", 1)[0]
    if not pid_text.isdigit():
        return False
    pid = int(pid_text)
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _parsed(line: str) -> UsageRecord | None:
    """A line cut short by the kill (the last one, at most) is skipped."""
    try:
        return UsageRecord(**json.loads(line))
    except (ValueError, TypeError, KeyError):
        log.warning("skipped an unreadable usage journal line: %.120s", line)
        return None
