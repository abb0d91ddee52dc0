"""A scaling sweep none of whose trials reaches its target: status, the summary and every report section say so."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import search

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.slow
def test_a_sweep_that_never_reaches_its_target_reports_without_a_broken_section(tmp_path: Path) -> None:
    spec = tomllib.loads((ROOT / "examples" / "digits-scaling.toml").read_text())
    spec["study"]["name"] = "unreached"
    spec["scaling"].update(batch_sizes=[64, 128, 256], target=0.9999, trials_per_batch=1)
    spec["trainer"]["epochs"] = 1
    result = search.run(spec, runs_dir=tmp_path, n_workers=1, progress=False)
    assert "0 of 3 complete trial(s) reached val_accuracy >= 0.9999" in result.summary()
    text = (Path(result.report()).parent / "report.md").read_text()
    assert "could not be drawn" not in text
    history = text.split("## Optimization history and best so far", 1)[1].split("\n## ", 1)[0]
    assert "best none yet; not drawn: 3 that never reached the target" in history
