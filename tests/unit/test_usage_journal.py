"""The usage journal: records a process metered but never wrote survive its abrupt end, and are written once."""

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from cirrus.metering.journal import UsageJournal
from cirrus.metering.meter import Meter
from cirrus.metering.reconcile import ReconcileFile
from cirrus.metering.record import UsageRecord
from cirrus.metering.store import UsageStore
from tests.unit.records import usage_record

NOW = 1_741_975_200.0  # 2025-03-14 18:00 UTC
DAY = "2025-03-14"


class NeverWrites:
    """A store the process dies before reaching: nothing is written."""

    async def write(self, records: Sequence[UsageRecord]) -> None:
        raise AssertionError("the meter never flushed before it died")


def dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def journal_of_a_dead_process(directory: Path, records: list[UsageRecord]) -> None:
    journal = UsageJournal(directory)
    for record in records:
        journal.append(record)
    os.close(journal._fd)  # the process "dies": no flush, no close
    journal._segment.rename(directory / f"{dead_pid()}-{journal._segment.name.split('-', 1)[1]}")


async def test_records_of_a_process_killed_before_its_flush_are_written_at_the_next_start(
    store: UsageStore, tmp_path: Path
) -> None:
    records = [usage_record(neurons=1.0, started_at=NOW) for _ in range(5)]
    journal_of_a_dead_process(tmp_path / "journal", records)
    meter = Meter(store, tmp_path / "unwritten.jsonl", lambda: NOW, journal_dir=tmp_path / "journal")
    assert await meter.replay_unwritten() == 5
    assert await store.neurons_today("acct", DAY) == 5.0
    assert list((tmp_path / "journal").glob("*.jsonl")) == [meter._journal._segment]  # type: ignore[union-attr]


async def test_a_record_written_before_the_kill_is_not_counted_twice(
    store: UsageStore, tmp_path: Path
) -> None:
    records = [usage_record(neurons=1.0, started_at=NOW) for _ in range(3)]
    await store.write(records[:2])  # the flush that was under way when the process died
    journal_of_a_dead_process(tmp_path / "journal", records)
    meter = Meter(store, tmp_path / "unwritten.jsonl", lambda: NOW, journal_dir=tmp_path / "journal")
    await meter.replay_unwritten()
    assert await store.neurons_today("acct", DAY) == 3.0


async def test_a_flush_discards_the_segment_it_wrote_and_close_leaves_no_journal(
    store: UsageStore, tmp_path: Path
) -> None:
    meter = Meter(store, tmp_path / "unwritten.jsonl", lambda: NOW, journal_dir=tmp_path / "journal")
    meter.record(usage_record(neurons=2.0, started_at=NOW))
    lines = sum(len(p.read_text().splitlines()) for p in (tmp_path / "journal").glob("*.jsonl"))
    assert lines == 1  # on disk before any flush
    await meter.flush()
    assert sum(len(p.read_text().splitlines()) for p in (tmp_path / "journal").glob("*.jsonl")) == 0
    meter.record(usage_record(neurons=3.0, started_at=NOW))
    await meter.close()
    assert list((tmp_path / "journal").glob("*.jsonl")) == []
    assert await store.neurons_today("acct", DAY) == 5.0


def test_a_live_process_keeps_its_segments_and_a_cut_line_is_skipped(tmp_path: Path) -> None:
    live = UsageJournal(tmp_path / "journal")
    live.append(usage_record(started_at=NOW))
    dead = tmp_path / "journal" / f"{dead_pid()}-cut.jsonl"
    whole = usage_record(started_at=NOW)
    dead.write_text(json.dumps(whole.as_dict()) + '\n{"request_id": "cut sh')
    reconcile = ReconcileFile(tmp_path / "unwritten.jsonl")
    other = UsageJournal(tmp_path / "journal")
    assert other.recover(reconcile) == 1  # the whole line of the dead process's segment, not the live one's
    assert live._segment.exists() and not dead.exists()


def test_without_a_journal_nothing_is_written_to_disk_before_a_flush(tmp_path: Path) -> None:
    meter = Meter(NeverWrites(), tmp_path / "unwritten.jsonl", lambda: NOW)
    meter.record(usage_record(started_at=NOW))
    assert list(tmp_path.iterdir()) == []
