"""A snapshot's instances summed per model: what the placer reads of them."""

from typing import NamedTuple

from cirrus.placement.view import InstanceView, NodeView


class Reported(NamedTuple):
    """One model's instances in a snapshot (a tuple: one is built per model and snapshot)."""

    ready_slots: int = 0
    starting_slots: int = 0
    starting: int = 0
    starting_since: float | None = None  # when the earliest starting instance began, if the node said
    busy: int = 0
    instances: int = 0  # not stopping
    pinned_bytes: int = 0
    used_bytes: int = 0
    evictable_bytes: int = 0  # held by ready instances with no request, not pinned


NOTHING = Reported()


def report(instances: tuple[InstanceView, ...]) -> Reported:
    """One model's instances, summed."""
    ready_slots = starting_slots = starting = busy = serving = pinned = used = evictable = 0
    since: float | None = None
    for instance in instances:
        state = instance.state
        used += instance.memory_bytes
        if state == "ready":
            ready_slots += instance.slots
            busy += instance.busy
            if instance.busy == 0 and not instance.pinned:
                evictable += instance.memory_bytes
        elif state == "starting":
            starting_slots += instance.slots
            starting += 1
            busy += instance.busy
            if instance.started_at is not None:
                since = instance.started_at if since is None else min(since, instance.started_at)
        serving += state != "stopping"
        pinned += instance.memory_bytes if instance.pinned else 0
    return Reported(ready_slots, starting_slots, starting, since, busy, serving, pinned, used, evictable)


def group(view: NodeView) -> dict[str, tuple[InstanceView, ...]]:
    groups: dict[str, list[InstanceView]] = {}
    for instance in view.instances:
        group = groups.get(instance.model)
        if group is None:
            groups[instance.model] = [instance]
        else:
            group.append(instance)
    return {model: tuple(group) for model, group in groups.items()}
