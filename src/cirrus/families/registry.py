"""The model families Cirrus knows by name: their chat template, thinking markers and tool-call parser."""

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from cirrus.families.errors import FamilyInputError
from cirrus.families.glm import GlmToolCallParser
from cirrus.families.glm4 import Glm4ToolCallParser
from cirrus.families.kimi import KimiToolCallParser
from cirrus.families.messages import prepare_messages
from cirrus.families.output import ChatOutputParser
from cirrus.families.reasoning import ReasoningSplitter
from cirrus.families.render import render_template
from cirrus.families.toolcalls import ToolCallParser

# A family's tool-call parser class, made with the tools the request offers.
ToolParserFactory = Callable[[Iterable[Mapping[str, Any]] | None], ToolCallParser]


@dataclass(frozen=True)
class Family:
    name: str
    template_file: str
    tool_parser: ToolParserFactory
    decode_arguments: bool  # the template iterates tool-call arguments as a mapping
    thinking_switch: bool  # the template reads `enable_thinking`
    prompt_opens_thinking: bool  # with thinking on, the prompt ends inside `<think>`
    stop: tuple[str, ...]  # text that ends the assistant's turn besides the model's end-of-generation token
    think_open: str = "<think>"
    think_close: str = "</think>"
    thinking_kwarg: str = "enable_thinking"  # the template variable its thinking switch reads
    recognised_by: tuple[str, ...] = field(default=())  # text only this family's templates contain (any one)
    recognised_along: tuple[str, ...] = field(default=())  # text its templates contain as well (all of it)
    # False where the model's own template (from its GGUF) cannot render an OpenAI-shaped conversation: ours
    # renders every prompt instead.
    renders_with_model_template: bool = True

    def template(self) -> str:
        return resources.files("cirrus.families").joinpath("templates", self.template_file).read_text("utf-8")

    def template_kwargs(self, enable_thinking: bool | None) -> dict[str, Any]:
        if enable_thinking is None:
            return {}
        if not self.thinking_switch:
            raise FamilyInputError(
                f"the {self.name} chat format has no thinking switch: leave out chat_template_kwargs.enable_thinking",
                "chat_template_kwargs",
            )
        return {self.thinking_kwarg: enable_thinking}

    def writes(self, template: str) -> bool:
        """Whether `template` (a model's own, from its GGUF) is one of this family's."""
        return any(marker in template for marker in self.recognised_by) and all(
            text in template for text in self.recognised_along
        )

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None = None,
        enable_thinking: bool | None = None,
        template: str | None = None,
    ) -> str:
        """The prompt, with our template or `template` (the model's own, from its GGUF metadata) where the family
        can use it."""
        own = template if self.renders_with_model_template else None
        return render_template(
            own or self.template(),
            prepare_messages(messages, self.decode_arguments),
            tools,
            **self.template_kwargs(enable_thinking),
        )

    def output_parser(
        self, tools: Sequence[Mapping[str, Any]] | None = None, enable_thinking: bool | None = None
    ) -> ChatOutputParser:
        starts_inside = self.prompt_opens_thinking and enable_thinking is not False
        splitter = ReasoningSplitter(self.think_open, self.think_close, starts_inside)
        return ChatOutputParser(splitter, self.tool_parser(tools) if tools else None)


GLM45 = Family(
    name="glm45",
    template_file="glm45.jinja",
    tool_parser=GlmToolCallParser,
    decode_arguments=True,
    thinking_switch=True,
    prompt_opens_thinking=False,
    stop=("<|user|>", "<|observation|>"),
    recognised_by=("<arg_key>{arg-key-1}</arg_key>\\n", "<arg_key>{arg-key-1}</arg_key>\n"),
)
GLM47 = Family(
    name="glm47",
    template_file="glm47.jinja",
    tool_parser=GlmToolCallParser,
    decode_arguments=True,
    thinking_switch=True,
    prompt_opens_thinking=True,
    stop=("<|user|>", "<|observation|>"),
    recognised_by=("<tool_call>{function-name}<arg_key>",),
)
# GLM-4-9B-chat and GLM-4-0414 (cirrus.families.glm4). Their own templates take a call as `metadata` and a
# result as role `observation` (and 9B-chat's reads the tools from a message), so an OpenAI-shaped conversation
# would render through them without its tool turns: ours renders every prompt. Recognised by the Chinese line
# that closes each tool's description, with the prefix only GLM templates write; GLM-4.5 and later describe their
# tools in English. GLM-Edge's template has neither the prefix nor tools: it is served with its own template.
GLM4 = Family(
    name="glm4",
    template_file="glm4.jinja",
    tool_parser=Glm4ToolCallParser,
    decode_arguments=True,
    thinking_switch=False,
    prompt_opens_thinking=False,
    stop=("<|user|>", "<|observation|>"),
    recognised_by=("请使用 Json 格式表示调用的参数",),
    recognised_along=("[gMASK]<sop>",),
    renders_with_model_template=False,
)
KIMI_K2 = Family(
    name="kimi_k2",
    template_file="kimi_k2.jinja",
    tool_parser=KimiToolCallParser,
    decode_arguments=False,
    thinking_switch=False,
    prompt_opens_thinking=False,
    stop=("<|im_end|>",),
    recognised_by=("<|tool_calls_section_begin|>", "<|im_middle|>"),
)
# K2.5 and K2.6 (one format): K2-Thinking's turns and calls, with a thinking switch read from `thinking`; the
# generation prompt opens the reasoning unless it is false. Their templates also contain K2's `<|im_middle|>`, so
# they are recognised first.
KIMI_K25 = Family(
    name="kimi_k25",
    template_file="kimi_k25.jinja",
    tool_parser=KimiToolCallParser,
    decode_arguments=False,
    thinking_switch=True,
    prompt_opens_thinking=True,
    stop=("<|im_end|>",),
    thinking_kwarg="thinking",
    recognised_by=("thinking is defined and thinking is false",),
    recognised_along=("<|im_middle|>",),
)
FAMILIES: dict[str, Family] = {family.name: family for family in (GLM4, GLM45, GLM47, KIMI_K2, KIMI_K25)}


def family(name: str) -> Family:
    try:
        return FAMILIES[name]
    except KeyError:
        known = ", ".join(sorted(FAMILIES))
        raise FamilyInputError(f"unknown model family {name!r}; known: {known}") from None


def family_of_template(template: str) -> Family | None:
    """Which family a model's own chat template (from its GGUF) writes, by text only that family's use."""
    for candidate in (GLM47, GLM45, GLM4, KIMI_K25, KIMI_K2):
        if candidate.writes(template):
            return candidate
    return None
