"""llama.cpp through llama-cpp-python: load a GGUF, render chats, generate token by token.

Runs inside a worker process only; the server never imports it.
"""

import ctypes
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import llama_cpp
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

from cirrus.runtime.params import GenerationInput, SamplingParams
from cirrus.runtime.textstream import StopMatcher, Utf8Assembler

RANDOM_SEED = 0xFFFFFFFF


class EngineInputError(ValueError):
    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass
class GenerationResult:
    finish_reason: str = "length"
    prompt_tokens: int = 0
    completion_tokens: int = 0


class LlamaEngine:
    def __init__(self, path: str, n_ctx: int, n_threads: int, chat_template: str | None) -> None:
        self._llm = llama_cpp.Llama(
            model_path=path,
            n_ctx=n_ctx,
            n_threads=n_threads,
            n_threads_batch=n_threads,
            use_mmap=True,
            verbose=False,
        )
        template = chat_template or self._llm.metadata.get("tokenizer.chat_template")
        self._formatter = self._chat_formatter(template) if template else None
        self._piece_buffer = ctypes.create_string_buffer(64)

    def _chat_formatter(self, template: str) -> Jinja2ChatFormatter:
        model = self._llm._model
        eos, bos = self._llm.token_eos(), self._llm.token_bos()
        return Jinja2ChatFormatter(
            template=template,
            eos_token=model.token_get_text(eos) if eos != -1 else "",
            bos_token=model.token_get_text(bos) if bos != -1 else "",
            stop_token_ids=[eos],
        )

    @property
    def n_ctx(self) -> int:
        return int(self._llm.n_ctx())

    @property
    def has_chat_template(self) -> bool:
        return self._formatter is not None

    def prompt_tokens(self, inputs: GenerationInput) -> list[int]:
        if inputs.messages is not None:
            return self._render_chat(list(inputs.messages))
        assert inputs.prompt is not None
        if inputs.raw or self._formatter is None:
            return self._tokenize(inputs.prompt, add_special=True)
        return self._render_chat([{"role": "user", "content": inputs.prompt}])

    def _render_chat(self, messages: list[dict[str, object]]) -> list[int]:
        if self._formatter is None:
            raise EngineInputError(
                "this model has no chat template: send 'prompt' (text completion) instead of 'messages'",
                param="messages",
            )
        try:
            rendered = self._formatter(messages=messages)  # type: ignore[arg-type]
        except Exception as exc:  # a template's raise_exception() or a Jinja error on odd input
            raise EngineInputError(f"the chat template rejected these messages: {exc}", "messages") from exc
        return self._tokenize(rendered.prompt, add_special=not rendered.added_special)

    def _tokenize(self, text: str, add_special: bool) -> list[int]:
        return list(self._llm.tokenize(text.encode("utf-8"), add_bos=add_special, special=True))

    def generate(
        self, inputs: GenerationInput, emit: Callable[[str], None], cancelled: Callable[[], bool]
    ) -> GenerationResult:
        tokens = self.prompt_tokens(inputs)
        result = GenerationResult(prompt_tokens=len(tokens))
        budget = self._completion_budget(len(tokens), inputs.sampling.max_tokens)
        matcher, utf8 = StopMatcher(inputs.sampling.stop), Utf8Assembler()
        for token in self._tokens(tokens, inputs.sampling):
            if cancelled():
                result.finish_reason = "cancelled"
                return result
            if self._is_end(token):
                result.finish_reason = "stop"
                break
            result.completion_tokens += 1
            text = matcher.feed(utf8.feed(self._piece(token)))
            if text:
                emit(text)
            if matcher.stopped:
                result.finish_reason = "stop"
                return result
            if result.completion_tokens >= budget:
                break
        tail = matcher.feed(utf8.flush()) + matcher.flush()
        if tail:
            emit(tail)
        return result

    def _completion_budget(self, prompt_tokens: int, max_tokens: int) -> int:
        room = self.n_ctx - prompt_tokens
        if room <= 0:
            raise EngineInputError(
                f"the prompt is {prompt_tokens} tokens, which does not fit this model's context window of "
                f"{self.n_ctx} tokens",
                param="prompt",
            )
        return min(max_tokens, room)

    def _tokens(self, prompt: list[int], sampling: SamplingParams) -> Iterator[int]:
        self._llm.set_seed(sampling.seed if sampling.seed is not None else RANDOM_SEED)
        if sampling.seed is not None:
            # Logits from a reused prefix differ in the last bits from a full evaluation, enough to change a
            # sampled token; a seeded request asks for repeatability, so it evaluates its whole prompt.
            self._llm.reset()  # type: ignore[no-untyped-call]
        repeat = sampling.repetition_penalty if sampling.repetition_penalty > 0 else 1.0
        yield from self._llm.generate(
            prompt,
            top_k=sampling.top_k,
            top_p=sampling.top_p,
            min_p=0.0,
            temp=sampling.temperature,
            repeat_penalty=repeat,
            frequency_penalty=sampling.frequency_penalty,
            presence_penalty=sampling.presence_penalty,
        )

    def _is_end(self, token: int) -> bool:
        return bool(llama_cpp.llama_vocab_is_eog(self._llm._model.vocab, token))

    def _piece(self, token: int) -> bytes:
        vocab = self._llm._model.vocab
        size = llama_cpp.llama_token_to_piece(
            vocab, token, self._piece_buffer, len(self._piece_buffer), 0, False
        )
        if size < 0:  # the buffer was too small; it says how much is needed
            self._piece_buffer = ctypes.create_string_buffer(-size)
            size = llama_cpp.llama_token_to_piece(vocab, token, self._piece_buffer, -size, 0, False)
        return self._piece_buffer.raw[:size]
