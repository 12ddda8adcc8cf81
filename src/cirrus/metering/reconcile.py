"""The file that holds usage records the database would not take, until a later start writes them.

A replay first renames the file, so records that other processes append meanwhile go to a fresh one, and
deletes the renamed file only once the store took every record in it. A replay that fails leaves its file for
the next start; writing a record twice is harmless (the store recognises it).
"""

import contextlib
import json
import logging
import uuid
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from cirrus.metering.record import UsageRecord

log = logging.getLogger(__name__)
REPLAY_BATCH = 500
Writer = Callable[[Sequence[UsageRecord]], Awaitable[None]]


class ReconcileFile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def append(self, records: Sequence[UsageRecord]) -> None:
        """One write of whole lines to a file opened for appending, so concurrent writers do not interleave."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        text = "".join(json.dumps(r.as_dict(), separators=(",", ":")) + "\n" for r in records)
        with self.path.open("a", encoding="utf-8") as file:
            file.write(text)

    async def replay(self, write: Writer) -> int:
        """Write every claimed record; return how many the store took."""
        self._claim()
        written = 0
        for claimed in sorted(self.path.parent.glob(f"{self.path.name}.*.replaying")):
            written += await self._replay_file(claimed, write)
        return written

    def _claim(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.rename(self.path.with_name(f"{self.path.name}.{uuid.uuid4().hex}.replaying"))

    async def _replay_file(self, claimed: Path, write: Writer) -> int:
        records, unreadable = self._load(claimed)
        try:
            for start in range(0, len(records), REPLAY_BATCH):
                await write(records[start : start + REPLAY_BATCH])
        except Exception:
            log.exception(
                "could not replay %d unwritten usage records from %s; will retry", len(records), claimed
            )
            return 0
        self._finish(claimed, unreadable)
        log.info("replayed %d unwritten usage records from %s", len(records), claimed)
        return len(records)

    def _finish(self, claimed: Path, unreadable: list[str]) -> None:
        if unreadable:
            self._reject(unreadable)
        claimed.unlink(missing_ok=True)  # another process may have replayed it too

    @staticmethod
    def _load(claimed: Path) -> tuple[list[UsageRecord], list[str]]:
        records, unreadable = [], []
        try:
            lines = claimed.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:  # replayed by another process meanwhile
            lines = []
        for line in lines:
            try:
                records.append(UsageRecord(**json.loads(line)))
            except (ValueError, TypeError):
                unreadable.append(line)
        return records, unreadable

    def _reject(self, lines: list[str]) -> None:
        """Lines that are not records (a torn write, a newer format) are kept aside, never dropped."""
        rejected = self.path.with_name(f"{self.path.name}.rejected")
        with rejected.open("a", encoding="utf-8") as file:
            file.write("".join(line + "\n" for line in lines))
        log.error("kept %d unreadable usage lines in %s", len(lines), rejected)
