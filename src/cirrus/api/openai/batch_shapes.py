"""OpenAI's batch and file objects, made from Cirrus's batches and stored files.

A batch is checked whole when it is created, so it is never seen `validating` (or `failed`: a bad input file is
refused with a 400); its output and error files are written down the first time it is read finished, before the
answer, so it is never seen `finalizing` either. Its queued and running items read `in_progress`.
"""

from dataclasses import dataclass
from typing import Any

from cirrus.batches import Batch, ItemState
from cirrus.files import StoredFile

SHAPE = "openai"
COMPLETION_WINDOW = "24h"
BATCH_PURPOSE = "batch"
OUTPUT_PURPOSE = "batch_output"
ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings")
STATUSES = {
    "queued": "in_progress",
    "running": "in_progress",
    "cancelling": "cancelling",
    "completed": "completed",
    "cancelled": "cancelled",
    "expired": "expired",
}
_OUTPUT_SUFFIX = "-output"
_ERRORS_SUFFIX = "-errors"


@dataclass(frozen=True)
class BatchFiles:
    """A finished batch's output and error files (None: it has no such lines, or is not finished), and when it
    finished."""

    output_file_id: str | None = None
    error_file_id: str | None = None
    finished_at: float | None = None


def openai_status(status: str) -> str:
    return STATUSES[status]


def output_file_id(batch_id: str) -> str:
    return f"file-{batch_id}{_OUTPUT_SUFFIX}"


def error_file_id(batch_id: str) -> str:
    return f"file-{batch_id}{_ERRORS_SUFFIX}"


def batch_of_file(file_id: str) -> str | None:
    """The batch whose output or error file `file_id` names, if it names one."""
    for suffix in (_OUTPUT_SUFFIX, _ERRORS_SUFFIX):
        if file_id.startswith("file-batch_") and file_id.endswith(suffix):
            return file_id[len("file-") : -len(suffix)]
    return None


def request_counts(batch: Batch) -> dict[str, int]:
    return {
        "total": batch.total,
        "completed": batch.counts.get(ItemState.SUCCEEDED, 0),
        "failed": batch.counts.get(ItemState.FAILED, 0),
    }


def batch_object(batch: Batch, files: BatchFiles) -> dict[str, Any]:
    status = openai_status(batch.status)
    finished = _seconds(files.finished_at)
    return {
        "id": batch.id,
        "object": "batch",
        "endpoint": batch.metadata["endpoint"],
        "errors": None,
        "input_file_id": batch.metadata["input_file_id"],
        "completion_window": COMPLETION_WINDOW,
        "status": status,
        "output_file_id": files.output_file_id,
        "error_file_id": files.error_file_id,
        "created_at": int(batch.created_at),
        "in_progress_at": int(batch.created_at),
        "expires_at": int(batch.expires_at),
        "finalizing_at": None,
        "completed_at": finished if status == "completed" else None,
        "failed_at": None,
        "expired_at": finished if status == "expired" else None,
        "cancelling_at": _seconds(batch.cancelled_at),
        "cancelled_at": finished if status == "cancelled" else None,
        "request_counts": request_counts(batch),
        "metadata": batch.metadata.get("metadata"),
    }


def file_object(stored: StoredFile) -> dict[str, Any]:
    return {
        "id": stored.id,
        "object": "file",
        "bytes": stored.bytes,
        "created_at": int(stored.created_at),
        "expires_at": int(stored.expires_at),
        "filename": stored.filename,
        "purpose": stored.purpose,
        "status": "processed",
        "status_details": None,
    }


def page_object(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }


def _seconds(moment: float | None) -> int | None:
    return None if moment is None else int(moment)
