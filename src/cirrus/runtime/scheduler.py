"""Continuous batching: every decode step carries one token for each running sequence, and new requests join at
the next step with their prompts fed in chunks, so running streams never wait for a long prompt.

Sequences live in one KV cache shared by all of them (llama.cpp's unified cache). What a sequence leaves there when
it ends stays findable (`runtime.prefix_cache`), so a later prompt that starts the same way (a system prompt, the
earlier turns of a chat) reuses those cells instead of recomputing them.

llama.cpp applies LoRA adapters to a whole context, not per sequence, so a step decodes the sequences of one
adapter (or of none) only: the adapters present take turns, step by step. Cells computed under an adapter are
cached under it and never shared with another adapter's prompts.
"""

import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from cirrus.runtime.adapters import AdapterError, Adapters, AdapterTurns
from cirrus.runtime.counting import counted
from cirrus.runtime.frames import Frame
from cirrus.runtime.gbnf import GrammarSyntaxError
from cirrus.runtime.json_closing import closing_for
from cirrus.runtime.json_steering import ClosingTokens, JsonSteering
from cirrus.runtime.llama import GrammarError, LlamaError, LlamaModel, Sampler
from cirrus.runtime.params import GenerationInput, SamplingParams
from cirrus.runtime.prefix_cache import PrefixCache
from cirrus.runtime.prompts import InputError, PromptBuilder
from cirrus.runtime.sequence import ReasoningCounter, Sequence, ThinkingMarkers

log = logging.getLogger(__name__)
Send = Callable[[Frame], None]
BACKGROUND_PREFILL_TOKENS = 16  # about 50 ms of prompt on 2 cores for a 135M model


@dataclass
class StepPlan:
    entries: list[tuple[int, int, int, bool]] = field(default_factory=list)
    fed: list[tuple[Sequence, list[int]]] = field(default_factory=list)
    sampled: list[tuple[Sequence, int]] = field(default_factory=list)
    adapter: str | None = None  # the LoRA adapter every sequence in the step runs with


class BatchScheduler:
    def __init__(
        self,
        model: LlamaModel,
        prompts: PromptBuilder,
        slots: int,
        context_per_sequence: int,
        send: Send,
        is_cancelled: Callable[[str], bool],
        cache: PrefixCache,
    ) -> None:
        self._model = model
        self._prompts = prompts
        self._context = context_per_sequence
        self._send = send
        self._is_cancelled = is_cancelled
        self._slots = slots
        self._cache = cache
        self._running: list[Sequence] = []
        self._waiting: deque[Frame] = deque()
        self._thinking = _thinking_markers(model)
        self._closing_tokens = ClosingTokens(model)
        self._adapters = Adapters(model.load_adapter, model.free_adapter)
        self._turns = AdapterTurns()  # with several adapters running, whose step is next

    @property
    def busy(self) -> bool:
        return bool(self._running or self._waiting)

    def set_threads(self, threads: int) -> None:
        self._model.set_threads(threads)

    def work_while_idle(self) -> bool:
        """With nothing to run, save ahead one idle sequence the prefix cache would evict next; False when there
        is nothing left to do."""
        return not self.busy and self._cache.save_ahead()

    def submit(self, frame: Frame) -> None:
        if frame["type"] == "count":  # rendered and tokenized only: answered now, without a slot
            self._send(counted(self._prompts, frame))
            return
        self._waiting.append(frame)

    def step(self) -> None:
        for sequence in [s for s in self._running if self._is_cancelled(s.request_id)]:
            self._finish(sequence, "cancelled")
        self._admit()
        plan = self._decode_next()
        for sequence, index in plan.sampled:
            self._advance_guarded(sequence, index)

    # -- admission --------------------------------------------------------------------------------------------

    def _admit(self) -> None:
        while self._waiting and len(self._running) < self._slots:
            frame = self._waiting.popleft()
            request_id = str(frame["id"])
            if self._is_cancelled(request_id):
                self._send_finished(request_id, "cancelled", 0, 0, 0)
                continue
            try:
                self._start(request_id, GenerationInput.from_frame(frame["input"]))
            except InputError as exc:
                self._fail(request_id, "invalid_input", str(exc), exc.param)
            except GrammarError as exc:
                self._fail(request_id, "invalid_input", str(exc), "response_format")
            except AdapterError as exc:
                self._fail(request_id, "invalid_input", str(exc), "lora")
            except Exception as exc:  # reported to this request alone; the others keep running
                log.exception("could not start request %s", request_id, extra={"request_id": request_id})
                self._fail(request_id, "internal", f"{type(exc).__name__}: {exc}", None)

    def _start(self, request_id: str, inputs: GenerationInput) -> None:
        prompt = self._prompts.tokens(inputs)
        budget = self._budget(len(prompt), inputs.sampling.max_tokens, inputs)
        steering = self._steering(inputs.sampling)
        if inputs.adapter is not None:
            self._load_adapter(inputs.adapter)
        sampler = Sampler(inputs.sampling, self._model.n_vocab, self._model.vocab)  # before a slot is claimed
        sampler.remember(prompt)
        placement = self._cache.admit(prompt, salt=inputs.adapter)
        self._running.append(
            Sequence(
                request_id,
                placement.slot,
                prompt,
                inputs.sampling,
                sampler,
                budget,
                cached=placement.reuse,
                fed=placement.reuse,
                reasoning=self._reasoning_counter(prompt),
                steering=steering,
                background=inputs.background,
                adapter=inputs.adapter,
            )
        )
        # The server learns the prompt's size now, so work cut short by a crash is still billed for it.
        self._send(
            {
                "type": "started",
                "id": request_id,
                "prompt_tokens": len(prompt),
                "cached_tokens": placement.reuse,
            }
        )

    def _load_adapter(self, path: str) -> None:
        try:
            self._adapters.handle(path, in_use={s.adapter for s in self._running if s.adapter is not None})
        except LlamaError as exc:
            log.warning("LoRA adapter %s could not be loaded: %s", path, exc)
            raise AdapterError(
                "the fine-tune's LoRA adapter could not be loaded for this model (is it made for it?)"
            ) from exc

    def _reasoning_counter(self, prompt: list[int]) -> ReasoningCounter:
        """Reasoning starts open when the prompt itself ends by opening it (GLM-4.7 with thinking on)."""
        markers = self._thinking
        return ReasoningCounter(
            markers, thinking=markers is not None and bool(prompt) and prompt[-1] == markers.open
        )

    def _steering(self, sampling: SamplingParams) -> JsonSteering | None:
        if not sampling.json_mode or not sampling.grammar:
            return None
        try:
            closing = closing_for(sampling.grammar)
        except (GrammarSyntaxError, RecursionError):  # a GBNF feature not followed here, or nesting too deep
            log.warning("JSON mode's grammar could not be read for closing; the answer runs unsteered")
            return None
        return JsonSteering(closing, self._closing_tokens)

    def _budget(self, prompt_tokens: int, max_tokens: int, inputs: GenerationInput) -> int:
        room = self._context - prompt_tokens
        if room <= 0:
            field_name = "messages" if inputs.messages is not None else "prompt"
            raise InputError(
                f"the {field_name} is {prompt_tokens} tokens, which does not fit this model's context window "
                f"of {self._context} tokens",
                param=field_name,
            )
        return min(max_tokens, room)

    # -- one decode step --------------------------------------------------------------------------------------

    def _plan(self) -> StepPlan:
        """While an interactive prompt is evaluated, background sequences sit the step out: their tokens would
        make every step of that prompt, and so its first token, slower. Background prompts are fed at most
        `BACKGROUND_PREFILL_TOKENS` a step, so that an interactive request arriving mid-step waits for a short
        step, not for a batch of prompts."""
        urgent = any(s.prefilling and not s.background for s in self._running)
        candidates = [s for s in self._running if not (urgent and s.background)]
        plan, room = StepPlan(adapter=self._adapter_turn(candidates)), self._model.batch_tokens
        taking = [s for s in candidates if s.adapter == plan.adapter]
        for sequence in taking:
            if not sequence.prefilling and sequence.next_token is not None:
                self._add(plan, sequence, [sequence.next_token], sample=True)
                room -= 1
        background_room = BACKGROUND_PREFILL_TOKENS
        for sequence in taking:
            allowed = min(room, background_room) if sequence.background else room
            if sequence.prefilling and allowed > 0:
                chunk = sequence.prompt[sequence.fed : sequence.fed + allowed]
                self._add(plan, sequence, chunk, sample=sequence.fed + len(chunk) == len(sequence.prompt))
                room -= len(chunk)
                if sequence.background:
                    background_room -= len(chunk)
        return plan

    def _adapter_turn(self, candidates: list[Sequence]) -> str | None:
        return self._turns.choose((s.adapter, s.background) for s in candidates)

    def _add(self, plan: StepPlan, sequence: Sequence, tokens: list[int], sample: bool) -> None:
        start = self._cache.length(sequence.slot)
        for offset, token in enumerate(tokens):
            last = offset == len(tokens) - 1
            plan.entries.append((token, start + offset, sequence.slot, sample and last))
        plan.fed.append((sequence, tokens))
        if sample:
            plan.sampled.append((sequence, len(plan.entries) - 1))

    def _decode_next(self) -> StepPlan:
        while True:
            plan = self._plan()
            if not plan.entries:
                break
            if not self._apply_adapter(plan):
                continue
            if self._model.decode(plan.entries) == 0:
                break
            if not self._make_room():
                return StepPlan()
        self._turns.taken(plan.adapter, batch_only=all(sequence.background for sequence, _ in plan.fed))
        for sequence, tokens in plan.fed:
            self._cache.extend(sequence.slot, tokens)
            if sequence.prefilling:
                sequence.fed += len(tokens)
            else:
                sequence.next_token = None
        return plan

    def _apply_adapter(self, plan: StepPlan) -> bool:
        """Apply the step's adapter to the context; if llama.cpp refuses, that adapter's sequences fail."""
        try:
            self._model.use_adapter(None if plan.adapter is None else self._adapters.handle(plan.adapter))
            return True
        except LlamaError as exc:
            log.error("could not apply LoRA adapter %s: %s", plan.adapter, exc)
            for sequence, _ in plan.fed:
                self._fail(
                    sequence.request_id, "internal", "the fine-tune's LoRA adapter could not be applied", None
                )
                self._release(sequence)
            return False

    def _make_room(self) -> bool:
        """The KV cache is full: drop the least recently used idle sequence, else fail the newest running one.
        False if nothing is left to run."""
        if self._cache.evict_one():
            return True
        if not self._running:
            return False
        newest = self._running[-1]
        self._fail(newest.request_id, "capacity", "the model's KV cache is full; try again shortly", None)
        self._release(newest)
        return bool(self._running)

    # -- after sampling ---------------------------------------------------------------------------------------

    def _advance_guarded(self, sequence: Sequence, index: int) -> None:
        try:
            self._advance(sequence, self._pick(sequence, index))
        except Exception as exc:  # one sequence's failure ends that sequence only
            log.exception(
                "request %s failed while generating",
                sequence.request_id,
                extra={"request_id": sequence.request_id},
            )
            self._fail(sequence.request_id, "internal", f"{type(exc).__name__}: {exc}", None)
            self._release(sequence)

    def _pick(self, sequence: Sequence, index: int) -> int:
        if sequence.steering is None:
            return self._model.sample(sequence.sampler, index)
        remaining = sequence.budget - sequence.completion_tokens
        return sequence.steering.choose(self._model, sequence.sampler, index, remaining)

    def _advance(self, sequence: Sequence, token: int) -> None:
        if self._model.is_end(token):
            self._finish(sequence, "stop")
            return
        sequence.completion_tokens += 1
        sequence.reasoning.see(token)
        text = sequence.text_for(self._model.piece(token))
        if text:
            self._send_text(sequence, text)
        if sequence.matcher.stopped:
            self._finish(sequence, "stop")
        elif sequence.steering is not None and sequence.steering.complete:
            self._finish(sequence, sequence.steering.finish_reason)
        elif sequence.completion_tokens >= sequence.budget:
            self._finish(sequence, "length")
        else:
            sequence.next_token = token

    def _finish(self, sequence: Sequence, reason: str) -> None:
        tail = sequence.tail() if reason != "cancelled" else ""
        if tail:
            self._send_text(sequence, tail)
        self._send_finished(
            sequence.request_id,
            reason,
            len(sequence.prompt),
            sequence.completion_tokens,
            sequence.cached,
            sequence.reasoning.tokens,
            stop_sequence=sequence.matcher.matched if reason == "stop" else None,
        )
        self._release(sequence)

    def _release(self, sequence: Sequence) -> None:
        if sequence not in self._running:
            return
        self._running.remove(sequence)
        sequence.sampler.close()
        self._cache.release(sequence.slot)

    # -- frames -----------------------------------------------------------------------------------------------

    def _send_text(self, sequence: Sequence, text: str) -> None:
        """Text carries the running count of generated tokens, the figure a crash leaves the server with."""
        self._send(
            {"type": "text", "id": sequence.request_id, "text": text, "tokens": sequence.completion_tokens}
        )

    def _send_finished(
        self,
        request_id: str,
        reason: str,
        prompt: int,
        completion: int,
        cached: int,
        reasoning: int = 0,
        stop_sequence: str | None = None,
    ) -> None:
        self._send(
            {
                "type": "finished",
                "id": request_id,
                "finish_reason": reason,
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "cached_tokens": cached,
                "reasoning_tokens": reasoning,
                "stop_sequence": stop_sequence,
            }
        )

    def _fail(self, request_id: str, kind: str, message: str, param: str | None) -> None:
        self._send({"type": "failed", "id": request_id, "kind": kind, "message": message, "param": param})


def _thinking_markers(model: LlamaModel) -> ThinkingMarkers | None:
    opening, closing = model.single_token("<think>"), model.single_token("</think>")
    return None if opening is None or closing is None else ThinkingMarkers(opening, closing)
