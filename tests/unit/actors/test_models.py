"""actors.models: the packaged SmolLM2's conversion publishes its folder once, whoever finishes first."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.models import publish_folder


def _folder(path: Path, text: str) -> Path:
    path.mkdir()
    (path / "config.json").write_text(text)
    return path


def test_publish_renames_the_finished_folder(tmp_path: Path):
    dest = publish_folder(_folder(tmp_path / "m.tmp1", "mine"), tmp_path / "m")
    assert (dest / "config.json").read_text() == "mine" and not (tmp_path / "m.tmp1").exists()


def test_publish_keeps_the_folder_another_process_published(tmp_path: Path):
    """Two runs started together on a fresh machine both convert; the second's rename meets a non-empty folder."""
    _folder(tmp_path / "m", "theirs")
    dest = publish_folder(_folder(tmp_path / "m.tmp2", "mine"), tmp_path / "m")
    assert (dest / "config.json").read_text() == "theirs" and not (tmp_path / "m.tmp2").exists()


def test_publish_still_fails_when_nothing_was_published(tmp_path: Path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "junk").write_text("")  # a folder in the way that is no model
    with pytest.raises(OSError):
        publish_folder(_folder(tmp_path / "m.tmp3", "mine"), tmp_path / "m")
