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
    stream, offset = store.open_partial(digest)
    with stream:
        assert offset == 0
        stream.write(DATA[:1000])
    stream, offset = store.open_partial(digest)
    with stream:
        assert offset == 1000
        stream.write(DATA[offset:])
    blob = store.commit(digest)
    assert blob.path.read_bytes() == DATA
    assert not store.partial_path(digest).exists()
    assert store.has(digest)


def test_commit_refuses_and_deletes_a_partial_that_hashes_differently(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    digest = digest_of(DATA)
    stream, _ = store.open_partial(digest)
    with stream:
        stream.write(DATA[:-1] + b"!")
    with pytest.raises(DigestMismatch, match="does not match its digest"):
        store.commit(digest)
    assert not store.has(digest)
    assert not store.partial_path(digest).exists()


def test_a_partial_has_one_writer_at_a_time(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    digest = digest_of(DATA)
    stream, _ = store.open_partial(digest)
    with stream, pytest.raises(BlobBusy):
        store.open_partial(digest)
    other, _ = store.open_partial(digest)  # free again once the first writer closed
    other.close()


def test_partials_are_not_blobs(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    stream, _ = store.open_partial(digest_of(DATA))
    stream.close()
    assert store.digests() == []
    with pytest.raises(BlobNotFound, match="no blob"):
        store.get(digest_of(DATA))


@pytest.mark.parametrize(
    "digest", ["sha256:abc", "md5:" + "0" * 64, "sha256:" + "G" * 64, "../../etc/passwd"]
)
def test_malformed_digests_are_refused(tmp_path: Path, digest: str) -> None:
    with pytest.raises(BadDigest, match="not a sha256 digest"):
        BlobStore(tmp_path).path(digest)


def test_commit_without_a_partial_says_so(tmp_path: Path) -> None:
    with pytest.raises(BlobNotFound, match="nothing was written"):
        BlobStore(tmp_path).commit(digest_of(DATA))


def test_scratch_files_are_removed_on_exit(tmp_path: Path) -> None:
    store = BlobStore(tmp_path)
    with store.scratch_file(".gguf") as path:
        path.write_bytes(b"half")
    assert leftovers(store) == []
