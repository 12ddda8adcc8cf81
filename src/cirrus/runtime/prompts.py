"""Turn a generation's input into prompt tokens: raw text, or chat messages through the model's template."""

from typing import Any

from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from cirrus.runtime.llama import LlamaModel
from cirrus.runtime.params import GenerationInput


class InputError(ValueError):
    """The request cannot be served as asked; the message says why, param says which field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class PromptBuilder:
    def __init__(self, model: LlamaModel, template: str | None) -> None:
        self._model = model
        self._formatter = None
        if template:
            self._formatter = Jinja2ChatFormatter(
                template=template,
                eos_token=model.token_text(model.eos()),
                bos_token=model.token_text(model.bos()),
                stop_token_ids=[model.eos()],
            )

    @property
    def has_chat_template(self) -> bool:
        return self._formatter is not None

    def tokens(self, inputs: GenerationInput) -> list[int]:
        if inputs.messages is not None:
            return self._chat(list(inputs.messages))
        assert inputs.prompt is not None
        if inputs.raw or self._formatter is None:
            return self._model.tokenize(inputs.prompt, add_special=True)
        return self._chat([{"role": "user", "content": inputs.prompt}])

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
