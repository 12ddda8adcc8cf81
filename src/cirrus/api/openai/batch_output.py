"""A batch's output and error files, made from its items whenever they are read (nothing is copied).

One JSONL line per item, in the input file's order: an item that succeeded goes to the output file with the
route's own response body; one that failed goes to the error file with its status code and OpenAI-shaped error
body, and one that never ran (its batch cancelled or expired) with the error OpenAI gives such requests. Their
file rows are written `pending` with the batch; the first read of the finished batch settles them with their
size and the time the batch finished (files/store.py).
"""

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from cirrus.api.errors import error_body, openai_status
from cirrus.api.openai.batch_shapes import BatchFiles, error_file_id, output_file_id
from cirrus.api.protocol import WireProtocol
from cirrus.batches import Batch, BatchItem, BatchStore, ItemState
from cirrus.errors import CirrusError, InternalError
from cirrus.files import FileState, FileStore

PAGE = 1000
NOT_RUN = {
    ItemState.CANCELLED: ("batch_cancelled", "This request was not run: its batch was cancelled."),
    ItemState.EXPIRED: (
        "batch_expired",
        "This request could not be executed before the completion window expired.",
    ),
}


def success(body: dict[str, Any], finished_at: float) -> dict[str, Any]:
    """What an item that succeeded keeps as its result."""
    return {"body": body, "finished_at": finished_at}


def failure(error: CirrusError, finished_at: float) -> dict[str, Any]:
    """What an item that failed keeps as its error: the status and body the route would have answered."""
    return {
        "status_code": openai_status(error),
        "body": error_body(error, WireProtocol.OPENAI),
        "finished_at": finished_at,
    }


def item_line(batch: Batch, item: BatchItem) -> tuple[bool, dict[str, Any]]:
    """(whether it goes to the error file, its line)."""
    line: dict[str, Any] = {
        "id": f"batch_req_{batch.id.removeprefix('batch_')}_{item.position}",
        "custom_id": item.external_reference,
        "response": None,
        "error": None,
    }
    request_id = f"{batch.id}/{item.position}"
    if item.state is ItemState.SUCCEEDED:
        body = (item.result or {}).get("body")
        return False, line | {"response": {"status_code": 200, "request_id": request_id, "body": body}}
    if item.state in NOT_RUN:
        code, message = NOT_RUN[item.state]
        return True, line | {"error": {"code": code, "message": message}}
    status, body = _failed(item.error or {}, item.state)
    return True, line | {"response": {"status_code": status, "request_id": request_id, "body": body}}


def _failed(error: dict[str, Any], state: ItemState) -> tuple[int, dict[str, Any]]:
    """An error our executor wrote, or one the runner wrote in Workers AI's shape ({code, message})."""
    if "status_code" in error and "body" in error:
        return int(error["status_code"]), error["body"]
    message = str(error.get("message") or f"the request was {state.value}")
    return 500, error_body(InternalError(message), WireProtocol.OPENAI)


def finished_at(item: BatchItem) -> float | None:
    moment = (item.result or item.error or {}).get("finished_at")
    return float(moment) if isinstance(moment, int | float) else None


@dataclass
class MadeFiles:
    batch: Batch
    output: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    finished_at: float = 0.0

    def text(self, file_id: str) -> str | None:
        """The content of the batch's file `file_id`: None if it has no lines (or is no file of the batch)."""
        lines = {output_file_id(self.batch.id): self.output, error_file_id(self.batch.id): self.errors}
        found = lines.get(file_id)
        return "".join(found) if found else None


async def made_files(store: BatchStore, batch: Batch) -> MadeFiles:
    """Both files of a finished batch. Its finish time is its last item's, or when it was cancelled or its
    window closed for items that never ran."""
    made = MadeFiles(batch, finished_at=batch.cancelled_at or batch.created_at)
    async for item in _items(store, batch):
        to_errors, line = item_line(batch, item)
        (made.errors if to_errors else made.output).append(json.dumps(line) + "\n")
        moment = batch.expires_at if item.state is ItemState.EXPIRED else finished_at(item)
        made.finished_at = max(made.finished_at, moment or 0.0)
    return made


async def _items(store: BatchStore, batch: Batch) -> AsyncIterator[BatchItem]:
    after = -1
    while page := await store.items(batch.id, after_position=after, limit=PAGE):
        for item in page:
            yield item
        after = page[-1].position


async def settled_files(files: FileStore, store: BatchStore, batch: Batch) -> BatchFiles:
    """A finished batch's files, settled first if this is the first read since it finished; nothing for a
    batch still running."""
    if batch.done < batch.total:
        return BatchFiles()
    made_rows = await files.made_files(batch.id)
    if any(row.state is FileState.PENDING for row in made_rows):
        made = await made_files(store, batch)
        for row in made_rows:
            text = made.text(row.id)
            if text is None:
                await files.drop_pending(row.id)
            else:
                await files.settle(row.id, len(text.encode()), made.finished_at)
        made_rows = await files.made_files(batch.id)
    kept = {row.id: row for row in made_rows if row.state is not FileState.PENDING}
    output, errors = output_file_id(batch.id), error_file_id(batch.id)
    return BatchFiles(
        output if output in kept else None,
        errors if errors in kept else None,
        max((row.created_at for row in kept.values()), default=None),
    )


async def settle_account(files: FileStore, store: BatchStore, account_id: str) -> None:
    """Settle the files of every batch of the account that finished unread, so that a list shows them."""
    for batch_id in await files.pending_sources(account_id):
        batch = await store.get(account_id, batch_id)
        if batch is not None:
            await settled_files(files, store, batch)
