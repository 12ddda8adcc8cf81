"""Messages checked before a family's template renders them: malformed tool-call turns are clear 400s."""

import pytest

from cirrus.families import FamilyInputError
from cirrus.families.messages import prepare_messages


@pytest.mark.parametrize("tool_calls", [1, "call", {"id": "x"}])
def test_tool_calls_that_are_not_a_list_are_refused(tool_calls: object) -> None:
    with pytest.raises(FamilyInputError, match=r"messages\[0\]\.tool_calls must be a list"):
        prepare_messages(
            [{"role": "assistant", "content": "x", "tool_calls": tool_calls}], decode_arguments=True
        )


def test_a_tool_result_for_an_unknown_call_is_refused() -> None:
    with pytest.raises(FamilyInputError):
        prepare_messages([{"role": "tool", "tool_call_id": "nobody", "content": "42"}], decode_arguments=True)
