"""Crash-safe writes (rerank.core.atomic): complete or absent, the user's umask, leftovers of killed writers cleaned."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from rerank.core.atomic import atomic_directory, atomic_write, remove_stale, remove_stale_in, temporary_sibling


@pytest.mark.parametrize(("umask", "file_mode", "folder_mode"), [(0o022, 0o644, 0o755), (0o002, 0o664, 0o775),
                                                                 (0o077, 0o600, 0o700)])
def test_outputs_get_the_permissions_of_the_umask(tmp_path: Path, umask: int, file_mode: int,
                                                  folder_mode: int) -> None:
    previous = os.umask(umask)
    try:
        with atomic_write(tmp_path / "metrics.json") as handle:
            handle.write("{}")
        with atomic_directory(tmp_path / "model") as staging:
            (staging / "config.json").write_text("{}")
            (staging / "model.safetensors").write_text("")
            (staging / "model.safetensors").chmod(0o600)  # as transformers writes it, whatever the umask
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "metrics.json").stat().st_mode) == file_mode
    assert stat.S_IMODE((tmp_path / "model").stat().st_mode) == folder_mode
    for name in ("config.json", "model.safetensors"):
        assert stat.S_IMODE((tmp_path / "model" / name).stat().st_mode) == file_mode


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "test.run"
    target.write_text("old")
    with pytest.raises(RuntimeError), atomic_write(target) as handle:
        handle.write("half of the new")
        raise RuntimeError("crash")
    assert target.read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["test.run"]
    with pytest.raises(RuntimeError), atomic_directory(tmp_path / "model") as staging:
        (staging / "weights").write_text("half")
        raise RuntimeError("crash")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["test.run"]


def test_leftovers_of_dead_writers_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    target = tmp_path / "last.ckpt"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    gone = tmp_path / f".last.ckpt.tmp-{socket.gethostname()}-{int(dead.stdout)}-abcd1234"
    gone.write_text("from a killed process")
    alive = temporary_sibling(target)  # this process: alive
    alive.write_text("being written")
    elsewhere = tmp_path / ".last.ckpt.tmp-another-host-1-abcd1234"  # another host's process: not ours to judge
    elsewhere.write_text("?")
    other = tmp_path / f".lucene-abc.tmp-{socket.gethostname()}-{int(dead.stdout)}-abcd1234"  # another target's
    other.mkdir()
    assert remove_stale(target) == [gone]
    assert alive.exists() and elsewhere.exists() and not gone.exists() and other.exists()
    assert remove_stale_in(tmp_path) == [other]  # whatever the target, after a child that wrote there died
    assert alive.exists() and elsewhere.exists() and not other.exists()


def test_a_cache_entry_that_another_builder_published_is_kept(tmp_path: Path) -> None:
    entry = tmp_path / "index"
    with atomic_directory(entry, replace=False) as staging:
        (staging / "built-by").write_text("us")
        entry.mkdir()  # another process published the same entry meanwhile
        (entry / "built-by").write_text("them")
    assert (entry / "built-by").read_text() == "them" and sorted(p.name for p in tmp_path.iterdir()) == ["index"]
    with atomic_directory(entry) as staging:  # replace=True: the new folder wins
        (staging / "built-by").write_text("us")
    assert (entry / "built-by").read_text() == "us" and sorted(p.name for p in tmp_path.iterdir()) == ["index"]


def test_a_cache_entry_is_used_only_while_it_matches_its_seal(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    from rerank.core.cache import intact, reseal, seal_of, sealing

    entry = tmp_path / "scores.trec"
    assert not intact(entry, "scores")  # absent: made, silently
    with atomic_write(entry, finish=sealing(entry)) as handle:
        handle.write("1 Q0 d1 1 2.5 x\n")
    assert seal_of(entry).is_file() and intact(entry, "scores")
    entry.write_text("1 Q0 d1 1 9.5 x\n")  # the same size, another content
    assert not intact(entry, "scores") and not entry.exists() and not seal_of(entry).exists()
    assert "cache entry " + str(entry) + " (scores) does not match its seal (its content changed)" in caplog.text
    entry.write_text("written by an older release, without a seal\n")
    assert not intact(entry, "scores") and "has no complete seal" in caplog.text
    with atomic_directory(tmp_path / "index", finish=sealing(tmp_path / "index")) as staging:
        (staging / "a.npy").write_bytes(b"0" * 10)
    index = tmp_path / "index"
    (index / "later.npy").write_bytes(b"1")  # added after: the seal says nothing of it until resealed
    assert intact(index, "index")
    reseal(index)
    (index / "later.npy").unlink()
    assert not intact(index, "index") and not index.exists()
    assert "1 of its files missing or of another size, e.g. later.npy" in caplog.text
