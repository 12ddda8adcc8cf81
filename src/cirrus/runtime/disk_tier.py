"""The prefix cache outlives its instance: when a worker stops (keep-alive ran out, the model was unloaded), what
its prefix cache holds is written to a folder, and the next instance of the same model starts with it.

A serverless model scales to zero, and without this every cold start evaluates its prompt from nothing: the
chat template's system prompt, a conversation's whole history. Reading a saved prefix back costs a file read
and a copy into the KV cache, far below evaluating it on a CPU. A new worker reads only the entries' tokens
at start; an entry's state is read when a prompt first matches it.

Each entry is one file named by a digest of its tokens: a 4-byte header length, a JSON header (tokens, salt),
then llama.cpp's saved sequence state. Files are written under a temporary name and renamed, so a reader never
sees half a file; two instances of one model may share the folder, and an entry one of them removed is simply
evaluated again by the other.
"""

import hashlib
import json
import logging
import os
import struct
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

SUFFIX = ".kv"
_LENGTH = struct.Struct("<I")


@dataclass(frozen=True)
class StoredPrefix:
    tokens: tuple[int, ...]
    salt: Hashable
    path: Path


def digest(tokens: Sequence[int], salt: Hashable) -> str:
    data = json.dumps([list(tokens), salt]).encode()
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def read_index(folder: Path) -> list[StoredPrefix]:
    """The tokens of every entry in the folder (not their states); an unreadable entry is skipped."""
    stored = []
    for path in sorted(folder.glob(f"*{SUFFIX}")) if folder.is_dir() else []:
        try:
            with path.open("rb") as file:
                (length,) = _LENGTH.unpack(file.read(_LENGTH.size))
                header = json.loads(file.read(length))
            stored.append(StoredPrefix(tuple(header["tokens"]), header["salt"], path))
        except (OSError, ValueError, KeyError, struct.error):
            log.warning("skipping unreadable prefix cache entry %s", path)
    return stored


def read_state(path: Path) -> bytes | None:
    """An entry's saved state, or None when it is gone (another instance replaced the folder's contents)."""
    try:
        data = path.read_bytes()
        (length,) = _LENGTH.unpack_from(data)
        return data[_LENGTH.size + length :]
    except (OSError, struct.error):
        return None


def write_snapshot(folder: Path, entries: Iterable[tuple[Sequence[int], Hashable, bytes | Path]]) -> int:
    """Make the folder hold exactly these entries (states given as bytes, or as the entry file they are already
    in). Returns how many entries it holds."""
    folder.mkdir(parents=True, exist_ok=True)
    kept: set[Path] = set()
    for tokens, salt, state in entries:
        path = folder / f"{digest(tokens, salt)}{SUFFIX}"
        if isinstance(state, bytes) and not path.exists():
            _write(path, tokens, salt, state)
        if path.exists():
            kept.add(path)
    for stale in set(folder.glob(f"*{SUFFIX}")) - kept:
        stale.unlink(missing_ok=True)
    return len(kept)


def _write(path: Path, tokens: Sequence[int], salt: Hashable, state: bytes) -> None:
    header = json.dumps({"tokens": list(tokens), "salt": salt}).encode()
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    with partial.open("wb") as file:
        file.write(_LENGTH.pack(len(header)))
        file.write(header)
        file.write(state)
    partial.replace(path)
