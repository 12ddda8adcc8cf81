"""Kimi K2.5 / K2.6: K2-Thinking's format with a thinking switch read from `thinking`. Expected prompts are written
from the documented format (the generation prompt `<|im_assistant|>assistant<|im_middle|><think>`, or
`...<think></think>` with thinking false), not produced by the code."""

from typing import Any

import pytest

from cirrus.families import FamilyInputError, family, family_of_template, parse_output
from cirrus.families.native_call_grammar import native_call_grammar
from cirrus.runtime.gbnf import GrammarState, parse_grammar
from cirrus.testing.scripts import WEATHER_TOOL

K25, K2 = family("kimi_k25"), family("kimi_k2")
SYSTEM = "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>"
HI = [{"role": "user", "content": "Hi"}]
# The generation prompt as Moonshot's K2.5/K2.6 templates write it (quoted from a K2.6 bundle's template).
OFFICIAL_TAIL = (
    "{%- if add_generation_prompt -%}<|im_assistant|>assistant<|im_middle|>"
    "{%- if thinking is defined and thinking is false -%}<think></think>{%- else -%}<think>{%- endif -%}"
    "{%- endif -%}"
)


def test_the_prompt_opens_the_reasoning_by_default() -> None:
    expected = (
        f"{SYSTEM}<|im_user|>user<|im_middle|>Hi<|im_end|><|im_assistant|>assistant<|im_middle|><think>"
    )
    assert K25.render(HI) == expected
    assert K25.render(HI, enable_thinking=True) == expected


def test_thinking_off_closes_an_empty_block() -> None:
    assert K25.render(HI, enable_thinking=False).endswith(
        "<|im_assistant|>assistant<|im_middle|><think></think>"
    )


def multi_turn(reasoning: str) -> list[dict[str, Any]]:
    return [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "greet"},
        {"role": "user", "content": "Weather?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": reasoning,
            "tool_calls": [
                {
                    "id": "functions.get_weather:0",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "functions.get_weather:0", "content": "Sunny"},
    ]


def test_reasoning_after_the_last_plain_answer_is_kept_unless_thinking_is_off() -> None:
    call = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        '{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
    )
    history = (
        f"{SYSTEM}<|im_user|>user<|im_middle|>Hi<|im_end|>"
        "<|im_assistant|>assistant<|im_middle|><think></think>Hello!<|im_end|>"
        "<|im_user|>user<|im_middle|>Weather?<|im_end|>"
    )
    result = "<|im_system|>tool<|im_middle|>## Return of functions.get_weather:0\nSunny<|im_end|>"
    on = f"{history}<|im_assistant|>assistant<|im_middle|><think>look it up</think>{call}<|im_end|>{result}"
    assert K25.render(multi_turn("look it up")) == on + "<|im_assistant|>assistant<|im_middle|><think>"
    off = f"{history}<|im_assistant|>assistant<|im_middle|><think></think>{call}<|im_end|>{result}"
    rendered = K25.render(multi_turn("look it up"), enable_thinking=False)
    assert rendered == off + "<|im_assistant|>assistant<|im_middle|><think></think>"


def test_the_switch_reaches_the_models_own_template_as_thinking() -> None:
    own = "{% for m in messages %}[{{ m.content }}]{% endfor %}" + OFFICIAL_TAIL
    assert K25.render(HI, template=own) == "[Hi]<|im_assistant|>assistant<|im_middle|><think>"
    assert K25.render(HI, enable_thinking=False, template=own).endswith("<think></think>")
    assert K25.template_kwargs(False) == {"thinking": False}
    assert family("glm47").template_kwargs(False) == {"enable_thinking": False}


def test_k2_keeps_refusing_a_switch() -> None:
    with pytest.raises(FamilyInputError, match="no thinking switch"):
        K2.render(HI, enable_thinking=False)


class TestRecognition:
    def test_a_k25_template_is_k25_and_a_k2_template_stays_k2(self) -> None:
        k25 = "<|im_user|>{{ m.content }}<|im_middle|>" + OFFICIAL_TAIL
        assert family_of_template(k25) is K25
        assert family_of_template(K25.template()) is K25
        assert family_of_template(K2.template()) is K2

    def test_the_switch_alone_is_not_kimi(self) -> None:
        other = "{%- if thinking is defined and thinking is false -%}</think>{%- endif -%}<|Assistant|>"
        assert family_of_template(other) is None


def test_the_output_starts_inside_the_reasoning_unless_thinking_is_off() -> None:
    text = "plan it</think>It is sunny."
    on = parse_output(K25.output_parser(), text)
    assert (on.reasoning, on.content) == ("plan it", "It is sunny.")
    off = parse_output(K25.output_parser(enable_thinking=False), "It is sunny.")
    assert (off.reasoning, off.content) == ("", "It is sunny.")


def test_a_forced_call_must_close_the_opened_reasoning_first() -> None:
    grammar = parse_grammar(native_call_grammar(K25, [WEATHER_TOOL]))
    section = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>"
        '{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>'
    )
    assert GrammarState.initial(grammar).feed(f"why</think>{section}".encode()).complete
    assert not GrammarState.initial(grammar).feed(section.encode()).complete  # still reasoning
