"""Metadata filters in both of Cloudflare's syntaxes: what each lets through, and the errors that name what was
wrong."""

from typing import Any

import pytest

from cirrus.errors import InvalidInput
from cirrus.rag.filters import allowed_items, item_attributes, parse_filters, parse_legacy_filter

JAN_2025 = 1735689600  # 2025-01-01 00:00:00 UTC
ITEMS = [
    ("top", "readme.md", JAN_2025 - 86400.0),
    ("a", "customer-a/profile.md", JAN_2025 + 0.9),
    ("deep", "customer-a/contracts/property/contract-1.pdf", JAN_2025 + 86400.0),
    ("b", "customer-b/profile.md", JAN_2025 + 2 * 86400.0),
]


def new(filters: dict[str, Any]) -> set[str]:
    return set(allowed_items(parse_filters(filters, "filters"), ITEMS))


def legacy(filters: dict[str, Any]) -> set[str]:
    return set(allowed_items(parse_legacy_filter(filters, "filters"), ITEMS))


def test_an_items_attributes_are_its_key_its_folder_and_its_second() -> None:
    assert item_attributes("customer-a/contracts/c.pdf", JAN_2025 + 0.9) == {
        "filename": "customer-a/contracts/c.pdf",
        "folder": "customer-a/contracts/",
        "timestamp": float(JAN_2025),
    }
    assert item_attributes("readme.md", 0.0)["folder"] == ""


def test_a_folder_matches_its_own_files_not_its_subfolders() -> None:
    assert new({"folder": "customer-a/"}) == {"a"}
    assert legacy({"type": "eq", "key": "folder", "value": "customer-a/"}) == {"a"}
    assert new({"folder": ""}) == {"top"}


def test_a_range_on_folder_selects_a_folder_and_everything_under_it() -> None:
    assert new({"folder": {"$gte": "customer-a/", "$lt": "customer-a0"}}) == {"a", "deep"}
    compound = {
        "type": "and",
        "filters": [
            {"type": "gte", "key": "folder", "value": "customer-a/"},
            {"type": "lt", "key": "folder", "value": "customer-a0"},
        ],
    }
    assert legacy(compound) == {"a", "deep"}


def test_timestamps_compare_in_seconds_whether_given_in_seconds_or_milliseconds() -> None:
    assert new({"timestamp": {"$gte": JAN_2025}}) == {"a", "deep", "b"}
    assert new({"timestamp": {"$gte": JAN_2025 * 1000 + 999}}) == {"a", "deep", "b"}  # rounded down
    assert legacy({"type": "gte", "key": "timestamp", "value": str(JAN_2025 * 1000)}) == {"a", "deep", "b"}
    assert new({"timestamp": {"$gt": JAN_2025, "$lte": JAN_2025 + 86400}}) == {"deep"}


def test_every_condition_of_the_new_syntax_must_hold() -> None:
    both = {"folder": "customer-a/", "timestamp": {"$gte": JAN_2025 + 3600}}
    assert new(both) == set()
    assert new({"filename": {"$in": ["readme.md", "customer-b/profile.md"]}}) == {"top", "b"}
    assert new({"folder": {"$nin": ["customer-a/", ""]}}) == {"deep", "b"}
    assert new({"folder": {"$ne": "customer-a/"}}) == {"top", "deep", "b"}


def test_a_legacy_or_takes_equalities_on_one_key() -> None:
    either = {
        "type": "or",
        "filters": [
            {"type": "eq", "key": "folder", "value": "customer-a/"},
            {"type": "eq", "key": "folder", "value": "customer-b/"},
        ],
    }
    assert legacy(either) == {"a", "b"}


@pytest.mark.parametrize(
    "filters, says",
    [
        ({"author": "me"}, "filters on 'author' are not supported: filter by filename, folder, timestamp"),
        ({"folder": {"$like": "a%"}}, "unknown filter operator '$like'"),
        ({"folder": 3}, "a filter on 'folder' compares with a string"),
        ({"timestamp": {"$gte": "yesterday"}}, "compares with Unix time"),
        ({"folder": {"$in": []}}, "$in on 'folder' takes a non-empty list"),
        ({"folder": {}}, "the filter on 'folder' has no operator"),
    ],
)
def test_a_bad_filter_is_refused_naming_what_was_wrong(filters: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_filters(filters, "ai_search_options.retrieval.filters")
    assert says in str(refused.value) and refused.value.param == "ai_search_options.retrieval.filters"


@pytest.mark.parametrize(
    "filters, says",
    [
        ({"type": "like", "key": "folder", "value": "a"}, "type one of eq, ne, gt, gte, lt, lte"),
        ({"type": "and", "filters": []}, "needs a non-empty 'filters' list"),
        ({"type": "eq", "key": "folder"}, "has no 'value'"),
        (
            {
                "type": "or",
                "filters": [
                    {"type": "eq", "key": "folder", "value": "a/"},
                    {"type": "gt", "key": "folder", "value": "b/"},
                ],
            },
            "only 'eq' comparisons on one key",
        ),
        (
            {
                "type": "and",
                "filters": [{"type": "or", "filters": [{"type": "eq", "key": "folder", "value": "a/"}]}],
            },
            "not nested",
        ),
    ],
)
def test_a_bad_legacy_filter_is_refused_naming_what_was_wrong(filters: dict[str, Any], says: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_legacy_filter(filters, "filters")
    assert says in str(refused.value) and refused.value.param == "filters"
