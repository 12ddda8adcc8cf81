"""The pool sends a request to the instance that served the longest prefix of its prompt, on a fake runtime."""

import asyncio

from cirrus.catalog import ModelSpec
from cirrus.pool import Lease, Pool
from cirrus.pool.prompt_keys import PromptChain, prompt_chain
from cirrus.runtime.params import GenerationInput
from tests.unit.fakes import FakeClock, FakeLauncher, spec

MB = 1024 * 1024
SYSTEM = {"role": "system", "content": "You are terse."}
ONE_SLOT = spec("one-slot", max_instances=2, keep_alive_s=60)
FOUR_SLOTS = spec("four-slots", parallel=4, max_instances=2, keep_alive_s=60)


def make_pool() -> tuple[Pool, FakeClock]:
    launcher = FakeLauncher({ONE_SLOT.id: 100 * MB, FOUR_SLOTS.id: 100 * MB})
    clock = FakeClock()
    return Pool(launcher, 1000 * MB, 8, default_keep_alive_s=300, clock=clock), clock


def deadline() -> float:
    return asyncio.get_running_loop().time() + 5


def turn(*texts: str, system: bool = True) -> PromptChain:
    """A conversation's request: user and assistant messages alternate, the last one is the user's."""
    roles = ["user", "assistant"]
    messages = [{"role": roles[i % 2], "content": text} for i, text in enumerate(texts)]
    return prompt_chain(GenerationInput(messages=(*([SYSTEM] if system else []), *messages)))


async def two_instances(pool: Pool, model: ModelSpec, first: PromptChain, second: PromptChain) -> list[Lease]:
    """Leases on two instances: `first` served on one, `second` on the other, more leases filling the first
    instance's batch in between so that the second instance starts."""
    leases = [await pool.acquire(model, deadline(), chain=first)]
    while len({lease.instance.id for lease in leases}) < 2:
        leases.append(await pool.acquire(model, deadline()))
    leases[-1].release()
    leases[-1] = await pool.acquire(model, deadline(), chain=second)
    assert leases[-1].instance is not leases[0].instance
    return leases


async def test_each_conversation_returns_to_the_instance_that_served_its_earlier_turns() -> None:
    pool, clock = make_pool()
    alice, bob = await two_instances(pool, ONE_SLOT, turn("Hi, I am Alice"), turn("Hi, I am Bob"))
    alice.release()
    clock.advance(1)
    bob.release()  # bob's instance is now the most recently used: the least-loaded rule alone would pick it
    for answer, question in [("Hello Alice", "Weather?"), ("Sunny", "Tomorrow?")]:
        alice_turn = await pool.acquire(ONE_SLOT, deadline(), chain=turn("Hi, I am Alice", answer, question))
        alice_turn.release()
        clock.advance(1)
        bob_turn = await pool.acquire(ONE_SLOT, deadline(), chain=turn("Hi, I am Bob", answer, question))
        bob_turn.release()
        clock.advance(1)
        assert alice_turn.instance is alice.instance and bob_turn.instance is bob.instance


async def test_without_a_match_the_least_loaded_most_recently_used_instance_is_chosen() -> None:
    pool, clock = make_pool()
    first, second = await two_instances(pool, ONE_SLOT, turn("one"), turn("two"))
    first.release()
    clock.advance(1)
    second.release()
    fresh = await pool.acquire(ONE_SLOT, deadline(), chain=turn("unrelated", system=False))
    assert fresh.instance is second.instance
    fresh.release()


async def test_a_shared_system_prompt_only_breaks_ties_between_equally_loaded_instances() -> None:
    pool, clock = make_pool()
    leases = await two_instances(pool, FOUR_SLOTS, turn("seen here"), turn("x", system=False))
    holder, other = leases[0].instance, leases[-1].instance
    for lease in leases[1:]:
        lease.release()
    clock.advance(1)
    assert holder.active == 1 and other.active == 0
    busier = await pool.acquire(FOUR_SLOTS, deadline(), chain=turn("new conversation"))
    assert busier.instance is other, "the holder is busier and shares only the system prompt"
    busier.release()
    leases[0].release()
    tie = await pool.acquire(FOUR_SLOTS, deadline(), chain=turn("another conversation"))
    assert tie.instance is holder, "equally idle: the one that holds the system prompt"
    tie.release()


async def test_a_conversations_history_outweighs_a_busier_instance_with_room() -> None:
    pool, clock = make_pool()
    leases = await two_instances(pool, FOUR_SLOTS, turn("my question"), turn("x", system=False))
    holder, other = leases[0].instance, leases[-1].instance
    for lease in leases[-2:]:
        lease.release()
    clock.advance(1)
    assert holder.active == 3 and other.active == 0
    follow_up = await pool.acquire(FOUR_SLOTS, deadline(), chain=turn("my question", "an answer", "why?"))
    assert follow_up.instance is holder
    for lease in [*leases[:-2], follow_up]:
        lease.release()


async def test_a_full_holder_sends_the_next_turn_elsewhere_and_that_instance_serves_it_after() -> None:
    pool, _ = make_pool()
    first, filler = await two_instances(pool, ONE_SLOT, turn("Hi"), turn("x", system=False))
    filler.release()
    moved = await pool.acquire(ONE_SLOT, deadline(), chain=turn("Hi", "Hello", "More"))
    assert moved.instance is filler.instance, "the holder has no room"
    first.release()
    moved.release()
    third = await pool.acquire(ONE_SLOT, deadline(), chain=turn("Hi", "Hello", "More", "Ok", "Bye"))
    assert third.instance is moved.instance, "it now holds the longer prefix"
    third.release()


async def test_the_affinity_key_wins_over_the_prefix_while_its_instance_has_room() -> None:
    pool, _ = make_pool()
    first, second = await two_instances(pool, ONE_SLOT, turn("Hi"), turn("x", system=False))
    first.release()
    second.release()
    (await pool.acquire(ONE_SLOT, deadline(), affinity="session", chain=turn("x", system=False))).release()
    by_key = await pool.acquire(ONE_SLOT, deadline(), affinity="session", chain=turn("Hi", "Hello", "More"))
    assert by_key.instance is second.instance, "the prefix is on the other instance; the key wins"
    by_key.release()


async def test_a_stopped_instance_takes_its_routes_with_it() -> None:
    pool, clock = make_pool()
    (await pool.acquire(ONE_SLOT, deadline(), chain=turn("Hi"))).release()
    assert len(pool._routes) == 2
    clock.advance(61)
    await pool.reap()
    assert pool.statuses() == [] and len(pool._routes) == 0
