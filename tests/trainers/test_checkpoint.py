from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from trainers import checkpoint
from trainers.checkpoint import load_checkpoint, save_checkpoint


def test_round_trip_and_missing(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "checkpoint.pt"
    assert load_checkpoint(path) is None
    state = {"epoch": 3, "w": torch.arange(4.0), "rng": torch.Generator().manual_seed(1).get_state()}
    save_checkpoint(path, state)
    loaded = load_checkpoint(path)
    assert loaded is not None and loaded["epoch"] == 3 and torch.equal(loaded["w"], state["w"])
    assert [p.name for p in path.parent.iterdir()] == ["checkpoint.pt"]


def _crash(*args: object, **kwargs: object) -> None:
    raise OSError("simulated crash")


@pytest.mark.parametrize("where", ["replace", "fsync"])
def test_crash_during_save_keeps_the_old_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"epoch": 1})
    monkeypatch.setattr(checkpoint.os, where, _crash)
    with pytest.raises(OSError, match="simulated crash"):
        save_checkpoint(path, {"epoch": 2, "w": torch.zeros(1000)})
    monkeypatch.undo()
    assert load_checkpoint(path) == {"epoch": 1}
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]  # no temporary file left behind


def test_crash_mid_write_keeps_the_old_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "checkpoint.pt"
    save_checkpoint(path, {"epoch": 1})

    def half_written(obj: object, f: object) -> None:
        f.write(b"PK\x03\x04 truncated")  # type: ignore[attr-defined]
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint.torch, "save", half_written)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, {"epoch": 2})
    monkeypatch.undo()
    assert load_checkpoint(path) == {"epoch": 1}
    assert sorted(os.listdir(tmp_path)) == ["checkpoint.pt"]
