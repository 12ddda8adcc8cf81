"""A failed pack removes the blobs it stored itself, never one another writer stored meanwhile."""

from pathlib import Path

from cirrus.pack.pipeline import _roll_back
from cirrus.store.local import LocalStore


def test_a_rollback_removes_only_the_blobs_this_run_adopted(tmp_path: Path) -> None:
    store = LocalStore(tmp_path / "store")
    produced = store.blobs.scratch / "variant.gguf"
    produced.parent.mkdir(parents=True)
    produced.write_bytes(b"what the run quantized")
    ours = store.blobs.adopt(produced)
    pulled_meanwhile = store.blobs.write([b"what a concurrent pull stored"])
    assert ours.fresh and pulled_meanwhile.fresh
    assert not store.blobs.write([b"what the run quantized"]).fresh, "already stored: not this write's"

    _roll_back(store, [ours.digest], [])

    assert store.blobs.digests() == [pulled_meanwhile.digest]
