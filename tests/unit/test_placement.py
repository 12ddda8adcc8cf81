"""Placement's rules and the orderings between them, with an injected clock and hand-made node snapshots."""

import pytest

from cirrus.placement import (
    Defaults,
    InstanceView,
    NodeMeasures,
    NodeView,
    NoNodeFits,
    Placement,
    PlacementRequest,
    Placer,
)
from tests.unit.fakes import FakeClock

GB = 1_000_000_000
MIB = 1024 * 1024
MODEL = "@cf/test/m"
OTHER = "@cf/test/other"
REQUEST = PlacementRequest(MODEL, memory_bytes=4 * GB, artifact_bytes=3 * GB, slots=4)


def ready(
    model: str = MODEL, busy: int = 0, slots: int = 4, memory: int = 4 * GB, **fields: object
) -> InstanceView:
    idle_since = 0.0 if busy == 0 else None
    return InstanceView(model, "ready", slots, busy, memory, idle_since, **fields)  # type: ignore[arg-type]


def starting(model: str = MODEL, started_at: float | None = None, memory: int = 4 * GB) -> InstanceView:
    return InstanceView(model, "starting", 4, 1, memory, None, started_at=started_at)


def node(
    node_id: str,
    *instances: InstanceView,
    budget: int = 16 * GB,
    cached: tuple[str, ...] = (),
    queued: dict[str, int] | None = None,
    measures: NodeMeasures | None = None,
    alive: bool = True,
    max_instances: dict[str, int] | None = None,
) -> NodeView:
    models = {instance.model for instance in instances}
    return NodeView(
        node_id,
        alive,
        budget,
        instances,
        frozenset(models | set(cached)),
        queued or {},
        measures or NodeMeasures(),
        max_instances or {},
    )


def placer_with(*nodes: NodeView) -> tuple[Placer, FakeClock]:
    clock = FakeClock()
    placer = Placer(clock=clock)
    for view in nodes:
        placer.update(view)
    return placer, clock


def send(placer: Placer, request: PlacementRequest = REQUEST) -> Placement:
    placement = placer.choose(request)
    placer.placed(request, placement)
    return placement


# -- the four rules and their order ----------------------------------------------------------------------------


def test_a_warm_instance_with_a_free_slot_beats_a_cold_start_on_an_emptier_node() -> None:
    placer, _ = placer_with(node("a", cached=(MODEL,), budget=64 * GB), node("b", ready(busy=3)))
    placement = placer.choose(REQUEST)
    assert (placement.node_id, placement.rule) == ("b", "warm")
    assert placement.estimated_ttft_s == Defaults().first_token_s


def test_among_warm_instances_the_least_busy_one_is_chosen() -> None:
    placer, _ = placer_with(node("a", ready(busy=3)), node("b", ready(busy=1)), node("c", ready(busy=2)))
    assert placer.choose(REQUEST).node_id == "b"


def test_equal_nodes_are_decided_by_node_id_every_time() -> None:
    placer, _ = placer_with(
        node("c", cached=(MODEL,)), node("a", cached=(MODEL,)), node("b", cached=(MODEL,))
    )
    assert {placer.choose(REQUEST).node_id for _ in range(5)} == {"a"}


def test_a_busy_instance_wins_when_its_queue_is_shorter_than_a_cold_start_elsewhere() -> None:
    quick = NodeMeasures(service_s={MODEL: 1.0})  # 4 busy slots: one frees every 0.25 s
    placer, _ = placer_with(node("a", ready(busy=4), measures=quick), node("b", cached=(MODEL,)))
    placement = placer.choose(REQUEST)
    assert (placement.node_id, placement.rule) == ("a", "busy")
    assert placement.estimated_ttft_s == pytest.approx(0.25 + Defaults().first_token_s)


def test_a_cold_start_elsewhere_wins_when_the_queue_is_longer() -> None:
    slow = NodeMeasures(service_s={MODEL: 60.0})
    placer, _ = placer_with(node("a", ready(busy=4), measures=slow), node("b", cached=(MODEL,)))
    placement = placer.choose(REQUEST)
    assert (placement.node_id, placement.rule) == ("b", "cached")


def test_replicas_when_all_slots_are_busy_and_the_queue_is_long_the_next_request_starts_another_node() -> (
    None
):
    placer, _ = placer_with(
        node("a", ready(busy=4), queued={MODEL: 8}),  # default service 5 s: 9 in line for 4 slots
        node("b", ready(OTHER, busy=1), cached=(MODEL,)),
        node("c", cached=(OTHER,)),
    )
    placement = placer.choose(REQUEST)
    assert (placement.node_id, placement.rule) == ("b", "cached")


def test_a_cached_artifact_beats_a_pull_even_on_a_fuller_node() -> None:
    placer, _ = placer_with(node("a", budget=64 * GB), node("b", ready(OTHER, busy=1), cached=(MODEL,)))
    placement = placer.choose(REQUEST)
    assert (placement.node_id, placement.rule) == ("b", "cached")


def test_the_pull_estimate_grows_with_size_and_shrinks_with_measured_bandwidth() -> None:
    defaults = Defaults()
    placer, _ = placer_with(node("a"))
    small = placer.choose(REQUEST)
    large = placer.choose(PlacementRequest(MODEL, memory_bytes=9 * GB, artifact_bytes=8 * GB))
    placer.update(node("a", measures=NodeMeasures(pull_bytes_per_s=10 * defaults.pull_bytes_per_s)))
    fast = placer.choose(REQUEST)
    assert small.rule == large.rule == fast.rule == "pull"
    assert large.estimated_ttft_s > small.estimated_ttft_s > fast.estimated_ttft_s
    pull = defaults.pull_setup_s + 3 * GB / defaults.pull_bytes_per_s
    load = defaults.process_start_s + 3 * GB / defaults.load_bytes_per_s
    assert small.estimated_ttft_s == pytest.approx(pull + load + defaults.first_token_s)


def test_a_model_of_unknown_size_starts_where_it_is_cached_rather_than_pulled_elsewhere() -> None:
    """Before any node estimated the model (sizes 0), a pull must still cost more than a start from disk."""
    placer, _ = placer_with(node("a"), node("b", cached=(MODEL,)))
    placement = placer.choose(PlacementRequest(MODEL, memory_bytes=0, artifact_bytes=0))
    assert (placement.node_id, placement.rule) == ("b", "cached")


def test_a_pull_onto_a_node_with_a_measured_instant_start_still_costs_more_than_a_start_from_disk() -> None:
    """Node a measured a process start of 0 (a spare was ready); node b, which holds the model, measured nothing
    and is estimated at the default. Sizes still unknown: b's start from disk must win."""
    instant = NodeMeasures(process_start_s=0.0, load_bytes_per_s=5 * GB)
    placer, _ = placer_with(node("a", ready(OTHER), measures=instant), node("b", cached=(MODEL,)))
    placement = placer.choose(PlacementRequest(MODEL, memory_bytes=0, artifact_bytes=0))
    assert (placement.node_id, placement.rule) == ("b", "cached")


def test_a_node_with_faster_measured_pulls_is_chosen() -> None:
    slow, fast = NodeMeasures(pull_bytes_per_s=1e8), NodeMeasures(pull_bytes_per_s=1e9)
    placer, _ = placer_with(node("a", measures=slow), node("b", measures=fast))
    assert placer.choose(REQUEST).node_id == "b"


def test_a_node_that_measured_nothing_is_costed_as_the_fleet_measured_not_at_the_defaults() -> None:
    """Node b holds the model and measured slow starts (a loaded machine: a second per process, a quarter of
    the default load bandwidth); node a measured nothing. At the defaults, a pull onto a looked cheaper than
    b's start from disk; like the fleet, a's start is as slow, and the pull adds to it."""
    slow = NodeMeasures(process_start_s=1.0, load_bytes_per_s=0.25 * Defaults().load_bytes_per_s)
    placer, _ = placer_with(node("a"), node("b", ready(OTHER), cached=(MODEL,), measures=slow))
    request = PlacementRequest(MODEL, memory_bytes=GB, artifact_bytes=100_000_000)
    [cached, pull] = placer.estimates(request)
    assert (cached.node_id, cached.rule, pull.node_id, pull.rule) == ("b", "cached", "a", "pull")
    assert pull.estimated_ttft_s - cached.estimated_ttft_s == pytest.approx(
        Defaults().pull_setup_s + 100_000_000 / Defaults().pull_bytes_per_s
    )


def test_a_service_time_measured_on_one_node_stands_in_for_a_node_that_has_not_served_the_model() -> None:
    quick = NodeMeasures(service_s={MODEL: 1.0})
    placer, _ = placer_with(node("a", ready(), measures=quick), node("b", ready(busy=4)))
    placer.update(node("a", measures=NodeMeasures()))  # a's instance stopped: its own report forgets it
    placement = placer.estimates(REQUEST)[0]
    assert (placement.node_id, placement.rule) == ("b", "busy")
    assert placement.estimated_ttft_s == pytest.approx(0.25 + Defaults().first_token_s)


def test_a_measured_cold_start_replaces_the_estimate_from_bandwidth() -> None:
    placer, _ = placer_with(node("a", cached=(MODEL,), measures=NodeMeasures(cold_start_s={MODEL: 9.0})))
    assert placer.choose(REQUEST).estimated_ttft_s == pytest.approx(9.0 + Defaults().first_token_s)


# -- memory, eviction, max_instances ---------------------------------------------------------------------------


def test_a_node_that_evicts_nothing_is_preferred_over_one_that_must_evict() -> None:
    full = node("a", ready(OTHER, memory=14 * GB), cached=(MODEL,))  # fits only by stopping the idle instance
    roomy = node("b", ready(OTHER, busy=2, memory=8 * GB), cached=(MODEL,))
    placer, _ = placer_with(full, roomy)
    assert placer.choose(REQUEST).node_id == "b"


def test_among_nodes_that_evict_nothing_the_least_loaded_is_chosen() -> None:
    placer, _ = placer_with(
        node("a", ready(OTHER, busy=3), cached=(MODEL,)), node("b", ready(OTHER, busy=1), cached=(MODEL,))
    )
    assert placer.choose(REQUEST).node_id == "b"


def test_an_idle_instance_is_evicted_when_no_node_has_free_memory() -> None:
    placer, _ = placer_with(node("a", ready(OTHER, memory=14 * GB), cached=(MODEL,)))
    assert placer.choose(REQUEST).rule == "cached"


def test_pinned_instances_are_never_evicted() -> None:
    pinned = node("a", ready(OTHER, memory=14 * GB, pinned=True), cached=(MODEL,))
    placer, _ = placer_with(pinned, node("b"))
    assert (placer.choose(REQUEST).node_id, placer.choose(REQUEST).rule) == ("b", "pull")
    placer.remove("b")
    with pytest.raises(NoNodeFits, match="pinned"):
        placer.choose(REQUEST)


def test_a_model_that_fits_no_node_names_the_model_and_the_largest_budget() -> None:
    placer, _ = placer_with(
        node("a", budget=16 * GB), node("b", budget=32 * GB), node("c", budget=64 * GB, alive=False)
    )
    huge = PlacementRequest("@cf/test/huge", memory_bytes=40 * GB, artifact_bytes=38 * GB)
    with pytest.raises(NoNodeFits) as raised:
        placer.choose(huge)
    assert "@cf/test/huge" in str(raised.value)
    assert f"{32 * GB // MIB} MiB" in str(raised.value)


def test_when_all_memory_is_held_by_busy_instances_the_request_waits_where_most_can_be_freed() -> None:
    placer, _ = placer_with(
        node("a", ready(OTHER, busy=1, memory=14 * GB)), node("b", ready(OTHER, busy=1, memory=12 * GB))
    )
    placement = placer.choose(REQUEST)
    assert placement.node_id == "b"
    assert placement.estimated_ttft_s > Defaults().service_s


def test_max_instances_lets_a_busy_node_scale_out_itself() -> None:
    busy = ready(busy=4)
    slow = NodeMeasures(service_s={MODEL: 60.0})
    placer, _ = placer_with(node("a", busy, measures=slow, max_instances={MODEL: 2}), node("b"))
    assert (placer.choose(REQUEST).node_id, placer.choose(REQUEST).rule) == ("a", "cached")
    placer.update(node("a", busy, ready(busy=4), measures=slow, max_instances={MODEL: 2}))
    placer.update(node("b", cached=(MODEL,)))
    assert (placer.choose(REQUEST).node_id, placer.choose(REQUEST).rule) == ("b", "cached")


def test_by_default_one_instance_of_a_model_per_node() -> None:
    slow = NodeMeasures(service_s={MODEL: 60.0})
    placer, _ = placer_with(node("a", ready(busy=4), measures=slow, budget=64 * GB))
    assert placer.choose(REQUEST).rule == "busy"


# -- liveness, exclusion, affinity -----------------------------------------------------------------------------


def test_dead_nodes_are_skipped() -> None:
    placer, _ = placer_with(node("a", ready(), alive=False), node("b", cached=(MODEL,)))
    assert placer.choose(REQUEST).node_id == "b"


def test_a_node_reported_dead_is_skipped_even_where_it_was_warm() -> None:
    placer, _ = placer_with(node("a", ready(busy=1)), node("b", cached=(MODEL,)))
    placer.update(node("a", ready(busy=1), alive=False))
    assert placer.choose(REQUEST).node_id == "b"
    assert [placement.node_id for placement in placer.estimates(REQUEST)] == ["b"]


def test_excluded_nodes_are_skipped_and_excluding_all_says_so() -> None:
    placer, _ = placer_with(node("a", ready()), node("b", cached=(MODEL,)))
    assert placer.choose(REQUEST, exclude=["a"]).node_id == "b"
    with pytest.raises(NoNodeFits, match="excluded"):
        placer.choose(REQUEST, exclude={"a", "b"})


def test_a_removed_node_is_forgotten() -> None:
    placer, _ = placer_with(node("a", ready()), node("b"))
    placer.remove("a")
    assert [view.node_id for view in placer.nodes()] == ["b"]
    assert placer.choose(REQUEST).node_id == "b"


def test_session_affinity_sticks_to_its_node_while_it_has_room() -> None:
    sticky = PlacementRequest(MODEL, 4 * GB, 3 * GB, affinity="session-1", slots=4)
    placer, _ = placer_with(node("a", ready(busy=2)), node("b", ready(busy=1)))
    assert send(placer, sticky).node_id == "b"
    placer.update(node("a", ready(busy=0)))
    placer.update(node("b", ready(busy=3)))
    assert placer.choose(REQUEST).node_id == "a"
    assert placer.choose(sticky).node_id == "b"


def test_session_affinity_waits_on_its_node_only_while_that_is_quicker_than_elsewhere() -> None:
    sticky = PlacementRequest(MODEL, 4 * GB, 3 * GB, affinity="session-1", slots=4)
    quick = NodeMeasures(service_s={MODEL: 0.4})
    placer, _ = placer_with(node("a", ready(busy=1)), node("b", ready(busy=0)))
    assert send(placer, sticky).node_id == "b"
    placer.update(node("b", ready(busy=4), measures=quick))
    placer.update(node("a", ready(busy=4), measures=quick, queued={MODEL: 4}))
    assert placer.choose(sticky).node_id == "b"
    placer.update(node("a", ready(busy=1)))
    assert placer.choose(sticky).node_id == "a"


def test_session_affinity_moves_when_its_node_is_removed() -> None:
    sticky = PlacementRequest(MODEL, 4 * GB, 3 * GB, affinity="session-1", slots=4)
    placer, _ = placer_with(node("a", ready(busy=2)), node("b", ready(busy=1)))
    assert send(placer, sticky).node_id == "b"
    placer.remove("b")
    assert send(placer, sticky).node_id == "a"
    placer.update(node("b", ready(busy=0)))
    assert placer.choose(sticky).node_id == "a"


def test_affinity_keys_are_bounded() -> None:
    placer = Placer(clock=FakeClock(), defaults=Defaults(affinity_keys=2))
    placer.update(node("a", ready(busy=1)))
    placer.update(node("b", ready(busy=2)))
    for key in ("k1", "k2", "k3"):
        request = PlacementRequest(MODEL, 4 * GB, 3 * GB, affinity=key)
        placer.placed(request, Placement("b", "warm", 0.02))
    assert placer.choose(PlacementRequest(MODEL, 4 * GB, 3 * GB, affinity="k3")).node_id == "b"
    assert placer.choose(PlacementRequest(MODEL, 4 * GB, 3 * GB, affinity="k1")).node_id == "a"


# -- counting its own placements between snapshots -------------------------------------------------------------


def test_own_placements_fill_free_slots_before_any_snapshot_shows_them() -> None:
    placer, _ = placer_with(node("a", ready(slots=2)), node("b", cached=(MODEL,)))
    first, second, third = send(placer), send(placer), send(placer)
    assert [first.rule, second.rule] == ["warm", "warm"]
    assert (third.node_id, third.rule) == ("a", "busy")  # 2.5 s for a slot, against a 2.9 s cold start on b
    placer.finished(REQUEST, first)
    assert placer.choose(REQUEST).rule == "busy"  # the third request takes the slot
    placer.finished(REQUEST, second)
    assert placer.choose(REQUEST).rule == "warm"


def test_a_snapshot_that_lags_behind_own_placements_does_not_free_their_slots() -> None:
    placer, _ = placer_with(node("a", ready(slots=2)), node("b", cached=(MODEL,)))
    send(placer), send(placer)
    placer.update(node("a", ready(slots=2, busy=0)))  # taken before the requests arrived
    assert placer.choose(REQUEST).rule != "warm"


def test_a_cold_start_it_sent_counts_as_starting_and_later_requests_queue_behind_it() -> None:
    placer, clock = placer_with(node("a", cached=(MODEL,)), node("b", cached=(MODEL,)))
    first = send(placer)
    assert (first.node_id, first.rule) == ("a", "cached")
    second = placer.choose(REQUEST)
    assert (second.node_id, second.rule) == ("a", "busy")
    assert second.estimated_ttft_s == pytest.approx(first.estimated_ttft_s)
    clock.advance(1.0)
    assert placer.choose(REQUEST).estimated_ttft_s == pytest.approx(first.estimated_ttft_s - 1.0)


def test_a_pending_start_stops_counting_once_a_snapshot_shows_the_instance() -> None:
    other = PlacementRequest(OTHER, memory_bytes=4 * GB, artifact_bytes=3 * GB)
    placer, clock = placer_with(node("a", cached=(MODEL, OTHER), budget=10 * GB), node("b", budget=10 * GB))
    send(placer)  # a cold start on a: 4 of its 10 GB
    placer.update(node("a", starting(started_at=clock()), cached=(OTHER,), budget=10 * GB))
    assert placer.choose(other).node_id == "a"  # 6 GB free, not 2: the start is not counted twice


def test_a_pending_start_holds_its_memory_until_shown() -> None:
    other = PlacementRequest(OTHER, memory_bytes=8 * GB, artifact_bytes=7 * GB)
    placer, _ = placer_with(node("a", cached=(MODEL, OTHER), budget=10 * GB), node("b", budget=10 * GB))
    send(placer)
    assert placer.choose(other).node_id == "b"


def test_a_reported_starting_instance_is_estimated_by_its_remaining_time() -> None:
    measured = NodeMeasures(cold_start_s={MODEL: 3.0})
    placer, _ = placer_with(
        node("a", starting(started_at=1_000_000.0 - 2.0), measures=measured), node("b", cached=(MODEL,))
    )
    placement = placer.choose(REQUEST)
    assert (placement.node_id, placement.rule) == ("a", "busy")
    assert placement.estimated_ttft_s == pytest.approx(1.0 + Defaults().first_token_s)


# -- the indexes at a scale where a decision evaluates only some nodes ------------------------------------------


def test_with_many_caching_nodes_a_node_with_free_memory_is_still_found() -> None:
    views = [node(f"n{i:03}", ready(OTHER, busy=1, memory=14 * GB), cached=(MODEL,)) for i in range(150)]
    views.append(node("roomy", cached=(MODEL,)))
    placer, _ = placer_with(*views)
    placement = placer.choose(REQUEST)
    assert (placement.node_id, placement.rule) == ("roomy", "cached")


def test_with_many_warm_nodes_the_least_busy_is_found_and_updates_move_it() -> None:
    views = [node(f"n{i:03}", ready(busy=3)) for i in range(200)]
    placer, _ = placer_with(*views)
    placer.update(node("n150", ready(busy=0)))
    assert placer.choose(REQUEST).node_id == "n150"
    placer.update(node("n150", ready(busy=4)))
    placer.update(node("n007", ready(busy=1)))
    assert placer.choose(REQUEST).node_id == "n007"
    placer.remove("n007")
    assert placer.choose(REQUEST).node_id == "n000"
