"""`from cirrus import Ai`: one call, `ai.run(model, inputs)`, embedded or over HTTP.

`Ai.local()` runs the whole platform inside this process (no server); `Ai.remote(url, token)` talks to a Cirrus
server with the Workers AI protocol. Both return the Workers AI `result` object, or, when `inputs["stream"]` is
true, an iterator over the streamed events (`{"response": "..."}`, then one with `usage`).
"""

import asyncio
import queue
import threading
from collections.abc import AsyncIterator, Coroutine, Generator
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar
from urllib.parse import quote

import httpx

from cirrus.api.workers_ai.encode import embedding_body, result_body, stream_payloads
from cirrus.api.workers_ai.inputs import chat_request, task_input
from cirrus.api.workers_ai.schemas import TextEmbeddingsInput
from cirrus.catalog import ModelSpec
from cirrus.chat import ChatRequest, start_chat
from cirrus.config import Settings
from cirrus.errors import CirrusError, InvalidInput
from cirrus.platform import Platform
from cirrus.runtime.params import GenerationInput
from cirrus.sdk_http import AiError as AiError  # re-exported: `from cirrus.sdk import AiError`
from cirrus.sdk_http import json_body, remote_error, streamed_events
from cirrus.sdk_search import AiSearch
from cirrus.service import EmbeddingRequest, Generation, InferenceRequest

T = TypeVar("T")
Result = dict[str, Any]
Stream = Generator[Result, None, None]  # close() it to stop early: the generation is cancelled
_END = object()


class Ai:
    """Base of both flavours; use Ai.local() or Ai.remote()."""

    @staticmethod
    def local(catalog: str | Path | None = None, **settings: Any) -> "LocalAi":
        if catalog is not None:  # an explicit None would override CIRRUS_CATALOG from the environment
            settings["catalog"] = Path(catalog)
        return LocalAi(Settings(**settings))

    @staticmethod
    def remote(
        url: str = "http://127.0.0.1:8787", token: str | None = None, timeout_s: float = 120.0
    ) -> "RemoteAi":
        return RemoteAi(url, token, timeout_s)

    def run(self, model: str, inputs: dict[str, Any]) -> Any:
        """The Workers AI result; an iterator of streamed events when inputs["stream"] is true."""
        stream_inputs = {**inputs, "stream": True}
        return self.stream(model, stream_inputs) if inputs.get("stream") else self._run(model, inputs)

    def stream(self, model: str, inputs: dict[str, Any]) -> Stream:
        raise NotImplementedError

    def autorag(self, name: str) -> AiSearch:
        """The AI Search instance `name` of the caller's account (the Workers binding's `AI.autorag(name)`)."""
        raise AiError("AI Search needs a Cirrus server's gateway: use Ai.remote(url, token)", 3000, 501)

    def _run(self, model: str, inputs: dict[str, Any]) -> Result:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: T) -> T:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


class LocalAi(Ai):
    def __init__(self, settings: Settings) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="cirrus-local", daemon=True)
        self._thread.start()
        try:
            self.platform = Platform(settings, gateway=False)
            self._call(self.platform.start())
        except BaseException:
            self._stop_loop()
            raise
        self._counter = 0

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        future = asyncio.run_coroutine_threadsafe(coroutine, self._loop)
        try:
            return future.result()
        except BaseException:  # e.g. KeyboardInterrupt while waiting: stop the work, don't orphan it
            future.cancel()
            raise

    def _next_id(self) -> str:
        self._counter += 1
        return f"local-{self._counter}"

    def _input(self, model: str, inputs: dict[str, Any]) -> tuple[ModelSpec, Any]:
        """The model and its task's input, checked as the /ai/run route checks them."""
        try:
            spec = self.platform.catalog.get(model)
            return spec, task_input(spec, inputs)
        except CirrusError as exc:
            raise AiError.from_cirrus(exc) from None

    def _chat(self, model: str, inputs: dict[str, Any]) -> ChatRequest:
        spec, body = self._input(model, inputs)
        if isinstance(body, TextEmbeddingsInput):
            raise AiError.from_cirrus(
                InvalidInput(f"{spec.id} is a text-embeddings model: it does not stream")
            )
        return chat_request(spec, body)

    def stream(self, model: str, inputs: dict[str, Any]) -> Stream:
        return self._stream(self._events(self._chat(model, inputs)))

    def _run(self, model: str, inputs: dict[str, Any]) -> Result:
        spec, body = self._input(model, inputs)
        try:
            if isinstance(body, TextEmbeddingsInput):
                request = EmbeddingRequest(
                    self._next_id(), spec.id, body.embedding_input(), body.keep_alive_s()
                )
                return embedding_body(self._call(self.platform.service.embed(request)))
            return self._call(self._whole(chat_request(spec, body)))
        except CirrusError as exc:
            raise AiError.from_cirrus(exc) from None

    async def _whole(self, chat: ChatRequest) -> Result:
        run = await start_chat(ServiceEngine(self.platform, self._next_id()), chat)
        return result_body(await run.whole(), run.json_mode, run.raw)

    def _stream(self, events: AsyncIterator[Result]) -> Stream:
        items: queue.Queue[object] = queue.Queue()
        pump = asyncio.run_coroutine_threadsafe(self._pump(events, items), self._loop)
        try:
            while (item := items.get()) is not _END:
                if isinstance(item, CirrusError):
                    raise AiError.from_cirrus(item)
                if isinstance(item, BaseException):
                    raise item
                assert isinstance(item, dict)
                yield item
        finally:
            # A consumer that stops early (break, close, an exception) cancels the generation, which
            # releases its instance, instead of leaving it generating tokens nobody reads.
            if not self._loop.is_closed():
                pump.cancel()

    async def _events(self, chat: ChatRequest) -> AsyncIterator[Result]:
        run = await start_chat(ServiceEngine(self.platform, self._next_id()), chat)
        async for event in run:
            for payload in stream_payloads(event):
                yield payload

    @staticmethod
    async def _pump(events: AsyncIterator[Result], items: "queue.Queue[object]") -> None:
        try:
            async for event in events:
                items.put(event)
        except Exception as exc:  # handed to the consuming thread, which raises it there
            items.put(exc)
        finally:
            items.put(_END)

    def close(self) -> None:
        if self._loop.is_running():
            try:
                self._call(self.platform.close())
            finally:
                self._stop_loop()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        if not self._thread.is_alive():
            self._loop.close()


class ServiceEngine:
    """The chat core's engine inside this process: the platform's service, with no gateway in front."""

    def __init__(self, platform: Platform, request_id: str) -> None:
        self.model_files = platform.model_files
        self.catalog = platform.catalog
        self._platform = platform
        self._request_id = request_id

    def resolve(self, model: str) -> ModelSpec:
        return self.catalog.get(model)

    async def run(self, model: str, inputs: GenerationInput, request: ChatRequest) -> Generation:
        if request.lora is not None:
            raise InvalidInput(
                "fine-tunes belong to accounts: run them through the server (`cirrus serve`), not in-process",
                param="lora",
            )
        inference = InferenceRequest(
            self._request_id, model, inputs, request.keep_alive_s, reject_if_busy=request.reject_if_busy
        )
        return await self._platform.service.start(inference)

    async def count(self, model: str, inputs: GenerationInput) -> int:
        return await self._platform.service.count_tokens(InferenceRequest(self._request_id, model, inputs))


class RemoteAi(Ai):
    def __init__(self, url: str, token: str | None, timeout_s: float) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._client = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s)

    @staticmethod
    def _path(model: str) -> str:
        return f"/ai/run/{quote(model, safe='@/')}"

    def stream(self, model: str, inputs: dict[str, Any]) -> Stream:
        return self._stream(self._path(model), {**inputs, "stream": True})

    def _run(self, model: str, inputs: dict[str, Any]) -> Result:
        path = self._path(model)
        response = self._client.post(path, json=inputs)
        body = json_body(response)
        if not body.get("success"):
            raise remote_error(body, response.status_code)
        result: Result = body["result"]
        return result

    def _stream(self, path: str, inputs: dict[str, Any]) -> Stream:
        return streamed_events(self._client, path, inputs)

    def autorag(self, name: str) -> AiSearch:
        return AiSearch(self._client, name)

    def close(self) -> None:
        self._client.close()
