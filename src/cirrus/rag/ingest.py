"""Indexes uploaded items in the background: claims one from the store, converts it to Markdown, chunks it,
embeds the chunks in batches and writes them to the index, then marks the item completed.

Shaped like the batch runner: claims are leases, renewed while an item is worked on; an item whose claim is
lost (its lease lapsed while this gateway stalled, and another claimed it) is stopped, and only the current
claim can finish an item. An item that cannot be read or embedded fails with a message saying why. One whose
embedding failed for a reason that passes (a full queue, a crashed worker, an unavailable dependency) goes
back to the queue after a backoff, up to `max_tries` claims. A runner stopped mid-item gives the item back;
nothing of it is in the index then, since `replace_item` swaps an item's chunks at once.
"""

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Protocol

from cirrus.errors import (
    CapacityExceeded,
    CirrusError,
    DependencyUnavailable,
    NoNodeAvailable,
    NotReady,
    RateLimited,
    RequestTimeout,
    WorkerCrashed,
    WorkerStartFailed,
)
from cirrus.leased_claims import next_claim
from cirrus.rag.chunking import chunk_markdown
from cirrus.rag.documents import to_markdown
from cirrus.rag.model import ChunkText, Claim, Instance, Item

log = logging.getLogger(__name__)

# (the item the texts come from, the embedding model, the texts) -> their vectors; the item says whose work it is
Embed = Callable[[Item, str, list[str]], Awaitable[list[list[float]]]]
TRANSIENT = (
    CapacityExceeded,
    RateLimited,
    DependencyUnavailable,
    RequestTimeout,
    WorkerCrashed,
    WorkerStartFailed,
    NoNodeAvailable,
    NotReady,
)


class IngestStore(Protocol):
    """What the runner needs of `RagStore`."""

    async def instance_by_uid(self, uid: str) -> Instance | None: ...
    async def content(self, item: Item) -> bytes: ...
    async def claim_next(self, holder: str, lease_s: float) -> Claim | None: ...
    async def renew(self, claim: Claim, lease_s: float) -> bool: ...
    async def complete(self, claim: Claim, chunks: int) -> bool: ...
    async def fail(self, claim: Claim, message: str) -> bool: ...
    async def release(self, claim: Claim) -> bool: ...


class IngestIndex(Protocol):
    """What the runner needs of a `ChunkIndex`."""

    async def replace_item(
        self,
        instance_uid: str,
        item_id: str,
        key: str,
        chunks: Sequence[ChunkText],
        vectors: Sequence[Sequence[float]],
    ) -> None: ...


@dataclass(frozen=True)
class IngestSettings:
    concurrency: int = 2  # items in flight at once in this gateway
    lease_s: float = 60.0  # a claim lapses this long after its last renewal
    idle_s: float = 1.0  # with nothing to claim, look again after this long (sooner when poked)
    embed_batch: int = 32  # texts per embedding call
    max_chunk_tokens: int = 256  # what the embedding model reads per text (MiniLM: 256 word pieces)
    retry_base_s: float = 2.0  # the first backoff after a transient failure; doubled per attempt
    retry_max_s: float = 120.0
    max_tries: int = 10  # claims of an item since its upload before a transient failure fails it


class _ClaimLost(Exception):
    """Another runner holds the item now: this one drops its work."""


class _ItemFailed(Exception):
    """The item cannot be indexed; the message says why, for its owner."""


class IngestRunner:
    def __init__(
        self, store: IngestStore, index: IngestIndex, embed: Embed, holder: str, settings: IngestSettings
    ) -> None:
        self._store = store
        self._index = index
        self._embed = embed
        self._holder = holder
        self._settings = settings
        self._slots = asyncio.Semaphore(settings.concurrency)
        self._wake = asyncio.Event()
        self._items: set[asyncio.Task[None]] = set()
        self._running: asyncio.Task[None] | None = None

    def poke(self) -> None:
        """New items were uploaded: look for them now rather than after the idle wait."""
        self._wake.set()

    async def run(self) -> None:
        """Until cancelled or stopped; items in flight then go back to the queue."""
        self._running = asyncio.current_task()
        try:
            while True:
                await self._slots.acquire()
                claim = await self._next_claim()
                task = asyncio.create_task(self._run_item(claim))
                self._items.add(task)
                task.add_done_callback(self._items.discard)
        finally:
            for task in list(self._items):
                task.cancel()
            await asyncio.gather(*self._items, return_exceptions=True)

    async def stop(self) -> None:
        """Stops `run` and waits until the items it held are given back."""
        if self._running is not None and not self._running.done():
            self._running.cancel()
            await asyncio.gather(self._running, return_exceptions=True)

    async def _next_claim(self) -> Claim:
        claim_next = partial(self._store.claim_next, self._holder, self._settings.lease_s)
        return await next_claim(
            claim_next, self._release, self._wake, self._settings.idle_s, "an item to index"
        )

    async def _run_item(self, claim: Claim) -> None:
        try:
            await self._while_claimed(claim, self._ingest(claim))
        except _ClaimLost:
            log.warning("item %s was claimed elsewhere; its indexing here is dropped", claim.item.id)
        except asyncio.CancelledError:  # the runner is stopping: the item is indexed again later
            await asyncio.shield(self._release(claim))
            raise
        except Exception:
            log.exception("could not finish indexing item %s", claim.item.id)
        finally:
            self._slots.release()

    async def _while_claimed(self, claim: Claim, work: Awaitable[None]) -> None:
        """Runs `work` while renewing the claim; `_ClaimLost` once a renewal finds it gone."""
        task = asyncio.ensure_future(work)
        renewer = asyncio.create_task(self._keep_claimed(claim, task))
        try:
            await task
        except asyncio.CancelledError:
            if task.cancelled() and renewer.done() and not _current_task_cancelling():
                raise _ClaimLost() from None
            raise
        finally:
            renewer.cancel()
            task.cancel()

    async def _keep_claimed(self, claim: Claim, work: "asyncio.Future[None]") -> None:
        while True:
            await asyncio.sleep(self._settings.lease_s / 3)
            try:
                if not await self._store.renew(claim, self._settings.lease_s):
                    break
            except Exception:
                log.exception("could not renew the claim on item %s", claim.item.id)
        work.cancel("claim lost")

    async def _ingest(self, claim: Claim) -> None:
        """Indexes the item, fails it, or gives it back for a later attempt."""
        try:
            chunks = await self._indexed(claim)
        except _ItemFailed as failure:
            await self._fail(claim, str(failure))
        except TRANSIENT as error:
            await self._retry_later(claim, error)
        except CirrusError as error:  # the index refused the chunks (vectors of another dimension)
            await self._fail(claim, f"could not index '{claim.item.key}': {error.message}")
        except _ClaimLost:
            raise
        except Exception as error:  # a bug met by one item fails that item, rather than retrying it forever
            log.exception("could not index item %s", claim.item.id)
            await self._fail(claim, f"could not index '{claim.item.key}': {type(error).__name__}: {error}")
        else:
            if not await self._store.complete(
                claim, chunks
            ):  # it removes what was written for a deleted item
                raise _ClaimLost()

    async def _indexed(self, claim: Claim) -> int:
        """The number of chunks written for the item; `_ItemFailed` when it cannot be indexed."""
        item = claim.item
        instance = await self._store.instance_by_uid(item.instance_uid)
        if instance is None:
            raise _ItemFailed("its AI Search instance was deleted")
        chunks = await self._chunks(instance, item)
        vectors = await self._vectors(instance, item, chunks)
        if not await self._store.renew(claim, self._settings.lease_s):  # narrows the window for a stale write
            raise _ClaimLost()
        await self._index.replace_item(item.instance_uid, item.id, item.key, chunks, vectors)
        return len(chunks)

    async def _chunks(self, instance: Instance, item: Item) -> list[ChunkText]:
        """Converting and chunking run in a thread: a large PDF takes seconds."""
        data = await self._store.content(item)
        size = min(instance.chunk_size, self._settings.max_chunk_tokens)
        try:
            chunks = await asyncio.to_thread(_chunked, item.key, data, size, instance.chunk_overlap)
        except CirrusError as error:
            raise _ItemFailed(error.message) from None
        if not chunks:
            raise _ItemFailed(f"'{item.key}' has no text to index, only headings")
        return chunks

    async def _vectors(self, instance: Instance, item: Item, chunks: list[ChunkText]) -> list[list[float]]:
        vectors: list[list[float]] = []
        batch = self._settings.embed_batch
        for start in range(0, len(chunks), batch):
            texts = [chunk.text for chunk in chunks[start : start + batch]]
            vectors.extend(await self._embedded(instance.embedding_model, item, texts))
        return vectors

    async def _embedded(self, model: str, item: Item, texts: list[str]) -> list[list[float]]:
        try:
            vectors = await self._embed(item, model, texts)
        except TRANSIENT:
            raise
        except CirrusError as error:
            raise _ItemFailed(f"could not embed '{item.key}' with {model}: {error.message}") from None
        if len(vectors) != len(texts):
            raise _ItemFailed(f"{model} gave {len(vectors)} vectors for {len(texts)} chunks of '{item.key}'")
        return vectors

    async def _fail(self, claim: Claim, message: str) -> None:
        """What the item had indexed before (an earlier version of the file) stays searchable, as the store
        keeps its count."""
        if not await self._store.fail(claim, message):
            raise _ClaimLost()

    async def _retry_later(self, claim: Claim, error: CirrusError) -> None:
        """Waits out the backoff while still holding the item (so it is not taken again at once), then gives it
        back; past `max_tries` claims since its upload the item fails instead."""
        if claim.tries >= self._settings.max_tries:
            message = f"could not index '{claim.item.key}' in {claim.tries} tries: {error.message}"
            await self._fail(claim, message)
            return
        backoff = self._settings.retry_base_s * 2 ** (claim.tries - 1)
        delay = min(error.retry_after_s or backoff, self._settings.retry_max_s)
        log.info("item %s is retried in %.0fs: %s", claim.item.id, delay, error.message)
        await asyncio.sleep(delay)
        await self._release(claim)

    async def _release(self, claim: Claim) -> None:
        try:
            await self._store.release(claim)
        except Exception:
            log.exception(
                "could not release item %s; it is indexed again once its claim lapses", claim.item.id
            )


def _chunked(key: str, data: bytes, size_tokens: int, overlap_percent: int) -> list[ChunkText]:
    return chunk_markdown(to_markdown(key, data), size_tokens, overlap_percent)


def _current_task_cancelling() -> bool:
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
