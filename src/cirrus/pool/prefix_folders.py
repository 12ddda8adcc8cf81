"""Where a model's prefix cache is kept between its instances (runtime.disk_tier), and removing the folders whose
weights are gone.

A saved KV state is valid only for the weights that computed it, so each weights file gets a folder of its own,
named by the file's identity (path, size, modification time): new weights, new folder. The old folder would stay
on disk for good, and it holds up to a model's host-tier budget (about 750 MB for SmolLM2's 32,768 tokens, more
for bigger models). So each folder records whose it is (`owner.json`), and a server starting removes the folders
whose weights file is gone (its directory still there) or changed. Servers may share a state folder: nothing is
removed because this server's catalog lacks a model, nor when the weights cannot be looked at (a volume not
mounted, no permission), nor when their directory is missing (another machine's layout). Folders without an
owner record are left alone; a launch of their model records one.
"""

import hashlib
import json
import logging
import os
import shutil
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

OWNER_FILE = "owner.json"


@dataclass(frozen=True)
class WeightsIdentity:
    path: str
    size: int
    mtime_ns: int

    @classmethod
    def of(cls, weights: Path) -> "WeightsIdentity":
        stat = weights.stat()
        return cls(str(weights.resolve()), stat.st_size, stat.st_mtime_ns)

    @property
    def folder_name(self) -> str:
        identity = f"{self.path}|{self.size}|{self.mtime_ns}".encode()
        return hashlib.blake2b(identity, digest_size=8).hexdigest()

    def outdated(self) -> bool:
        """The file is gone from a directory that is still there, or it changed."""
        path = Path(self.path)
        try:
            return WeightsIdentity.of(path) != self
        except (FileNotFoundError, NotADirectoryError):
            return path.parent.is_dir()
        except OSError:  # cannot be looked at now: not evidence that it is gone
            return False


def prefix_cache_root(state_dir: Path) -> Path:
    return state_dir / "prefix-cache"


def folder_for(root: Path, weights: Path) -> Path:
    """The prefix-cache folder of a weights file as it is now, made and its owner recorded. A folder that cannot
    be made only costs the prefix cache its disk tier (the worker then writes nothing), never the launch."""
    identity = WeightsIdentity.of(weights)
    folder = root / identity.folder_name
    if _owner(folder) != identity:
        try:
            _record_owner(folder, identity)
        except OSError as error:
            log.warning("the prefix cache of %s will not be kept on disk: %s", weights, error)
    return folder


def remove_stale_folders(root: Path) -> list[Path]:
    """Remove the folders whose recorded weights file is gone or changed; returns those removed."""
    removed = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        if folder.is_symlink() or not folder.is_dir():
            continue
        owner = _owner(folder)
        if owner is not None and owner.outdated():
            shutil.rmtree(folder, ignore_errors=True)
            if not folder.exists():
                removed.append(folder)
    if removed:
        log.info("removed %d prefix-cache folders of weights that are gone or changed", len(removed))
    return removed


def _record_owner(folder: Path, identity: WeightsIdentity) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f"{OWNER_FILE}.{uuid.uuid4().hex}.partial"
    partial.write_text(json.dumps(asdict(identity)))
    os.replace(partial, folder / OWNER_FILE)


def _owner(folder: Path) -> WeightsIdentity | None:
    try:
        fields = json.loads((folder / OWNER_FILE).read_text())
        return WeightsIdentity(str(fields["path"]), int(fields["size"]), int(fields["mtime_ns"]))
    except (OSError, ValueError, KeyError, TypeError):  # no record (or a damaged one): left alone
        return None
