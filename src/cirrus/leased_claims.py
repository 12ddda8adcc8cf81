"""How a runner of leased work (batch items, AI Search files) takes its next claim from a shared store: it asks,
sleeps until poked or `idle_s` passes when nothing is there, and gives back a claim the store made while the
runner was being stopped, so the item is not left held until its lease lapses."""

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

log = logging.getLogger(__name__)
ClaimT = TypeVar("ClaimT")


async def next_claim(
    claim_next: Callable[[], Awaitable[ClaimT | None]],
    release: Callable[[ClaimT], Awaitable[object]],
    wake: asyncio.Event,
    idle_s: float,
    what: str,
) -> ClaimT:
    """The next claim, waiting for one; `what` names the work in the log ("a batch item")."""
    while True:
        claim = await claim_or_give_back(claim_next, release, what)
        if claim is not None:
            return claim
        wake.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), idle_s)


async def claim_or_give_back(
    claim_next: Callable[[], Awaitable[ClaimT | None]],
    release: Callable[[ClaimT], Awaitable[object]],
    what: str,
) -> ClaimT | None:
    """One claim, or None (nothing there, or the store failed: logged); cancelled mid-claim, what the store
    claimed is released before the cancellation goes on."""
    claiming = asyncio.ensure_future(claim_next())
    try:
        return await asyncio.shield(claiming)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            if (claim := await claiming) is not None:
                await release(claim)
        raise
    except Exception:
        log.exception("could not claim %s", what)
        return None
