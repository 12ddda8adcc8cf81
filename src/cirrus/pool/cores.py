"""How many threads each decoding instance may use, so that together they never ask for more than the cores."""


def cores_each(cores: int, busy_instances: int) -> int:
    return max(1, cores // max(busy_instances, 1))
