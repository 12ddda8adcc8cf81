"""The content-addressed blob store: whole-or-nothing writes, digest checks, resumable partial writes."""

import hashlib
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from cirrus.store.blobs import BadDigest, BlobBusy, BlobNotFound, BlobStore, DigestMismatch, sha256_file

DATA = b"weights " * 10_000


def digest_of(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def leftovers(store: BlobStore) -> list[Path]:
    return sorted(store.scratch.iterdir()) if store.scratch.is_dir() else []


def test_write_stores_content_under_its_digest(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    blob = store.write([DATA[:100], DATA[100:]])
    assert blob.digest == digest_of(DATA)
    assert blob.path == tmp_path / "blobs" / "sha256" / digest_of(DATA).removeprefix("sha256:")
    assert blob.path.read_bytes() == DATA
    assert blob.size == len(DATA)
    assert store.digests() == [blob.digest]
    assert leftovers(store) == []


def test_identical_content_is_stored_once(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    first = store.write([DATA])
    second = store.write_file(first.path)
    assert second == first
    assert store.digests() == [first.digest]


def test_write_refuses_content_that_differs_from_the_expected_digest(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    with pytest.raises(DigestMismatch) as caught:
        store.write([DATA], expected=digest_of(b"something else"))
    assert caught.value.actual == digest_of(DATA)
    assert store.digests() == []
    assert leftovers(store) == []


def test_a_stream_that_fails_midway_leaves_nothing(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)

    def chunks() -> Iterator[bytes]:
        yield DATA
        raise OSError("connection lost")

    with pytest.raises(OSError, match="connection lost"):
        store.write(chunks())
    assert store.digests() == []
    assert leftovers(store) == []


def test_a_writer_killed_midway_never_leaves_a_blob(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import sys, time
        from pathlib import Path
        from cirrus.store.blobs import BlobStore
        def chunks():
            yield b"x" * 65536
            print("writing", flush=True)
            time.sleep(60)
            yield b"y"
        BlobStore(Path({str(tmp_path)!r})).write(chunks())
        """
    )
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE)
    assert writer.stdout is not None
    assert writer.stdout.readline() == b"writing\n"
    os.kill(writer.pid, signal.SIGKILL)
    writer.wait()
    store = BlobStore(tmp_path)
    assert store.digests() == []
    assert [p.stat().st_size for p in leftovers(store)] == [65536]  # a temporary name, never a blob


def test_adopt_moves_a_finished_file_into_the_store(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    with store.scratch_file(".gguf") as produced:
        produced.write_bytes(DATA)
        blob = store.adopt(produced)
        assert not produced.exists()
    assert sha256_file(blob.path) == blob.digest == digest_of(DATA)
    assert leftovers(store) == []


def test_resume_appends_to_the_partial_file_then_commits(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    digest = digest_of(DATA)
    with store.open_partial(digest) as partial:
        assert partial.offset == 0
        partial.stream.write(DATA[:1000])
    with store.open_partial(digest) as partial:
        assert partial.offset == 1000
        partial.stream.write(DATA[partial.offset :])
        blob = partial.commit(len(DATA))
    assert blob.path.read_bytes() == DATA
    assert not store.partial_path(digest).exists()
    assert store.has(digest)


def test_commit_refuses_and_deletes_a_partial_that_hashes_differently(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    digest = digest_of(DATA)
    with store.open_partial(digest) as partial:
        partial.stream.write(DATA[:-1] + b"!")
        with pytest.raises(DigestMismatch, match="does not match its digest"):
            partial.commit()
    assert not store.has(digest)
    assert not store.partial_path(digest).exists()


def test_commit_refuses_a_partial_of_the_wrong_size(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    with store.open_partial(digest_of(DATA)) as partial:
        partial.stream.write(DATA + b"!")
        with pytest.raises(DigestMismatch, match=f"{len(DATA) + 1} bytes instead of {len(DATA)}"):
            partial.commit(len(DATA))
    assert store.digests() == [] and not store.partial_path(digest_of(DATA)).exists()


def test_a_partial_has_one_writer_at_a_time(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    digest = digest_of(DATA)
    with store.open_partial(digest), pytest.raises(BlobBusy):
        store.open_partial(digest)
    store.open_partial(digest).close()  # free again once the first writer closed


def test_the_lock_is_held_until_the_blob_is_stored_and_a_later_writer_finds_it(tmp_path: Path) -> None:
    store, other = BlobStore(tmp_path), BlobStore(tmp_path)
    digest = digest_of(DATA)
    with store.open_partial(digest) as partial:
        partial.stream.write(DATA)
        with pytest.raises(BlobBusy):  # until it is stored, nobody else can truncate or append to it
            other.open_partial(digest)
        partial.commit(len(DATA))
    with other.open_partial(digest) as late:  # the first writer finished meanwhile: nothing to write
        assert late.stored is not None and late.stored.path == store.path(digest)
        assert late.commit(len(DATA)).path.read_bytes() == DATA
    assert store.get(digest).path.read_bytes() == DATA
    assert not store.partial_path(digest).exists()


def test_partials_are_not_blobs(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    store.open_partial(digest_of(DATA)).close()
    assert store.digests() == []
    with pytest.raises(BlobNotFound, match="no blob"):
        store.get(digest_of(DATA))


@pytest.mark.parametrize(
    "digest", ["sha256:abc", "md5:" + "0" * 64, "sha256:" + "G" * 64, "../../etc/passwd"]
)
def test_malformed_digests_are_refused(tmp_path: Path, digest: str) -> None:
    with pytest.raises(BadDigest, match="not a sha256 digest"):
        BlobStore(tmp_path).path(digest)


def test_scratch_files_are_removed_on_exit(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    with store.scratch_file(".gguf") as path:
        path.write_bytes(b"half")
    assert leftovers(store) == []
