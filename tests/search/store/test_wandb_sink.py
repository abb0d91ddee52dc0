"""``[logging] wandb = true`` in W&B's offline mode: a run per trial in the campaign folder, read back from
W&B's own run files (records in its log-structured ``run-<id>.wandb``, decoded with W&B's protobufs)."""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from toy_specs import toy_spec

import search

pytest.importorskip("wandb")

BLOCK, HEADER = 32768, 7  # W&B's datastore: LevelDB-style log blocks, 7-byte file and record headers
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def _raw_records(path: Path) -> Iterator[bytes]:
    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    pos, pending = HEADER, b""
    while pos + HEADER <= len(data):
        left = BLOCK - pos % BLOCK
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER]) if left >= HEADER else (0, 0, 0)
        if left < HEADER or (length == 0 and kind == 0):  # the rest of the block is padding
            pos += left
            continue
        chunk, pos = data[pos + HEADER : pos + HEADER + length], pos + HEADER + length
        if kind == FULL:
            yield chunk
        elif kind in (FIRST, MIDDLE):
            pending += chunk
        elif kind == LAST:
            yield pending + chunk
            pending = b""


def read_offline_run(path: Path) -> dict[str, Any]:
    """Name, group, config, summary and history (step -> values) of one offline run."""
    from wandb.proto import wandb_internal_pb2 as pb

    run: dict[str, Any] = {"config": {}, "summary": {}, "history": {}}
    for raw in _raw_records(path):
        record = pb.Record()
        record.ParseFromString(raw)
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.update(name=record.run.display_name, group=record.run.run_group, project=record.run.project)
            run["config"].update({i.key: json.loads(i.value_json) for i in record.run.config.update})
        elif kind == "config":
            run["config"].update({i.key: json.loads(i.value_json) for i in record.config.update})
        elif kind == "summary":
            run["summary"].update(
                {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.summary.update}
            )
        elif kind == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in record.history.item}
            run["history"][int(items["_step"])] = {k: v for k, v in items.items() if not k.startswith("_")}
    return run


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_each_trial_is_an_offline_wandb_run_in_the_campaign_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    spec = {**toy_spec("wandb-runs", epochs=3, seed=8), "logging": {"wandb": True, "tensorboard": False}}
    result = search.run(spec, runs_dir=tmp_path, progress=False)
    files = sorted((result.folder / "wandb").glob("offline-run-*/run-*.wandb"))
    runs = {run["name"]: run for run in map(read_offline_run, files)}
    assert sorted(runs) == ["trial-0", "trial-1"]
    for trial in result.study.get_trials(deepcopy=False):
        run = runs[f"trial-{trial.number}"]
        assert run["group"] == "wandb-runs" and run["project"] == "wandb-runs"
        assert run["config"]["quality"] == pytest.approx(trial.params["quality"])
        assert run["summary"]["hypersweep.state"] == "COMPLETE"
        assert run["summary"]["objective"] == pytest.approx(trial.value)
        assert sorted(run["history"]) == [1, 2, 3]
        assert run["history"][3]["score"] == pytest.approx(trial.value)
        marker = result.folder / "trials" / str(trial.number) / "wandb_run_id"
        assert f"run-{marker.read_text().strip()}.wandb" in {f.name for f in files}  # found again after resume
