"""The input items a stored response lists: ids, typed parts, and OpenAI's cursor paging. Pure shapes."""

from typing import Any

import pytest

from cirrus.api.openai.input_items import UnknownCursor, input_items, page
from cirrus.api.openai.responses_schemas import ResponsesRequest

ITEMS = [{"id": f"item_{n}"} for n in range(5)]


def request(input: Any) -> ResponsesRequest:
    return ResponsesRequest.model_validate({"model": "@cf/x/y", "input": input})


def test_a_string_input_is_one_user_message_with_an_input_text_part() -> None:
    [item] = input_items(request("Hi"))
    assert item["id"].startswith("msg_") and item["role"] == "user"
    assert item["content"] == [{"type": "input_text", "text": "Hi"}]


def test_items_keep_their_own_ids_and_kinds_and_get_ids_where_they_had_none() -> None:
    items = input_items(
        request(
            [
                {"role": "user", "content": "Weather?"},
                {"type": "function_call", "id": "fc_given", "call_id": "c1", "name": "f", "arguments": "{}"},
                {
                    "type": "function_call_output",
                    "call_id": "c1",
                    "output": [{"type": "input_text", "text": "9"}],
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "It is 9."}],
                },
            ]
        )
    )
    assert [item["type"] for item in items] == ["message", "function_call", "function_call_output", "message"]
    assert items[1]["id"] == "fc_given" and items[2]["id"].startswith("fco_") and items[2]["output"] == "9"
    assert items[3]["content"] == [{"type": "output_text", "text": "It is 9."}]
    assert len({item["id"] for item in items}) == 4


def test_pages_run_newest_first_by_default_and_follow_the_cursor() -> None:
    first = page(ITEMS, limit=2, order="desc", after=None, before=None)
    assert [i["id"] for i in first["data"]] == ["item_4", "item_3"] and first["has_more"]
    assert (first["first_id"], first["last_id"]) == ("item_4", "item_3")
    rest = page(ITEMS, limit=10, order="desc", after=first["last_id"], before=None)
    assert [i["id"] for i in rest["data"]] == ["item_2", "item_1", "item_0"] and not rest["has_more"]
    assert [i["id"] for i in page(ITEMS, 10, "asc", None, "item_2")["data"]] == ["item_0", "item_1"]
    empty = page([], 20, "desc", None, None)
    assert (empty["data"], empty["first_id"], empty["has_more"]) == ([], None, False)


def test_a_cursor_that_is_not_an_item_of_the_response_is_named() -> None:
    with pytest.raises(UnknownCursor) as caught:
        page(ITEMS, 20, "asc", "item_9", None)
    assert caught.value.param == "after" and "item_9" in str(caught.value)
