"""What a chat request becomes: the generation input the worker runs, and how its answer is parsed.

Rules beyond the families' own:
- A thinking switch needs a family that has one: any other model gets a 400.
- JSON mode is constrained by a grammar, which the worker closes before max_tokens runs out. It refuses tools
  (one grammar per answer). Streamed, the text goes out as it comes and is checked whole at the end; Workers AI's
  refusal of streamed JSON mode is its adapter's (`api/workers_ai/inputs.py`). On a family with a thinking switch it turns thinking off (a grammar cannot allow a thinking block);
  asking for both is a 400.
- Tools on a native family (GLM, Kimi) go to the family's template and are parsed from its format; a named
  tool_choice narrows the tools offered to that one. "required" and a named tool are enforced by a grammar over
  the family's own call markup (`native_call_grammar`): reasoning first where the thinking switch allows it,
  then only calls to the offered tools.
- Tools on any other model are prompted and grammar-constrained (`prompted`).
"""

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cirrus.chat.options import ChatOptions
from cirrus.chat.prompted import PromptedToolParser, call_grammar, prompted_messages
from cirrus.errors import InvalidInput
from cirrus.families import ChatOutputParser, Family, FamilyInputError
from cirrus.families.json_schema_grammar import json_object_grammar, json_schema_grammar
from cirrus.families.messages import prepare_messages
from cirrus.families.native_call_grammar import native_call_grammar
from cirrus.runtime.params import GenerationInput, SamplingParams

THINKING = "chat_template_kwargs.enable_thinking"


@dataclass(frozen=True)
class ChatPlan:
    inputs: GenerationInput
    family: Family | None
    options: ChatOptions

    @property
    def json_mode(self) -> bool:
        return self.options.json_format is not None

    def parser(self) -> ChatOutputParser:
        tools = self.options.offered_tools() if not self.json_mode else ()
        if self.family is not None:
            return self.family.output_parser(list(tools) or None, self.inputs.enable_thinking)
        return ChatOutputParser(None, PromptedToolParser(tools) if tools else None)


def plan_chat(
    family: Family | None,
    messages: Sequence[Mapping[str, Any]] | None,
    options: ChatOptions,
    sampling: SamplingParams,
    prompt: str | None = None,
) -> ChatPlan:
    """`messages`, or a `prompt` that the chat template wraps as one user turn."""
    _check_combinations(family, options)
    chat = [dict(m) for m in messages] if messages is not None else [{"role": "user", "content": prompt}]
    _check_conversation(family, chat)
    thinking = False if options.json_format and family and family.thinking_switch else options.enable_thinking
    grammar = _grammar(family, options)
    # JSON answers and forced prompted tool calls (JSON only) are closed by the worker before max_tokens runs
    # out. Not "auto" calls: their grammar also allows plain text, which has no closing to steer towards.
    forced_call = family is None and options.calls_tools and options.tool_choice != "auto"
    closes_json = options.json_format is not None or forced_call
    sampling = dataclasses.replace(sampling, json_mode=closes_json)
    if family is not None:
        tools = options.offered_tools() or None
        stop = tuple(dict.fromkeys((*sampling.stop, *family.stop)))
        inputs = GenerationInput(
            messages=tuple(dict(m) for m in chat),
            sampling=dataclasses.replace(sampling, stop=stop, grammar=grammar),
            family=family.name,
            tools=tools,
            enable_thinking=thinking,
        )
    else:
        rewritten = prompted_messages(chat, options.offered_tools())
        plain = messages is None and rewritten == chat
        inputs = GenerationInput(
            prompt=prompt if plain else None,
            messages=None if plain else tuple(rewritten),
            sampling=dataclasses.replace(sampling, grammar=grammar),
        )
    return ChatPlan(inputs, family, dataclasses.replace(options, enable_thinking=thinking))


def _check_combinations(family: Family | None, options: ChatOptions) -> None:
    if options.enable_thinking is not None and (family is None or not family.thinking_switch):
        what = f"the {family.name} chat format" if family else "this model's chat format"
        raise InvalidInput(f"{what} has no thinking switch: leave out '{THINKING}'", param=THINKING)
    if options.json_format is None:
        return
    if options.calls_tools:
        raise InvalidInput(
            'JSON mode (response_format) and tools cannot be combined: send tool_choice "none" or leave one out',
            param="response_format",
        )
    if options.enable_thinking:
        raise InvalidInput(
            f"JSON mode (response_format) needs thinking off: leave out '{THINKING}'", param=THINKING
        )


def _check_conversation(family: Family | None, messages: list[dict[str, Any]]) -> None:
    """Tool calls and results in the history: ids that match, arguments that are JSON objects."""
    try:
        prepare_messages(messages, decode_arguments=family.decode_arguments if family else True)
    except FamilyInputError as exc:
        raise InvalidInput(str(exc), param=exc.param or "messages") from None


def _grammar(family: Family | None, options: ChatOptions) -> str | None:
    json_format = options.json_format
    if json_format is not None:
        if json_format.schema is None:
            return json_object_grammar()
        return json_schema_grammar(json_format.schema)
    if family is None and options.calls_tools:
        return call_grammar(options.offered_tools(), required=options.tool_choice != "auto")
    if family is not None and options.calls_tools and options.tool_choice != "auto":
        try:
            return native_call_grammar(family, options.offered_tools(), options.enable_thinking)
        except FamilyInputError as exc:
            raise InvalidInput(str(exc), param=exc.param or "tools") from None
    return None
