"""The prefix cache's folders on disk: one per weights file as it is, and removed once those weights are gone."""

import hashlib
import os
import shutil
from pathlib import Path

from cirrus.pool.prefix_folders import OWNER_FILE, folder_for, remove_stale_folders


def weights_file(folder: Path, name: str, content: bytes = b"GGUF weights") -> Path:
    path = folder / name
    path.write_bytes(content)
    return path


def with_an_entry(folder: Path) -> Path:
    (folder / "0123.kv").write_bytes(b"a saved state")
    return folder


def test_one_folder_per_weights_file_as_it_is_now(tmp_path: Path) -> None:
    root = tmp_path / "prefix-cache"
    weights = weights_file(tmp_path, "a.gguf")
    first = folder_for(root, weights)
    assert folder_for(root, weights) == first
    assert (first / OWNER_FILE).is_file()
    assert folder_for(root, weights_file(tmp_path, "b.gguf")) != first
    weights.write_bytes(b"other GGUF weights, another size")
    assert folder_for(root, weights) != first


def test_the_folder_keeps_the_name_it_had_before_owners_were_recorded(tmp_path: Path) -> None:
    """A server upgraded to this code finds the prefix caches its earlier version kept."""
    weights = weights_file(tmp_path, "a.gguf")
    stat = weights.stat()
    identity = f"{weights.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()
    expected = hashlib.blake2b(identity, digest_size=8).hexdigest()
    assert folder_for(tmp_path / "prefix-cache", weights).name == expected


def test_folders_of_weights_gone_or_changed_are_removed_and_current_ones_kept(tmp_path: Path) -> None:
    root = tmp_path / "prefix-cache"
    kept = weights_file(tmp_path, "kept.gguf")
    deleted = weights_file(tmp_path, "deleted.gguf")
    replaced = weights_file(tmp_path, "replaced.gguf")
    kept_folder = with_an_entry(folder_for(root, kept))
    deleted_folder = with_an_entry(folder_for(root, deleted))
    replaced_folder = with_an_entry(folder_for(root, replaced))
    deleted.unlink()
    replaced.write_bytes(b"a new version of the weights")
    replaced_now = folder_for(root, replaced)

    removed = remove_stale_folders(root)

    assert sorted(removed) == sorted([deleted_folder, replaced_folder])
    assert not deleted_folder.exists() and not replaced_folder.exists()
    assert (kept_folder / "0123.kv").is_file() and replaced_now.is_dir()


def test_a_touched_weights_file_counts_as_changed(tmp_path: Path) -> None:
    root = tmp_path / "prefix-cache"
    weights = weights_file(tmp_path, "a.gguf")
    folder = with_an_entry(folder_for(root, weights))
    stat = weights.stat()
    os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    assert remove_stale_folders(root) == [folder]


def test_folders_without_an_owner_record_are_left_alone_and_a_launch_records_it_again(tmp_path: Path) -> None:
    root = tmp_path / "prefix-cache"
    older = root / "0011223344556677"
    older.mkdir(parents=True)
    with_an_entry(older)
    weights = weights_file(tmp_path, "a.gguf")
    damaged = with_an_entry(folder_for(root, weights))
    (damaged / OWNER_FILE).write_text("not json")
    assert remove_stale_folders(root) == []
    assert (older / "0123.kv").is_file() and (damaged / "0123.kv").is_file()
    assert folder_for(root, weights) == damaged
    weights.unlink()
    assert remove_stale_folders(root) == [damaged]


def test_weights_that_cannot_be_looked_at_keep_their_folder(tmp_path: Path) -> None:
    """Another machine's layout (the directory is not there) or a file that cannot be looked at (no permission, a
    volume failing) is not evidence that they are gone."""
    root = tmp_path / "prefix-cache"
    elsewhere = tmp_path / "models-volume"
    elsewhere.mkdir()
    unmounted = with_an_entry(folder_for(root, weights_file(elsewhere, "a.gguf")))
    shutil.rmtree(elsewhere)
    weights = weights_file(tmp_path, "b.gguf")
    unreadable = with_an_entry(folder_for(root, weights))
    weights.unlink()
    weights.symlink_to(weights.name)  # a loop: stat fails with ELOOP, not "no such file", even for root
    assert remove_stale_folders(root) == []
    assert (unmounted / "0123.kv").is_file() and (unreadable / "0123.kv").is_file()


def test_an_unusable_state_folder_does_not_stop_a_launch(tmp_path: Path) -> None:
    root = tmp_path / "prefix-cache"
    root.write_text("a file where the folder should be")
    assert folder_for(root, weights_file(tmp_path, "a.gguf")).parent == root


def test_no_folder_yet_removes_nothing(tmp_path: Path) -> None:
    assert remove_stale_folders(tmp_path / "prefix-cache") == []
