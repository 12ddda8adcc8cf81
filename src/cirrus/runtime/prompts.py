"""Turn a generation's input into prompt tokens: raw text, or chat messages through the model's template or,
for a known family (cirrus.families), the family's format with its tools and thinking switch."""

from typing import Any

from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from cirrus.families import Family, FamilyInputError, family
from cirrus.runtime.llama import LlamaModel
from cirrus.runtime.params import GenerationInput


class InputError(ValueError):
    """The request cannot be served as asked; the message says why, param says which field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def compile_template(template: str) -> Jinja2ChatFormatter:
    """The template compiled; the text of the model's start and end tokens is set once the model is loaded
    (`PromptBuilder`): the formatter reads them only when it renders."""
    return Jinja2ChatFormatter(template=template, eos_token="", bos_token="")


class PromptBuilder:
    def __init__(
        self, model: LlamaModel, template: str | None, compiled: Jinja2ChatFormatter | None = None
    ) -> None:
        """`compiled`: this template already compiled (`compile_template`; `runtime.load_ahead` does it while the
        model loads); compiled here otherwise."""
        self._model = model
        self._template = template
        self._formatter = None
        if template:
            if compiled is None or compiled.template != template:
                compiled = compile_template(template)
            compiled.eos_token = model.token_text(model.eos())
            compiled.bos_token = model.token_text(model.bos())
            self._formatter = compiled

    @property
    def has_chat_template(self) -> bool:
        return self._formatter is not None

    def tokens(self, inputs: GenerationInput) -> list[int]:
        if inputs.prompt is not None and (inputs.raw or (self._formatter is None and not inputs.family)):
            return self._model.tokenize(inputs.prompt, add_special=True)
        messages = list(inputs.messages or [{"role": "user", "content": inputs.prompt}])
        if inputs.family:
            return self._family_chat(inputs, messages)
        return self._chat(messages)

    def _family_chat(self, inputs: GenerationInput, messages: list[dict[str, Any]]) -> list[int]:
        try:
            chat_format = family(str(inputs.family))
            prompt = self._render_family(chat_format, inputs, messages)
        except FamilyInputError as exc:
            raise InputError(str(exc), exc.param or "messages") from exc
        bos = self._model.token_text(self._model.bos())
        return self._model.tokenize(prompt, add_special=not (bos and prompt.startswith(bos)))

    def _render_family(
        self, chat_format: Family, inputs: GenerationInput, messages: list[dict[str, Any]]
    ) -> str:
        """The model's own template first; the family's when the model has none or its own fails to render."""
        tools, thinking = list(inputs.tools) if inputs.tools else None, inputs.enable_thinking
        if self._template:
            try:
                return chat_format.render(messages, tools, thinking, template=self._template)
            except FamilyInputError:
                pass  # a bad conversation fails the family's template the same way, with the same message
        return chat_format.render(messages, tools, thinking)

    def _chat(self, messages: list[dict[str, Any]]) -> list[int]:
        if self._formatter is None:
            raise InputError(
                "this model has no chat template: send 'prompt' (text completion) instead of 'messages'",
                param="messages",
            )
        try:
            rendered = self._formatter(messages=messages)  # type: ignore[arg-type]
        except Exception as exc:  # a template's raise_exception() or a Jinja error on odd input
            raise InputError(f"the chat template rejected these messages: {exc}", "messages") from exc
        return self._model.tokenize(rendered.prompt, add_special=not rendered.added_special)
