"""A batch item's gateway call: it acts for the token that sent the batch, as that token stands when the item
runs (a token revoked or expired since fails the items not yet run), on the same pipeline as an HTTP call, so
scopes, limits, budgets, metering, cache and guardrails apply to each item. Its request id is
`<batch id>/<position>`: the item's usage record carries its batch."""

import asyncio
import time

from cirrus.auth import OPEN_PRINCIPAL, Principal
from cirrus.batches import Batch, Claim
from cirrus.batches.runner import Preempt
from cirrus.errors import (
    CapacityExceeded,
    DailyAllocationExhausted,
    DependencyUnavailable,
    NoNodeAvailable,
    RateLimited,
    Unauthorized,
)
from cirrus.gateway.call import Call
from cirrus.platform import Platform

# Refusals that pass: the item waits and runs later instead of failing.
TRANSIENT = (RateLimited, CapacityExceeded, DependencyUnavailable, NoNodeAvailable, DailyAllocationExhausted)


async def batch_principal(platform: Platform, batch: Batch) -> Principal:
    return await token_principal(platform, batch.token_id, "sent this batch")


async def token_principal(platform: Platform, token_id: str | None, did: str) -> Principal:
    """Background work acts for the token that asked for it, as that token stands now (`did` says what it did,
    for the refusal: "sent this batch"); work asked for in open mode has no token."""
    if token_id is None:
        return OPEN_PRINCIPAL
    info = await platform.gateway.identity.get_token(token_id)
    if info is None or not info.usable(time.time()):
        raise Unauthorized(f"the token that {did} was revoked or has expired")
    return info.principal()


async def batch_call(platform: Platform, claim: Claim) -> Call:
    principal = await batch_principal(platform, claim.batch)
    return Call(
        request_id=f"{claim.batch.id}/{claim.item.position}",
        principal=principal,
        route=claim.batch.shape,
        headers={},
        deadline=asyncio.get_running_loop().time() + platform.settings.batch_item_timeout_s,
    )


def waiving(call: Call, preempt: Preempt) -> Preempt:
    """The item's preemption, which also waives what the stopped work cost: the platform stopped it, and the item
    pays when it runs again."""

    def preempt_and_waive() -> None:
        call.waived = True
        preempt()

    return preempt_and_waive
