"""Metadata filters: which of an instance's items a search may return, by the attributes Cloudflare's AI Search
filters on. `filename` is the item's key (`docs/guide.pdf`), `folder` the key up to its last `/` with the `/`
(`docs/`; `""` at the top), `timestamp` when the item's searchable content was indexed, in Unix seconds.

Two syntaxes, both Cloudflare's:
- AI Search's: `{"folder": "docs/", "timestamp": {"$gte": 1735689600}}`, every key must hold; a bare value means
  `$eq`; operators `$eq $ne $in $nin $lt $lte $gt $gte`.
- AutoRAG's (legacy): `{"type": "eq", "key": "folder", "value": "docs/"}`, or `{"type": "and" | "or", "filters":
  [...]}` of such comparisons; operators `eq ne gt gte lt lte`; no nesting, and an `or` only of `eq` on one key.

`folder` matches one folder exactly, not its subfolders; a range (`$gte "docs/"`, `$lt "docs0"`) selects a folder
and everything under it. Timestamps given in milliseconds (13 digits) are rounded down to seconds, as Cloudflare
does; an item's timestamp is compared in whole seconds too.
"""

import math
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cirrus.errors import InvalidInput

ATTRIBUTES = ("filename", "folder", "timestamp")
Value = str | float
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "eq": lambda item, wanted: item == wanted,
    "ne": lambda item, wanted: item != wanted,
    "lt": lambda item, wanted: item < wanted,
    "lte": lambda item, wanted: item <= wanted,
    "gt": lambda item, wanted: item > wanted,
    "gte": lambda item, wanted: item >= wanted,
    "in": lambda item, wanted: item in wanted,
    "nin": lambda item, wanted: item not in wanted,
}
_LEGACY_OPERATORS = ("eq", "ne", "gt", "gte", "lt", "lte")
_MILLISECONDS_FROM = (
    1e11  # a timestamp this large is in milliseconds (Unix seconds reach it in the year 5138)
)


@dataclass(frozen=True)
class Condition:
    attribute: str
    operator: str  # a key of _COMPARE
    value: Value | frozenset[Value]

    def holds(self, attributes: Mapping[str, Value]) -> bool:
        return _COMPARE[self.operator](attributes[self.attribute], self.value)


@dataclass(frozen=True)
class ItemFilter:
    conditions: tuple[Condition, ...]
    any_of: bool = False  # else all of them

    def allows(self, key: str, indexed_at: float) -> bool:
        attributes = item_attributes(key, indexed_at)
        test = any if self.any_of else all
        return test(condition.holds(attributes) for condition in self.conditions)


def item_attributes(key: str, indexed_at: float) -> dict[str, Value]:
    folder = posixpath.dirname(key)
    return {
        "filename": key,
        "folder": f"{folder}/" if folder else "",
        "timestamp": float(math.floor(indexed_at)),
    }


def parse_filters(filters: Mapping[str, Any], param: str) -> ItemFilter:
    """AI Search's syntax: attribute -> value, or -> {operator: value, ...}; every condition must hold."""
    if not isinstance(filters, Mapping):
        raise InvalidInput("filters must be an object of attribute: condition", param=param)
    conditions: list[Condition] = []
    for attribute, condition in filters.items():
        attribute = _check_attribute(attribute, param)
        spelled = condition if isinstance(condition, Mapping) else {"$eq": condition}
        if not spelled:
            raise InvalidInput(f"the filter on {attribute!r} has no operator", param=param)
        for operator, value in spelled.items():
            name = operator[1:] if isinstance(operator, str) and operator.startswith("$") else None
            if name not in _COMPARE:
                known = ", ".join(f"${op}" for op in _COMPARE)
                raise InvalidInput(f"unknown filter operator {operator!r} (known: {known})", param=param)
            conditions.append(Condition(attribute, name, _value(attribute, name, value, param)))
    return ItemFilter(tuple(conditions))


def parse_legacy_filter(filters: Mapping[str, Any], param: str) -> ItemFilter:
    """AutoRAG's syntax: one comparison, or an `and` / `or` of comparisons."""
    kind = filters.get("type") if isinstance(filters, Mapping) else None
    if kind in ("and", "or"):
        parts = filters.get("filters")
        if not isinstance(parts, list) or not parts:
            raise InvalidInput(f"an {kind!r} filter needs a non-empty 'filters' list", param=param)
        conditions = tuple(_comparison(part, param) for part in parts)
        if kind == "or" and (
            any(c.operator != "eq" for c in conditions) or len({c.attribute for c in conditions}) > 1
        ):
            raise InvalidInput("an 'or' filter takes only 'eq' comparisons on one key", param=param)
        return ItemFilter(conditions, any_of=kind == "or")
    return ItemFilter((_comparison(filters, param),))


def _comparison(spelled: Any, param: str) -> Condition:
    if not isinstance(spelled, Mapping) or spelled.get("type") not in _LEGACY_OPERATORS:
        known = ", ".join(_LEGACY_OPERATORS)
        raise InvalidInput(
            f"a comparison filter is {{type, key, value}} with type one of {known} (and and / or of them, not"
            " nested)",
            param=param,
        )
    attribute = _check_attribute(spelled.get("key"), param)
    if "value" not in spelled:
        raise InvalidInput(f"the filter on {attribute!r} has no 'value'", param=param)
    return Condition(attribute, spelled["type"], _value(attribute, spelled["type"], spelled["value"], param))


def _check_attribute(attribute: Any, param: str) -> str:
    if attribute not in ATTRIBUTES:
        raise InvalidInput(
            f"filters on {attribute!r} are not supported: filter by {', '.join(ATTRIBUTES)}", param=param
        )
    return str(attribute)


def _value(attribute: str, operator: str, value: Any, param: str) -> Value | frozenset[Value]:
    if operator in ("in", "nin"):
        if not isinstance(value, list) or not value:
            raise InvalidInput(f"${operator} on {attribute!r} takes a non-empty list", param=param)
        return frozenset(_one_value(attribute, each, param) for each in value)
    return _one_value(attribute, value, param)


def _one_value(attribute: str, value: Any, param: str) -> Value:
    if attribute != "timestamp":
        if not isinstance(value, str):
            raise InvalidInput(f"a filter on {attribute!r} compares with a string", param=param)
        return value
    seconds = _number(value)
    if seconds is None:
        raise InvalidInput(
            "a filter on 'timestamp' compares with Unix time, in seconds or milliseconds", param=param
        )
    return float(math.floor(seconds / 1000 if seconds >= _MILLISECONDS_FROM else seconds))


def _number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def allowed_items(filter_: ItemFilter, items: Sequence[tuple[str, str, float]]) -> frozenset[str]:
    """The ids of `(id, key, indexed at)` items the filter lets through."""
    return frozenset(item_id for item_id, key, indexed_at in items if filter_.allows(key, indexed_at))
