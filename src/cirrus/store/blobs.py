"""Content-addressed blobs under `blobs/sha256/<hex>`: a blob on disk is always whole and matches its name.

Every write goes to a temporary file on the same filesystem, is hashed while it is written, fsynced, checked and
only then renamed into place. A puller that knows a digest in advance writes through `open_partial` (which
resumes where an interrupted download stopped) and its `commit` (which refuses bytes that hash differently); the
partial file stays locked until it is renamed into place, so no second writer can touch the bytes being checked.
"""

import contextlib
import errno
import fcntl
import hashlib
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from cirrus.store.atomic import publish

CHUNK_BYTES = 1 << 20
_DIGEST = re.compile(r"sha256:([0-9a-f]{64})")


class BlobError(Exception):
    """A blob could not be stored or found; the message says which and why."""


class BadDigest(BlobError, ValueError):
    pass


class BlobNotFound(BlobError, KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


class BlobBusy(BlobError):
    """Another writer holds the partial file of this digest."""


class DigestMismatch(BlobError):
    def __init__(self, expected: str, actual: str) -> None:
        super().__init__(f"content does not match its digest: expected {expected}, got {actual}")
        self.expected = expected
        self.actual = actual


@dataclass(frozen=True)
class Blob:
    digest: str
    size: int
    path: Path
    fresh: bool = field(default=False, compare=False)  # this write put it in the store (it was not there)


def digest_hex(digest: str) -> str:
    """The hex part of `sha256:<64 hex>`; anything else is refused."""
    match = _DIGEST.fullmatch(digest)
    if match is None:
        raise BadDigest(f"not a sha256 digest: {digest!r} (expected sha256:<64 lowercase hex digits>)")
    return match.group(1)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(CHUNK_BYTES):
            digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


class BlobStore:
    def __init__(self, root: Path) -> None:
        self.root = root
        self._blobs = root / "blobs" / "sha256"
        self._partials = root / "partials"
        self.scratch = root / "tmp"

    def path(self, digest: str) -> Path:
        return self._blobs / digest_hex(digest)

    def has(self, digest: str) -> bool:
        return self.path(digest).is_file()

    def get(self, digest: str) -> Blob:
        path = self.path(digest)
        if not path.is_file():
            raise BlobNotFound(f"no blob {digest} in the store at {self.root}")
        return Blob(digest, path.stat().st_size, path)

    def digests(self) -> list[str]:
        if not self._blobs.is_dir():
            return []
        return sorted(
            f"sha256:{p.name}" for p in self._blobs.iterdir() if _DIGEST.fullmatch(f"sha256:{p.name}")
        )

    def remove(self, digest: str) -> None:
        self.path(digest).unlink(missing_ok=True)

    # -- writing a blob whose digest is computed as it is written ------------------------------------------

    def write(self, chunks: Iterable[bytes], expected: str | None = None) -> Blob:
        """Store a stream of bytes; with `expected`, refuse (and keep nothing) if it hashes differently."""
        if expected is not None:
            digest_hex(expected)
        with self.scratch_file(".blob") as temporary:
            hasher = hashlib.sha256()
            with temporary.open("wb") as stream:
                for chunk in chunks:
                    hasher.update(chunk)
                    stream.write(chunk)
                stream.flush()
                os.fsync(stream.fileno())
            return self._publish(temporary, f"sha256:{hasher.hexdigest()}", expected)

    def write_file(self, source: Path, expected: str | None = None) -> Blob:
        """Copy a file into the store."""
        with source.open("rb") as stream:
            return self.write(iter(lambda: stream.read(CHUNK_BYTES), b""), expected)

    def adopt(self, produced: Path) -> Blob:
        """Move a finished file that a tool wrote into `scratch` into the store, without copying it."""
        with produced.open("rb") as stream:
            hasher = hashlib.sha256()
            while chunk := stream.read(CHUNK_BYTES):
                hasher.update(chunk)
            os.fsync(stream.fileno())
        return self._publish(produced, f"sha256:{hasher.hexdigest()}", None)

    @contextlib.contextmanager
    def scratch_file(self, suffix: str) -> Iterator[Path]:
        """A fresh temporary name on the store's filesystem; whatever is left under it is deleted on exit."""
        self.scratch.mkdir(parents=True, exist_ok=True)
        descriptor, name = tempfile.mkstemp(dir=self.scratch, suffix=suffix)
        os.close(descriptor)
        try:
            yield Path(name)
        finally:
            Path(name).unlink(missing_ok=True)

    def _publish(self, temporary: Path, actual: str, expected: str | None) -> Blob:
        if expected is not None and actual != expected:
            temporary.unlink(missing_ok=True)
            raise DigestMismatch(expected, actual)
        size = temporary.stat().st_size
        final = self.path(actual)
        if final.is_file():
            temporary.unlink()  # identical content is already stored
            return Blob(actual, size, final)
        publish(temporary, final)
        return Blob(actual, size, final, fresh=True)

    # -- writing a blob whose digest is known in advance, resumable -------------------------------------------

    def partial_path(self, digest: str) -> Path:
        return self._partials / f"sha256-{digest_hex(digest)}.partial"

    def open_partial(self, digest: str) -> "Partial":
        """The locked partial file of `digest`, to append to and then `commit` before closing it.

        Raises BlobBusy while another writer holds it. When the blob is already stored (another writer
        finished first), `Partial.stored` says so and nothing needs writing.
        """
        path = self.partial_path(digest)
        path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            stream = path.open("a+b")
            try:
                fcntl.flock(stream.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                stream.close()
                if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                    raise BlobBusy(f"another writer is already writing {digest}") from None
                raise
            if not _is_still(stream, path):
                stream.close()  # what we locked was stored or discarded meanwhile: open the new file
                continue
            stored = self.get(digest) if self.has(digest) else None
            if stored is not None:
                path.unlink()  # another writer stored the blob first; this partial file is of no use
            return Partial(self, digest, stream, stream.seek(0, os.SEEK_END), stored)
        raise BlobBusy(f"the partial file of {digest} keeps changing under another writer")

    def discard_partial(self, digest: str) -> None:
        self.partial_path(digest).unlink(missing_ok=True)


def _is_still(stream: BinaryIO, path: Path) -> bool:
    """Whether an open file is still the one at `path` (not renamed into the store or deleted since)."""
    try:
        return os.stat(path).st_ino == os.fstat(stream.fileno()).st_ino
    except FileNotFoundError:
        return False


class Partial:
    """A locked partial file; the lock is held until `close`, so `commit` hashes and renames under it."""

    def __init__(
        self, store: BlobStore, digest: str, stream: BinaryIO, offset: int, stored: Blob | None
    ) -> None:
        self.digest = digest
        self.stream = stream
        self.offset = offset  # the bytes it already holds: where to resume
        self.stored = stored  # the finished blob when another writer stored it first
        self._store = store
        self._path = store.partial_path(digest)

    def __enter__(self) -> "Partial":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.stream.close()

    def commit(self, size: int | None = None) -> Blob:
        """Check what was written against the digest (and `size`) and store it; a mismatch deletes it."""
        if self.stored is not None:
            return self.stored
        self.stream.flush()
        descriptor = self.stream.fileno()
        os.fsync(descriptor)
        hasher = hashlib.sha256()
        position = 0
        while chunk := os.pread(descriptor, CHUNK_BYTES, position):
            hasher.update(chunk)
            position += len(chunk)
        if size is not None and position != size:
            self.discard()
            raise DigestMismatch(self.digest, f"{position} bytes instead of {size}")
        try:
            return self._store._publish(self._path, f"sha256:{hasher.hexdigest()}", self.digest)
        finally:
            self.stored = self._store.get(self.digest) if self._store.has(self.digest) else None

    def discard(self) -> None:
        self._path.unlink(missing_ok=True)
