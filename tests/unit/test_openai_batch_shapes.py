"""The pure parts of OpenAI's Batch API: an input file's lines checked before anything is queued, the batch and
file objects (read back by the `openai` SDK's own models), the status mapping, the output and error lines made
from items, and the upload's multipart form read without its Content-Type."""

import json
from typing import Any

import httpx
import openai.types
import pytest

from cirrus.api.openai.batch_lines import checked_lines
from cirrus.api.openai.batch_output import failure, item_line, success
from cirrus.api.openai.batch_shapes import (
    STATUSES,
    BatchFiles,
    batch_object,
    batch_of_file,
    error_file_id,
    file_object,
    openai_status,
    output_file_id,
)
from cirrus.api.openai.multipart import form_parts
from cirrus.batches import Batch, BatchItem, ItemState
from cirrus.errors import InputRefused, InvalidInput, ModelForbidden, NoSuchModel
from cirrus.files import FileState, StoredFile

CHAT = "/v1/chat/completions"
MODEL = "@cf/huggingface/smollm2-135m-instruct"
FORBIDDEN = "@cf/meta/not-for-this-token"
HI = [{"role": "user", "content": "Hi"}]


def resolve(model: str) -> str:
    if model == FORBIDDEN:
        raise ModelForbidden("The account is not allowed to access this model", param="model")
    if not model.startswith("@cf/"):
        raise NoSuchModel(f"No such model {model}", param="model")
    return model


def line(custom_id: str = "a", url: str = CHAT, method: str = "POST", **body: Any) -> str:
    body = body or {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 4}
    return json.dumps({"custom_id": custom_id, "method": method, "url": url, "body": body})


def check(*lines: str, endpoint: str = CHAT, max_items: int = 10) -> list[Any]:
    return checked_lines("\n".join(lines), endpoint, max_items, resolve)


def test_good_lines_become_items_in_order_with_their_custom_ids() -> None:
    items = check(
        line("first"), "", "   ", line("second", model=MODEL, messages=[{"role": "user", "content": "x"}])
    )
    assert [item.external_reference for item in items] == ["first", "second"]
    assert items[0].body["messages"] == [{"role": "user", "content": "Hi"}]
    embedding = line("e", url="/v1/embeddings", model=MODEL, input=["one", "two"])
    completion = line("c", url="/v1/completions", model=MODEL, prompt="1, 2,", max_tokens=3)
    assert check(embedding, endpoint="/v1/embeddings")[0].body["input"] == ["one", "two"]
    assert check(completion, endpoint="/v1/completions")[0].body["prompt"] == "1, 2,"
    assert check(line() + "\r", "\u2028")[0].external_reference == "a"  # CRLF files; U+2028 is no line end


@pytest.mark.parametrize(
    ("lines", "where", "param"),
    [
        ((line(), '{"custom_id": "b",'), "line 2", None),
        (("[1, 2]",), "line 1", None),
        ((line("same"), line("other"), line("same")), "line 3", "custom_id"),
        ((line(custom_id=""),), "line 1", "custom_id"),
        ((line(method="GET"),), "line 1", "method"),
        ((line(url="/v1/embeddings"),), "line 1", "url"),
        (
            (line(), json.dumps({"custom_id": "b", "method": "POST", "url": CHAT, "body": "hi"})),
            "line 2",
            "body",
        ),
        (
            (line(model=MODEL, messages=HI, stream=True),),
            "line 1",
            "body.stream",
        ),
        (
            (line(model=MODEL, messages=HI, max_tokens=0),),
            "line 1",
            "body.max_tokens",
        ),
        ((line(model=MODEL, prompt="Hi"),), "line 1", "body.messages"),
        (
            (line(model=MODEL, messages=HI, tools="x"),),
            "line 1",
            "body.tools",
        ),
        (
            (line(), line("b", model=FORBIDDEN, messages=HI)),
            "line 2",
            "body.model",
        ),
        ((line(model="gpt-nothing", messages=HI),), "line 1", "body.model"),
    ],
)
def test_a_bad_line_is_refused_naming_its_line_and_field(
    lines: tuple[str, ...], where: str, param: str | None
) -> None:
    with pytest.raises(InvalidInput) as refused:
        check(*lines)
    assert refused.value.message.startswith(f"{where} of the input file: ")
    assert refused.value.param == param
    if param is not None:
        assert param.removeprefix("body.") in refused.value.message


def test_embedding_and_completion_bodies_are_checked_as_their_routes_check_them() -> None:
    with pytest.raises(InvalidInput) as empty:
        check(line(url="/v1/embeddings", model=MODEL, input=[]), endpoint="/v1/embeddings")
    assert empty.value.param == "body.input"
    with pytest.raises(InvalidInput) as streamed:
        check(line(url="/v1/completions", model=MODEL, prompt="Hi", stream=True), endpoint="/v1/completions")
    assert streamed.value.param == "body.stream"


def test_an_empty_file_or_one_over_the_limit_is_refused_whole() -> None:
    with pytest.raises(InvalidInput, match="no requests"):
        check("", " ")
    with pytest.raises(InvalidInput, match="more than 2 requests") as over:
        check(line("a"), line("b"), line("c"), max_items=2)
    assert over.value.param == "input_file_id"
    assert len(check(line("a"), line("b"), max_items=2)) == 2


def batch(status_counts: dict[ItemState, int], cancelled_at: float | None = None) -> Batch:
    counts = {state: status_counts.get(state, 0) for state in ItemState}
    metadata = {"endpoint": CHAT, "input_file_id": "file-in", "metadata": {"job": "nightly"}}
    return Batch("batch_abc", "acct", "tok", "", "openai", 1000.0, 87400.0, cancelled_at, metadata, counts)


def test_every_batch_status_maps_to_one_the_sdk_knows() -> None:
    sdk_statuses = set(openai.types.Batch.model_fields["status"].annotation.__args__)  # type: ignore[union-attr]
    assert set(STATUSES.values()) <= sdk_statuses
    assert openai_status("queued") == openai_status("running") == "in_progress"
    assert [openai_status(s) for s in ("cancelling", "cancelled", "completed", "expired")] == [
        "cancelling",
        "cancelled",
        "completed",
        "expired",
    ]
    for counts, cancelled_at, expected in (
        ({ItemState.QUEUED: 2}, None, "in_progress"),
        ({ItemState.RUNNING: 1, ItemState.SUCCEEDED: 1}, None, "in_progress"),
        ({ItemState.RUNNING: 1, ItemState.CANCELLED: 1}, 2000.0, "cancelling"),
        ({ItemState.SUCCEEDED: 1, ItemState.CANCELLED: 1}, 2000.0, "cancelled"),
        ({ItemState.SUCCEEDED: 1, ItemState.EXPIRED: 1}, None, "expired"),
        ({ItemState.SUCCEEDED: 1, ItemState.FAILED: 1}, None, "completed"),
    ):
        assert batch_object(batch(counts, cancelled_at), BatchFiles())["status"] == expected


def test_a_batch_object_reads_back_through_the_sdk_model() -> None:
    finished = batch({ItemState.SUCCEEDED: 3, ItemState.FAILED: 1})
    files = BatchFiles(output_file_id("batch_abc"), error_file_id("batch_abc"), 1500.5)
    sdk = openai.types.Batch.model_validate(batch_object(finished, files))
    assert (sdk.id, sdk.object, sdk.status, sdk.endpoint, sdk.input_file_id) == (
        "batch_abc",
        "batch",
        "completed",
        CHAT,
        "file-in",
    )
    assert (sdk.output_file_id, sdk.error_file_id) == ("file-batch_abc-output", "file-batch_abc-errors")
    assert (sdk.created_at, sdk.in_progress_at, sdk.expires_at, sdk.completed_at) == (1000, 1000, 87400, 1500)
    assert sdk.cancelled_at is None and sdk.expired_at is None and sdk.metadata == {"job": "nightly"}
    assert sdk.request_counts is not None
    assert (sdk.request_counts.total, sdk.request_counts.completed, sdk.request_counts.failed) == (4, 3, 1)
    cancelled = batch({ItemState.CANCELLED: 2}, cancelled_at=1200.0)
    body = batch_object(cancelled, BatchFiles(None, error_file_id("batch_abc"), 1200.0))
    assert (body["cancelling_at"], body["cancelled_at"], body["completed_at"]) == (1200, 1200, None)


def test_made_file_ids_map_back_to_their_batch() -> None:
    assert batch_of_file(output_file_id("batch_abc")) == "batch_abc"
    assert batch_of_file(error_file_id("batch_abc")) == "batch_abc"
    assert batch_of_file("file-0123abc") is None
    assert batch_of_file("file-batch_abc-other") is None


def test_a_file_object_reads_back_through_the_sdk_model() -> None:
    stored = StoredFile("file-1", "acct", "batch", "in.jsonl", 120, 1000.2, 2000.0, FileState.PROCESSED)
    sdk = openai.types.FileObject.model_validate(file_object(stored))
    assert (sdk.id, sdk.object, sdk.bytes, sdk.created_at, sdk.filename, sdk.purpose, sdk.status) == (
        "file-1",
        "file",
        120,
        1000,
        "in.jsonl",
        "batch",
        "processed",
    )


def item(position: int, state: ItemState, **outcome: Any) -> BatchItem:
    return BatchItem(
        "batch_abc",
        position,
        {},
        f"req-{position}",
        state,
        outcome.get("result"),
        outcome.get("error"),
        None,
        1,
    )


def test_items_become_output_and_error_lines_shaped_as_openai_writes_them() -> None:
    owner = batch({ItemState.SUCCEEDED: 1})
    answer = {"object": "chat.completion", "choices": []}
    to_errors, ok = item_line(owner, item(0, ItemState.SUCCEEDED, result=success(answer, 1200.0)))
    assert not to_errors
    assert ok == {
        "id": "batch_req_abc_0",
        "custom_id": "req-0",
        "response": {"status_code": 200, "request_id": "batch_abc/0", "body": answer},
        "error": None,
    }
    refused = failure(InputRefused("'messages[0].content' was refused by a guardrail policy"), 1300.0)
    to_errors, failed = item_line(owner, item(1, ItemState.FAILED, error=refused))
    assert to_errors and failed["response"]["status_code"] == 400 and failed["error"] is None
    assert failed["response"]["body"]["error"]["code"] == "content_filter"
    _, crashed = item_line(owner, item(2, ItemState.FAILED, error={"code": 3000, "message": "KeyError: 'x'"}))
    assert crashed["response"]["status_code"] == 500
    assert crashed["response"]["body"]["error"]["message"] == "KeyError: 'x'"
    for state, code in ((ItemState.CANCELLED, "batch_cancelled"), (ItemState.EXPIRED, "batch_expired")):
        to_errors, never_ran = item_line(owner, item(3, state))
        assert to_errors and never_ran["response"] is None and never_ran["error"]["code"] == code


def multipart(fields: dict[str, str], files: dict[str, tuple[str, bytes]]) -> tuple[bytes, str]:
    request = httpx.Request("POST", "http://x/v1/files", data=fields, files=files)
    return request.read(), request.headers["content-type"]


def test_a_form_is_read_with_or_without_its_content_type() -> None:
    body, content_type = multipart({"purpose": "batch"}, {"file": ("in.jsonl", b'{"a": 1}\r\n{"b": 2}\n')})
    for declared in (content_type, "application/json"):
        parts = form_parts(body, declared)
        assert parts["purpose"].data == b"batch" and parts["purpose"].filename is None
        assert parts["file"].data == b'{"a": 1}\r\n{"b": 2}\n' and parts["file"].filename == "in.jsonl"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b'{"purpose": "batch"}',
        b'--abc\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch',  # no closing boundary
        b"--abc\r\nno blank line\r\n--abc--\r\n",
        b"--abc\r\nContent-Type: text/plain\r\n\r\nbatch\r\n--abc--\r\n",  # no name
    ],
)
def test_a_body_that_is_no_form_is_refused(body: bytes) -> None:
    with pytest.raises(InvalidInput):
        form_parts(body, "application/json")


def test_a_line_may_name_a_finetune_after_its_base_model_and_a_bad_name_is_refused() -> None:
    [item] = check(line("ft", model=f"{MODEL}:pirate", messages=HI))
    assert item.body["model"] == f"{MODEL}:pirate"  # the fine-tune is looked up in the account when it runs
    with pytest.raises(InvalidInput, match=r"line 1 .*BASE_MODEL:FINETUNE") as refused:
        check(line("ft", model=f"{MODEL}:", messages=HI))
    assert refused.value.param == "body.model"
