"""Golden renderings of the GLM and Kimi chat formats. Each expected string is written out from the family's
documented format (Z.ai's and Moonshot's official chat templates and guides), not produced by the code."""

import json
from typing import Any

import pytest

from cirrus.families import FamilyInputError, family, family_of_template

GLM45 = family("glm45")
GLM47 = family("glm47")
KIMI = family("kimi_k2")

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
WEATHER_JSON = (
    '{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", '
    '"properties": {"city": {"type": "string"}}, "required": ["city"]}}}'
)
SYSTEM_USER = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]
MULTI_TURN = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello!"},
    {"role": "user", "content": "2+2?"},
]


def tool_turns(call_id: str) -> list[dict[str, Any]]:
    call = {
        "id": call_id,
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
    }
    return [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": "12 C"},
    ]


GLM45_TOOLS_BLOCK = (
    "<|system|>\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    f"{WEATHER_JSON}\n</tools>\n\n"
    "For each function call, output the function name and arguments within the following XML format:\n"
    "<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n"
    "<arg_key>{arg-key-2}</arg_key>\n<arg_value>{arg-value-2}</arg_value>\n...\n</tool_call>"
)


class TestGlm45:
    def test_system_and_user(self) -> None:
        assert GLM45.render(SYSTEM_USER) == "[gMASK]<sop><|system|>\nBe brief.<|user|>\nHi<|assistant|>"

    def test_multi_turn_history_gets_an_empty_think_block(self) -> None:
        assert GLM45.render(MULTI_TURN) == (
            "[gMASK]<sop><|user|>\nHi<|assistant|>\n<think></think>\nHello!<|user|>\n2+2?<|assistant|>"
        )

    def test_tool_call_with_null_content_then_its_result(self) -> None:
        assert GLM45.render(tool_turns("call_1")) == (
            "[gMASK]<sop><|user|>\nWeather in Oslo?<|assistant|>\n<think></think>"
            "\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Oslo</arg_value>\n</tool_call>"
            "<|observation|>\n<tool_response>\n12 C\n</tool_response><|assistant|>"
        )

    def test_tools_offered(self) -> None:
        prompt = GLM45.render([{"role": "user", "content": "Hi"}], tools=[WEATHER_TOOL])
        assert prompt == f"[gMASK]<sop>{GLM45_TOOLS_BLOCK}<|user|>\nHi<|assistant|>"

    def test_thinking_off_adds_nothink_and_an_empty_block(self) -> None:
        prompt = GLM45.render([{"role": "user", "content": "Hi"}], enable_thinking=False)
        assert prompt == "[gMASK]<sop><|user|>\nHi/nothink<|assistant|>\n<think></think>"

    def test_thinking_on_is_the_default_prompt(self) -> None:
        on = GLM45.render([{"role": "user", "content": "Hi"}], enable_thinking=True)
        assert (
            on == GLM45.render([{"role": "user", "content": "Hi"}]) == "[gMASK]<sop><|user|>\nHi<|assistant|>"
        )

    def test_reasoning_after_the_last_user_turn_is_kept(self) -> None:
        messages = [
            *tool_turns("call_1")[:1],
            {"role": "assistant", "content": "Let me look.", "reasoning_content": "Use the tool."},
        ]
        assert GLM45.render(messages, enable_thinking=True).endswith(
            "<|assistant|>\n<think>Use the tool.</think>\nLet me look.<|assistant|>"
        )


class TestGlm47:
    def test_system_and_user_open_the_reasoning(self) -> None:
        assert GLM47.render(SYSTEM_USER) == "[gMASK]<sop><|system|>Be brief.<|user|>Hi<|assistant|><think>"

    def test_multi_turn_drops_old_reasoning_with_a_bare_close(self) -> None:
        assert GLM47.render(MULTI_TURN) == (
            "[gMASK]<sop><|user|>Hi<|assistant|></think>Hello!<|user|>2+2?<|assistant|><think>"
        )

    def test_tool_call_and_result(self) -> None:
        assert GLM47.render(tool_turns("call_1")) == (
            "[gMASK]<sop><|user|>Weather in Oslo?<|assistant|></think>"
            "<tool_call>get_weather<arg_key>city</arg_key><arg_value>Oslo</arg_value></tool_call>"
            "<|observation|><tool_response>12 C</tool_response><|assistant|><think>"
        )

    def test_tools_offered(self) -> None:
        prompt = GLM47.render([{"role": "user", "content": "Hi"}], tools=[WEATHER_TOOL])
        assert prompt.endswith(
            "format:\n<tool_call>{function-name}<arg_key>{arg-key-1}</arg_key><arg_value>{arg-value-1}"
            "</arg_value><arg_key>{arg-key-2}</arg_key><arg_value>{arg-value-2}</arg_value>...</tool_call>"
            "<|user|>Hi<|assistant|><think>"
        )
        assert f"<tools>\n{WEATHER_JSON}\n</tools>" in prompt

    def test_thinking_off_closes_the_block_in_the_prompt(self) -> None:
        prompt = GLM47.render([{"role": "user", "content": "Hi"}], enable_thinking=False)
        assert prompt == "[gMASK]<sop><|user|>Hi<|assistant|></think>"


class TestKimi:
    def test_system_and_user(self) -> None:
        assert KIMI.render(SYSTEM_USER) == (
            "<|im_system|>system<|im_middle|>Be brief.<|im_end|>"
            "<|im_user|>user<|im_middle|>Hi<|im_end|><|im_assistant|>assistant<|im_middle|>"
        )

    def test_default_system_prompt_and_multi_turn(self) -> None:
        assert KIMI.render(MULTI_TURN) == (
            "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>"
            "<|im_user|>user<|im_middle|>Hi<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|><think></think>Hello!<|im_end|>"
            "<|im_user|>user<|im_middle|>2+2?<|im_end|><|im_assistant|>assistant<|im_middle|>"
        )

    def test_tool_call_keeps_the_kimi_id_and_the_result_names_it(self) -> None:
        assert KIMI.render(tool_turns("functions.get_weather:0")) == (
            "<|im_system|>system<|im_middle|>You are Kimi, an AI assistant created by Moonshot AI.<|im_end|>"
            "<|im_user|>user<|im_middle|>Weather in Oslo?<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|><think></think><|tool_calls_section_begin|>"
            '<|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{"city": "Oslo"}'
            "<|tool_call_end|><|tool_calls_section_end|><|im_end|>"
            "<|im_system|>tool<|im_middle|>## Return of functions.get_weather:0\n12 C<|im_end|>"
            "<|im_assistant|>assistant<|im_middle|>"
        )

    def test_tools_offered_are_declared_first(self) -> None:
        prompt = KIMI.render([{"role": "user", "content": "Hi"}], tools=[WEATHER_TOOL])
        assert prompt.startswith(f"<|im_system|>tool_declare<|im_middle|>[{WEATHER_JSON}]<|im_end|>")

    def test_reasoning_is_kept_only_after_the_last_plain_answer(self) -> None:
        call = tool_turns("functions.get_weather:0")[1]["tool_calls"][0]
        messages: list[dict[str, Any]] = [
            {"role": "user", "content": "Q1"},
            {"role": "assistant", "content": "A1", "reasoning_content": "old"},
            {"role": "user", "content": "Q2"},
            {"role": "assistant", "content": "", "reasoning_content": "new", "tool_calls": [call]},
        ]
        prompt = KIMI.render(messages)
        assert "<think></think>A1" in prompt and "<think>new</think>" in prompt and "old" not in prompt

    def test_a_thinking_switch_is_refused(self) -> None:
        with pytest.raises(FamilyInputError, match="no thinking switch"):
            KIMI.render(SYSTEM_USER, enable_thinking=False)


class TestBadConversations:
    def test_tool_result_for_an_unknown_call_id(self) -> None:
        messages = [*tool_turns("call_1")[:2], {"role": "tool", "tool_call_id": "call_9", "content": "x"}]
        with pytest.raises(FamilyInputError, match="call_9"):
            GLM45.render(messages)

    def test_arguments_that_are_not_a_json_object(self) -> None:
        messages = tool_turns("call_1")
        messages[1]["tool_calls"][0]["function"]["arguments"] = "[1, 2]"
        with pytest.raises(FamilyInputError, match=r"arguments must be a JSON object"):
            GLM47.render(messages)

    def test_tool_call_without_an_id(self) -> None:
        messages = tool_turns("call_1")[:2]
        del messages[1]["tool_calls"][0]["id"]
        with pytest.raises(FamilyInputError, match="needs an id"):
            KIMI.render(messages)

    def test_unknown_family(self) -> None:
        with pytest.raises(FamilyInputError, match="known: glm4, glm45, glm47, kimi_k2"):
            family("llama9")


def test_argument_values_that_are_not_strings_are_written_as_json() -> None:
    messages = tool_turns("call_1")
    messages[1]["tool_calls"][0]["function"]["arguments"] = json.dumps({"days": 3, "units": ["C"]})
    assert "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n<arg_key>units</arg_key>\n" in GLM45.render(
        messages
    )


@pytest.mark.parametrize("name", ["glm45", "glm47", "kimi_k2"])
def test_each_family_recognises_its_own_template(name: str) -> None:
    assert family_of_template(family(name).template()) is family(name)


def test_an_unrelated_template_is_no_family() -> None:
    assert family_of_template("{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}") is None


def test_the_models_own_template_can_be_rendered_instead() -> None:
    own = "{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}"
    assert GLM45.render(SYSTEM_USER, template=own) == "[system:Be brief.][user:Hi]"
