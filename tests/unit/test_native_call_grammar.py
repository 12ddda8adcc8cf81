"""The grammar that forces tool calls in GLM's and Kimi's own markup (tool_choice "required" or a named tool).

Texts are followed through the grammar with cirrus.runtime.gbnf, which reads GBNF as llama.cpp does; the last
test decodes a scripted checkpoint in numpy with that grammar masking the logits, as llama.cpp's sampler does.
"""

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest

from cirrus.chat.options import ChatOptions
from cirrus.chat.plan import plan_chat
from cirrus.errors import InvalidInput
from cirrus.families import FamilyInputError, family, parse_output
from cirrus.families.gbnf_build import literal, prefixed, text_then
from cirrus.families.native_call_grammar import native_call_grammar
from cirrus.runtime.gbnf import GrammarState, parse_grammar
from cirrus.runtime.params import SamplingParams
from cirrus.testing.architectures import RMS_EPS
from cirrus.testing.scripted import (
    ANSWER,
    FORCED_CALLS,
    REASONING,
    SCRIPTS,
    WEATHER_CALL,
    WEATHER_TOOL,
    ScriptError,
    prompt_endings,
    write_scripted,
)
from cirrus.testing.scripts import Fallback
from cirrus.testing.vocab import TOKEN_FAMILIES, byte_alphabet

GLM45, GLM47, KIMI = family("glm45"), family("glm47"), family("kimi_k2")


def tool(name: str, properties: Mapping[str, Any] | None = None, **schema: Any) -> dict[str, Any]:
    parameters = {
        "type": "object",
        **({"properties": properties} if properties is not None else {}),
        **schema,
    }
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


CLOCK_TOOL = tool("get_time", {"zone": {"type": "string"}})
COUNT_TOOL = tool("count", {"n": {"type": "integer"}, "tags": {"type": "array", "items": {"type": "string"}}})


def state(grammar: str, text: str) -> GrammarState:
    return GrammarState.initial(parse_grammar(grammar)).feed(text.encode("utf-8"))


def accepts(grammar: str, text: str) -> bool:
    """`text` is a whole answer the grammar allows."""
    return state(grammar, text).complete


def allows_prefix(grammar: str, text: str) -> bool:
    return not state(grammar, text).dead


def glm47_call(name: str, *pairs: tuple[str, str]) -> str:
    body = "".join(f"<arg_key>{key}</arg_key><arg_value>{value}</arg_value>" for key, value in pairs)
    return f"<tool_call>{name}{body}</tool_call>"


def kimi_call(name: str, arguments: str, index: int = 0) -> str:
    return (
        f"<|tool_call_begin|>functions.{name}:{index}<|tool_call_argument_begin|>{arguments}<|tool_call_end|>"
    )


def kimi_section(*calls: str) -> str:
    return "<|tool_calls_section_begin|>" + "".join(calls) + "<|tool_calls_section_end|>"


class TestTheFamiliesOwnScripts:
    @pytest.mark.parametrize("name", list(SCRIPTS))
    def test_the_tool_call_script_is_allowed_and_the_answer_is_not(self, name: str) -> None:
        grammar = native_call_grammar(family(name), [WEATHER_TOOL])
        assert accepts(grammar, "".join(SCRIPTS[name]["tool_call"][:-1]))
        answer = SCRIPTS[name]["answer"]
        reasoning_end = answer.index("</think>") + 1
        assert allows_prefix(grammar, "".join(answer[:reasoning_end]))  # the reasoning is free
        assert not allows_prefix(grammar, "".join(answer[:-1]))  # the plain answer after it is not

    @pytest.mark.parametrize("name", list(SCRIPTS))
    def test_nothing_but_calls_after_the_reasoning(self, name: str) -> None:
        grammar = native_call_grammar(family(name), [WEATHER_TOOL])
        opened = "</think>" if family(name).prompt_opens_thinking else ""  # GLM-4.7 starts inside it
        assert not allows_prefix(grammar, opened + "Sure")
        assert not state(grammar, opened).complete  # at least one call


class TestReasoning:
    def test_glm47_starts_inside_the_reasoning_and_must_close_it(self) -> None:
        grammar = native_call_grammar(GLM47, [WEATHER_TOOL])
        call = glm47_call("get_weather", ("city", "Paris"))
        assert accepts(grammar, f"a < b and </thin k</think>{call}")
        assert accepts(grammar, f"</think>{call}")  # empty reasoning
        assert not accepts(grammar, call)  # a call written inside the reasoning is still reasoning
        assert not allows_prefix(grammar, f"done</think>{call}</think>")

    def test_glm47_with_thinking_off_calls_at_once(self) -> None:
        grammar = native_call_grammar(GLM47, [WEATHER_TOOL], enable_thinking=False)
        call = glm47_call("get_weather", ("city", "Paris"))
        assert accepts(grammar, call)
        assert not allows_prefix(grammar, f"hmm</think>{call}")

    def test_glm45_may_open_a_block_itself_unless_thinking_is_off(self) -> None:
        call = "<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n</tool_call>"
        on, off = (native_call_grammar(GLM45, [WEATHER_TOOL], switch) for switch in (None, False))
        assert accepts(on, f"\n<think>why</think>\n{call}") and accepts(on, call)
        assert accepts(off, call)
        assert not allows_prefix(off, "<think>")

    def test_kimi_may_open_a_block_itself(self) -> None:
        grammar = native_call_grammar(KIMI, [WEATHER_TOOL])
        section = kimi_section(kimi_call("get_weather", '{"city": "Paris"}'))
        assert accepts(grammar, section) and accepts(grammar, f"<think>first, the city</think>{section}")


class TestGlmCalls:
    def test_several_calls_to_the_offered_tools(self) -> None:
        grammar = native_call_grammar(GLM47, [WEATHER_TOOL, CLOCK_TOOL], enable_thinking=False)
        first, second = glm47_call("get_weather", ("city", "Paris")), glm47_call("get_time", ("zone", "CET"))
        assert accepts(grammar, first + second) and accepts(grammar, f"{first}\n{second}")
        assert not allows_prefix(grammar, "<tool_call>get_news")

    def test_only_declared_keys(self) -> None:
        grammar = native_call_grammar(GLM47, [WEATHER_TOOL], enable_thinking=False)
        assert not allows_prefix(grammar, "<tool_call>get_weather<arg_key>town")
        assert accepts(grammar, glm47_call("get_weather"))  # which keys are required is not enforced

    def test_a_string_value_is_any_text_without_the_closing_marker(self) -> None:
        grammar = native_call_grammar(GLM47, [WEATHER_TOOL], enable_thinking=False)
        assert accepts(grammar, glm47_call("get_weather", ("city", 'Paris <France> "x" </arg_val')))
        unclosed = "<tool_call>get_weather<arg_key>city</arg_key><arg_value>a</tool_call>"
        assert allows_prefix(grammar, unclosed) and not accepts(grammar, unclosed)  # still inside the value

    def test_other_values_are_json_their_schema_allows(self) -> None:
        grammar = native_call_grammar(GLM47, [COUNT_TOOL], enable_thinking=False)
        assert accepts(grammar, glm47_call("count", ("n", "3"), ("tags", '["a", "b"]')))
        assert not accepts(grammar, glm47_call("count", ("n", "three")))
        assert not accepts(grammar, glm47_call("count", ("tags", "a, b")))

    def test_the_glm45_newlines_are_optional(self) -> None:
        grammar = native_call_grammar(GLM45, [COUNT_TOOL], enable_thinking=False)
        assert accepts(
            grammar, "<tool_call>count\n<arg_key>n</arg_key>\n<arg_value>3</arg_value>\n</tool_call>"
        )
        assert accepts(grammar, "<tool_call>count<arg_key>n</arg_key><arg_value>3</arg_value></tool_call>")

    def test_any_key_where_the_schema_declares_none(self) -> None:
        grammar = native_call_grammar(GLM47, [tool("anything")], enable_thinking=False)
        assert accepts(grammar, glm47_call("anything", ("free key", "v <")))

    def test_no_keys_where_the_schema_declares_no_properties(self) -> None:
        grammar = native_call_grammar(GLM47, [tool("ping", {})], enable_thinking=False)
        assert accepts(grammar, glm47_call("ping"))
        assert not allows_prefix(grammar, "<tool_call>ping<arg_key>")

    def test_the_parser_reads_what_the_grammar_allows(self) -> None:
        grammar = native_call_grammar(GLM47, [COUNT_TOOL], enable_thinking=False)
        text = glm47_call("count", ("n", "3"), ("tags", '["a"]'))
        assert accepts(grammar, text)
        (call,) = parse_output(GLM47.output_parser([COUNT_TOOL], enable_thinking=False), text).tool_calls
        assert (call.name, call.arguments) == ("count", '{"n": 3, "tags": ["a"]}')


class TestKimiCalls:
    def test_arguments_follow_the_schema(self) -> None:
        grammar = native_call_grammar(KIMI, [WEATHER_TOOL])
        assert accepts(grammar, kimi_section(kimi_call("get_weather", '{"city": "Paris"}', 12)))
        assert not accepts(grammar, kimi_section(kimi_call("get_weather", '{"town": "Paris"}')))
        assert not accepts(grammar, kimi_section(kimi_call("get_weather", '{"city": 3}')))

    def test_several_calls_in_one_section_to_the_offered_tools_only(self) -> None:
        grammar = native_call_grammar(KIMI, [WEATHER_TOOL, COUNT_TOOL])
        calls = kimi_call("get_weather", '{"city": "Oslo"}'), kimi_call("count", '{"n": 2}', 1)
        assert accepts(grammar, kimi_section(*calls))
        assert not allows_prefix(grammar, "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_time")

    def test_an_empty_section_is_not_a_call(self) -> None:
        assert not accepts(native_call_grammar(KIMI, [WEATHER_TOOL]), kimi_section())


class TestGlm4Calls:
    """GLM-4 (9B-chat, 0414, Edge): `NAME\\n{json}` with no marker, further calls each after `<|assistant|>`."""

    GLM4 = family("glm4")

    def test_a_call_is_the_name_a_line_break_and_schema_valid_json(self) -> None:
        grammar = native_call_grammar(self.GLM4, [WEATHER_TOOL])
        assert accepts(grammar, 'get_weather\n{"city": "Paris"}')
        # the line break a text answer starts with may come first
        assert accepts(grammar, '\nget_weather\n{"city": "Paris"}')
        assert not accepts(grammar, 'get_weather\n{"city": 3}')
        assert not accepts(grammar, 'get_weather\n{"town": "Paris"}')
        assert not accepts(grammar, "get_weather\n")  # at least the arguments

    def test_only_calls_to_the_offered_tools(self) -> None:
        grammar = native_call_grammar(self.GLM4, [WEATHER_TOOL, COUNT_TOOL])
        assert not allows_prefix(grammar, "Sure")
        assert not allows_prefix(grammar, "get_news")
        assert not allows_prefix(grammar, "get_weather {")  # the name line ends at once

    def test_several_calls_each_after_an_assistant_turn(self) -> None:
        grammar = native_call_grammar(self.GLM4, [WEATHER_TOOL, COUNT_TOOL])
        text = 'get_weather\n{"city": "Oslo"}<|assistant|>count\n{"n": 2, "tags": ["a"]}'
        assert accepts(grammar, text)
        assert not allows_prefix(grammar, 'get_weather\n{"city": "Oslo"}\ncount')

    def test_an_optional_reasoning_block_first(self) -> None:
        grammar = native_call_grammar(self.GLM4, [WEATHER_TOOL])
        assert accepts(grammar, '<think>the city is Paris</think>\nget_weather\n{"city": "Paris"}')

    def test_the_parser_reads_what_the_grammar_allows(self) -> None:
        grammar = native_call_grammar(self.GLM4, [WEATHER_TOOL, COUNT_TOOL])
        text = 'get_weather\n{"city": "Oslo"}<|assistant|>count\n{"n": 3}'
        assert accepts(grammar, text)
        output = parse_output(self.GLM4.output_parser([WEATHER_TOOL, COUNT_TOOL]), text)
        assert [(c.name, c.arguments) for c in output.tool_calls] == [
            ("get_weather", '{"city": "Oslo"}'),
            ("count", '{"n": 3}'),
        ]
        assert (output.content, output.malformed) == ("", False)

    def test_plan_gives_glm4_the_call_grammar_for_a_named_tool(self) -> None:
        options = ChatOptions(tools=(WEATHER_TOOL, CLOCK_TOOL), tool_choice="get_time")
        messages = [{"role": "user", "content": "Time in Paris?"}]
        grammar = plan_chat(self.GLM4, messages, options, SamplingParams()).inputs.sampling.grammar
        assert grammar is not None
        assert accepts(grammar, 'get_time\n{"zone": "CET"}')
        assert not allows_prefix(grammar, "get_weather")


def test_no_tools_is_a_clear_error() -> None:
    with pytest.raises(FamilyInputError, match="at least one function"):
        native_call_grammar(KIMI, [])


class TestPlan:
    """plan_chat gives a native family the call grammar for "required" and a named tool, not for "auto"."""

    def plan(self, tool_choice: str, thinking: bool | None = None) -> str | None:
        options = ChatOptions(
            tools=(WEATHER_TOOL, CLOCK_TOOL), tool_choice=tool_choice, enable_thinking=thinking
        )
        messages = [{"role": "user", "content": "Weather in Paris?"}]
        return plan_chat(GLM47, messages, options, SamplingParams()).inputs.sampling.grammar

    def test_required_allows_every_offered_tool(self) -> None:
        grammar = self.plan("required")
        assert grammar == native_call_grammar(GLM47, [WEATHER_TOOL, CLOCK_TOOL])

    def test_a_named_tool_allows_that_one_only(self) -> None:
        grammar = self.plan("get_time", thinking=False)
        assert grammar is not None
        assert accepts(grammar, glm47_call("get_time", ("zone", "CET")))
        assert not allows_prefix(grammar, "<tool_call>get_weather")

    def test_auto_and_none_leave_the_answer_free(self) -> None:
        assert self.plan("auto") is None and self.plan("none") is None

    def test_a_grammar_error_is_a_400_on_tools(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr("cirrus.families.native_call_grammar.MAX_CALL_GRAMMAR_CHARS", 100)
        with pytest.raises(InvalidInput, match="call grammar") as raised:
            self.plan("required")
        assert raised.value.param == "tools"


class TestGbnfBuild:
    def test_literals_escape_quotes_backslashes_and_control_characters(self) -> None:
        assert literal('a"b\\c\nd\x01') == '"a\\"b\\\\c\\nd\\x01"'
        text = '\x01é"'
        assert accepts("root ::= " + literal(text) + "\n", text)

    @pytest.mark.parametrize(
        ("text", "whole"),
        [("x</think>", True), ("</think>", True), ("<</think>", True), ("</thi</think>", True), ("x", False)],
    )
    def test_text_then_a_marker(self, text: str, whole: bool) -> None:
        grammar = "root ::= t-0\n" + "\n".join(text_then("t", "</think>")) + "\n"
        assert accepts(grammar, text) == whole
        assert not allows_prefix(grammar, "a</think>b")  # the marker ends the text

    def test_a_marker_with_repeated_characters(self) -> None:
        grammar = "root ::= t-0\n" + "\n".join(text_then("t", "aab")) + "\n"
        assert accepts(grammar, "aaab") and accepts(grammar, "abaab")
        assert not allows_prefix(grammar, "aabx")

    def test_prefixed_renames_rules_not_literals_or_classes(self) -> None:
        grammar = 'root ::= "root" item{1,2} [a-z]\nitem ::= "item" root?\n'
        assert prefixed(grammar, "p-") == 'p-root ::= "root" p-item{1,2} [a-z]\np-item ::= "item" p-root?\n'


# ---- a scripted checkpoint, decoded in numpy under the grammar ----------------------------------------------

FAMILY_ARCH = {"glm45": "glm4moe", "glm47": "deepseek2-glm", "kimi_k2": "deepseek2", "kimi_k25": "deepseek2"}


def pieces(reader: gguf.GGUFReader, specials: Sequence[str]) -> list[bytes]:
    """Each token's text as llama.cpp's grammar sampler reads it: a special token as its own text."""
    to_byte = {char: code for code, char in byte_alphabet().items()}
    tokens = list(reader.fields["tokenizer.ggml.tokens"].contents())
    return [t.encode() if t in specials else bytes(to_byte[c] for c in t) for t in tokens]


def masked_greedy(path: Path, name: str, grammar: str | None, limit: int = 40) -> list[bytes]:
    """Greedy decoding after the prompt's last token; with a grammar, the best token it allows, and an end
    token only where it is complete."""
    tokens_family = TOKEN_FAMILIES["kimi" if name.startswith("kimi") else "glm"]
    reader = gguf.GGUFReader(path)
    texts, ends = (
        pieces(reader, tokens_family.specials),
        {tokens_family.eos, tokens_family.eot, tokens_family.eom},
    )
    end_ids = {i for i, t in enumerate(reader.fields["tokenizer.ggml.tokens"].contents()) if t in ends}
    embeddings, output = (
        np.asarray(next(t for t in reader.tensors if t.name == n).data, np.float64)
        for n in ("token_embd.weight", "output.weight")
    )
    token = list(reader.fields["tokenizer.ggml.tokens"].contents()).index(
        prompt_endings(family(name).template(), tokens_family)[0]
    )
    current = GrammarState.initial(parse_grammar(grammar)) if grammar else None
    written: list[bytes] = []
    while len(written) < limit and token not in end_ids:
        hidden = embeddings[token] / np.sqrt(np.mean(embeddings[token] ** 2) + RMS_EPS)
        for token in np.argsort(-(output @ hidden), kind="stable"):
            if current is None:
                break
            if token in end_ids:
                if current.complete:
                    break
            elif not (following := current.feed(texts[token])).dead:
                current = following
                break
        written.append(texts[token])
    return written


@pytest.mark.parametrize("name", list(FORCED_CALLS))
def test_a_scripted_answer_is_forced_into_its_families_call(name: str, tmp_path: Path) -> None:
    answer, fallback = FORCED_CALLS[name]
    path = write_scripted(
        FAMILY_ARCH[name],
        tmp_path / "m.gguf",
        template=family(name).template(),
        script=answer,
        fallback=fallback,
    )
    free = b"".join(masked_greedy(path, name, None)).decode()
    assert free.endswith(ANSWER + answer[-1])  # unconstrained, it answers in text

    forced = masked_greedy(path, name, native_call_grammar(family(name), [WEATHER_TOOL]))
    output = parse_output(family(name).output_parser([WEATHER_TOOL]), b"".join(forced[:-1]).decode())
    assert (output.reasoning, output.content, output.malformed) == (REASONING, "", False)
    assert [(c.name, c.arguments) for c in output.tool_calls] == [(WEATHER_CALL[0], '{"city": "Paris"}')]
    assert forced[-1].decode() == fallback.script[-1]  # the family's end of a calling turn


def test_a_fallback_that_shares_a_followed_token_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ScriptError, match="one successor"):
        write_scripted(
            "deepseek2",
            tmp_path / "m.gguf",
            template=KIMI.template(),
            script=SCRIPTS["kimi_k2"]["answer"],
            fallback=Fallback("</think>", ("It", "<|im_end|>")),
        )
