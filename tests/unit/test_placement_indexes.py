"""The placer's indexes: ranked and rotating sets, and that a decision through them matches evaluating every
node (on fleets small enough that the indexes hand over every node)."""

import random

from cirrus.placement import InstanceView, NodeMeasures, NodeView, PlacementRequest, Placer
from cirrus.placement.estimate import Defaults, bucket
from cirrus.placement.ranked import RankedSet, RotatingSet
from tests.unit.fakes import FakeClock

GB = 1_000_000_000
MODELS = ("@cf/test/a", "@cf/test/b", "@cf/test/c")


def everyone(_: str) -> bool:
    return True


def test_ranked_set_returns_the_smallest_live_keys_and_forgets_replaced_ones() -> None:
    ranked = RankedSet()
    for member, key in (("a", 5), ("b", 3), ("c", 4), ("d", 1)):
        ranked.set(member, (key,))
    ranked.set("d", (9,))  # replaced: its old key 1 must not count
    ranked.discard("b")
    assert ranked.smallest(2, everyone, 10) == ["c", "a"]
    assert ranked.smallest(2, everyone, 10) == ["c", "a"]  # looking does not consume
    assert ranked.smallest(3, lambda member: member != "c", 10) == ["a", "d"]
    assert len(ranked) == 3 and "b" not in ranked


def test_ranked_set_looks_no_further_than_asked_and_survives_rebuilds() -> None:
    ranked = RankedSet()
    for i in range(500):
        ranked.set(f"n{i:03}", (i % 7, i))
    for i in range(0, 500, 2):
        ranked.set(f"n{i:03}", (100, i))  # enough replacements to rebuild the heap
    assert ranked.smallest(1, lambda member: member == "n499", 3) == []
    assert ranked.smallest(3, everyone, 10) == ["n007", "n021", "n035"]


def test_rotating_set_visits_every_member_in_turn_and_removes_in_place() -> None:
    rotating = RotatingSet()
    for member in "abcdefg":
        rotating.add(member)
    rotating.discard("c")
    seen = rotating.next_few(4) + rotating.next_few(4)
    assert set(seen) == set("abdefg")
    assert len(rotating) == 6 and "c" not in rotating


def random_view(rng: random.Random, node_id: str) -> NodeView:
    instances = []
    for model in rng.sample(MODELS, rng.randint(0, 2)):
        state = rng.choice(("ready", "ready", "starting", "stopping"))
        busy = rng.randint(0, 4) if state == "ready" else 1
        instances.append(
            InstanceView(
                model, state, 4, busy, rng.choice((2, 4, 6)) * GB, None, started_at=rng.uniform(0, 10)
            )
        )
    return NodeView(
        node_id,
        rng.random() > 0.1,
        rng.choice((8, 12, 16)) * GB,
        tuple(instances),
        frozenset(rng.sample(MODELS, rng.randint(0, 3))),
        {model: rng.randint(1, 6) for model in rng.sample(MODELS, rng.randint(0, 1))},
        NodeMeasures(
            pull_bytes_per_s=rng.choice((None, 5e7, 5e8)),
            service_s={model: rng.uniform(0.5, 30) for model in rng.sample(MODELS, rng.randint(0, 3))},
        ),
        {model: rng.randint(1, 2) for model in MODELS},
    )


def test_a_decision_through_the_indexes_is_as_good_as_evaluating_every_node() -> None:
    rng = random.Random(11)
    tolerance = Defaults().tie_tolerance
    compared = 0
    for _ in range(150):
        clock = FakeClock(0.0)
        placer = Placer(clock=clock)
        node_ids = [f"n{i}" for i in range(rng.randint(1, 4))]
        for node_id in node_ids:
            placer.update(random_view(rng, node_id))
        for _ in range(12):
            action = rng.random()
            if action < 0.3:
                placer.update(random_view(rng, rng.choice(node_ids)))
            elif action < 0.4:
                clock.advance(rng.uniform(0, 5))
            request = PlacementRequest(rng.choice(MODELS), rng.choice((2, 4, 6)) * GB, 3 * GB, slots=4)
            every = placer.estimates(request)
            if not every:
                continue
            chosen = placer.choose(request)
            assert bucket(chosen.estimated_ttft_s, tolerance) == bucket(every[0].estimated_ttft_s, tolerance)
            compared += 1
            if rng.random() < 0.7:
                placer.placed(request, chosen)
                if rng.random() < 0.5:
                    placer.finished(request, chosen)
    assert compared > 500


def test_on_a_fleet_larger_than_a_decision_looks_at_a_free_slot_is_always_found() -> None:
    rng = random.Random(5)
    warm_found = 0
    for _ in range(20):
        clock = FakeClock(0.0)
        placer = Placer(clock=clock)
        node_ids = [f"n{i:02}" for i in range(60)]
        for node_id in node_ids:
            placer.update(random_view(rng, node_id))
        for _ in range(40):
            if rng.random() < 0.5:
                placer.update(random_view(rng, rng.choice(node_ids)))
            request = PlacementRequest(rng.choice(MODELS), rng.choice((2, 4, 6)) * GB, 3 * GB, slots=4)
            every = placer.estimates(request)
            if not every:
                continue
            chosen = placer.choose(request)
            assert chosen in every  # what the indexes led to is what evaluating that node says now
            if every[0].rule == "warm":
                assert chosen.rule == "warm"
                warm_found += 1
            placer.placed(request, chosen)
    assert warm_found > 100
