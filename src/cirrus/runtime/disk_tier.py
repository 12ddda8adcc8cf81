"""The prefix cache outlives its instance: when a worker stops (keep-alive ran out, the model was unloaded), what
its prefix cache holds is written to a folder, and the next instance of the same model starts with it.

A serverless model scales to zero, and without this every cold start evaluates its prompt from nothing: the
chat template's system prompt, a conversation's whole history. Reading a saved prefix back costs a file read
and a copy into the KV cache, far below evaluating it on a CPU. A new worker reads only the entries' tokens
at start; an entry's state is read when a prompt first matches it.

Each entry is one file named by a digest of its tokens: a 4-byte header length, a JSON header (tokens, salt, a
checksum of the state), then llama.cpp's saved sequence state. Files are written under a temporary name and
renamed, so a reader never sees half a file, and a damaged state is never restored. Instances of one model share
the folder: each removes only the entries it read itself, and an entry that vanished is evaluated again.
"""

import hashlib
import json
import logging
import os
import struct
import time
from collections.abc import Collection, Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cirrus.runtime.host_tier import State

log = logging.getLogger(__name__)

SUFFIX = ".kv"
PARTIAL = ".partial"
SNAPSHOT_TIME_LIMIT_S = 2.0
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
            header = _header(path)
            tokens, salt = header["tokens"], header["salt"]
            if not all(isinstance(token, int) for token in tokens) or not isinstance(salt, str | None):
                raise ValueError("tokens must be integers and the salt a string")
            stored.append(StoredPrefix(tuple(tokens), salt, path))
        except (OSError, ValueError, KeyError, TypeError, struct.error):
            log.warning("skipping unreadable prefix cache entry %s", path)
    return stored


def read_state(path: Path) -> bytes | None:
    """An entry's saved state, or None when it is gone (another instance replaced it) or damaged."""
    try:
        data = path.read_bytes()
        (length,) = _LENGTH.unpack_from(data)
        header = json.loads(data[_LENGTH.size : _LENGTH.size + length])
        state = data[_LENGTH.size + length :]
        return state if header.get("checksum") == _checksum(state) else None
    except (OSError, ValueError, AttributeError, struct.error):
        return None


def write_snapshot(
    folder: Path,
    entries: Iterable[tuple[Sequence[int], Hashable, State | Path]],
    replaces: Collection[Path] = (),
    time_limit_s: float = SNAPSHOT_TIME_LIMIT_S,
) -> int:
    """Write the entries (most valuable first; states as bytes, or as the entry file they are already in) and
    remove those of `replaces` (what this instance read at its start) that are no longer among them; entries
    other instances wrote are left alone. Writing stops at the time limit: a stopping instance holds its memory
    until it exits, and a cold start may be waiting for that memory. Returns how many entries were kept. A folder
    that is gone is not made again: it was removed for weights that changed (pool/prefix_folders.py)."""
    if not folder.is_dir():
        return 0
    _remove_abandoned_partials(folder)
    deadline = time.monotonic() + time_limit_s
    kept: set[Path] = set()
    for tokens, salt, state in entries:
        path = folder / f"{digest(tokens, salt)}{SUFFIX}"
        if not isinstance(state, Path) and not path.exists() and time.monotonic() < deadline:
            _write(path, tokens, salt, state)
        if path.exists():
            kept.add(path)
    for stale in set(replaces) - kept:
        stale.unlink(missing_ok=True)
    return len(kept)


def _header(path: Path) -> dict[str, Any]:
    with path.open("rb") as file:
        (length,) = _LENGTH.unpack(file.read(_LENGTH.size))
        header = json.loads(file.read(length))
    if not isinstance(header, dict):
        raise ValueError("the header is not an object")
    return header


def _checksum(state: State) -> str:
    return hashlib.blake2b(state, digest_size=16).hexdigest()


def _write(path: Path, tokens: Sequence[int], salt: Hashable, state: State) -> None:
    header = json.dumps({"tokens": list(tokens), "salt": salt, "checksum": _checksum(state)}).encode()
    partial = path.with_name(f"{path.name}.{os.getpid()}{PARTIAL}")
    with partial.open("wb") as file:
        file.write(_LENGTH.pack(len(header)))
        file.write(header)
        file.write(state)
    partial.replace(path)


def _remove_abandoned_partials(folder: Path) -> None:
    """Half-written files of writers that were killed (their process is gone)."""
    for partial in folder.glob(f"*{PARTIAL}"):
        writer = partial.name.removesuffix(PARTIAL).rsplit(".", 1)[-1]
        if not writer.isdigit() or not Path(f"/proc/{writer}").exists():
            partial.unlink(missing_ok=True)
