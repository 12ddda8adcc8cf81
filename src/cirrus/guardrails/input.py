"""The guard on a generation's input, before it costs compute: well-formed text, a bounded prompt, and the
deny patterns of the model and account."""

import unicodedata
from collections.abc import Iterator, Sequence
from dataclasses import replace

from cirrus.errors import InputRefused, InvalidInput
from cirrus.guardrails.patterns import compile_deny_patterns
from cirrus.runtime.params import ChatMessage, GenerationInput

Field = tuple[str, str]  # (where, as the client names it: "messages[2].content"; the text)


class InputGuard:
    """Built once per (model, account) and shared by its requests: it holds only compiled patterns."""

    def __init__(self, max_prompt_chars: int, deny_patterns: Sequence[str] = ()) -> None:
        self.max_prompt_chars = max_prompt_chars
        self._deny = compile_deny_patterns(deny_patterns)

    def check(self, inputs: GenerationInput) -> GenerationInput:
        """The same input with its prompt texts in Unicode NFC; raises InvalidInput or InputRefused."""
        prompt = _prompt_fields(inputs)
        self._check_length(inputs, prompt)
        for where, text in [*prompt, *_other_fields(inputs)]:
            _check_characters(where, text)
        normalised = [(where, unicodedata.normalize("NFC", text)) for where, text in prompt]
        for where, text in normalised:
            self._check_policy(where, text)
        return _with_texts(inputs, [text for _, text in normalised])

    def check_texts(self, fields: Sequence[Field]) -> list[str]:
        """Named texts (e.g. `input[2]`) checked as a prompt is, each on its own; returned in Unicode NFC."""
        checked = []
        for where, text in fields:
            if len(text) > self.max_prompt_chars:
                raise InvalidInput(
                    f"'{where}' is too long: {len(text)} characters, at most {self.max_prompt_chars} are allowed",
                    param=where,
                )
            _check_characters(where, text)
            normalised = unicodedata.normalize("NFC", text)
            self._check_policy(where, normalised)
            checked.append(normalised)
        return checked

    def _check_length(self, inputs: GenerationInput, prompt: list[Field]) -> None:
        """Counted as sent, before normalisation, like the schemas' own limits."""
        total = sum(len(text) for _, text in prompt)
        if total <= self.max_prompt_chars:
            return
        where, what = ("prompt", "") if inputs.prompt is not None else ("messages", " in all contents")
        raise InvalidInput(
            f"'{where}' is too long: {total} characters{what}, at most {self.max_prompt_chars} are allowed",
            param=where,
        )

    def _check_policy(self, where: str, text: str) -> None:
        """The message never names the pattern nor echoes the text it matched."""
        if any(pattern.search(text) for pattern in self._deny):
            raise InputRefused(f"'{where}' was refused by a guardrail policy", param=where)


def _prompt_fields(inputs: GenerationInput) -> list[Field]:
    """The texts the model reads: the prompt, or each message's content."""
    if inputs.prompt is not None:
        return [("prompt", inputs.prompt)]
    return [(f"messages[{index}].content", content) for index, content in _contents(inputs.messages or ())]


def _contents(messages: Sequence[ChatMessage]) -> Iterator[tuple[int, str]]:
    for index, message in enumerate(messages):
        content = message.get("content")
        if content is None:
            continue
        if not isinstance(content, str):
            where = f"messages[{index}].content"
            raise InvalidInput(f"'{where}' must be a string", param=where)
        yield index, content


def _other_fields(inputs: GenerationInput) -> Iterator[Field]:
    """Texts that reach the worker without being prompt: checked for bad characters, never rewritten."""
    for index, message in enumerate(inputs.messages or ()):
        for key, value in message.items():
            if key != "content" and isinstance(value, str):
                yield f"messages[{index}].{key}", value
    for index, stop in enumerate(inputs.sampling.stop):
        yield f"stop[{index}]", stop


def _check_characters(where: str, text: str) -> None:
    nul = text.find("\x00")
    if nul >= 0:
        raise InvalidInput(
            f"'{where}' contains a NUL character (U+0000) at character index {nul}", param=where
        )
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidInput(
            f"'{where}' contains a lone surrogate (U+{ord(text[error.start]):04X}) at character index "
            f"{error.start}, which is not valid Unicode and cannot be encoded as UTF-8",
            param=where,
        ) from None


def _with_texts(inputs: GenerationInput, texts: list[str]) -> GenerationInput:
    if inputs.prompt is not None:
        return replace(inputs, prompt=texts[0])
    if inputs.messages is None:
        return inputs
    contents = iter(texts)
    messages = tuple(
        message if message.get("content") is None else {**message, "content": next(contents)}
        for message in inputs.messages
    )
    return replace(inputs, messages=messages)
