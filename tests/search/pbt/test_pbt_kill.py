"""A controller SIGKILLed (a real process) mid-segment and right after a rung's decision leaves PBT intact."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.chaos_pbt import MOMENTS, chaos_pbt


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_pbt_survives_a_kill_mid_segment_and_right_after_a_decision(tmp_path: Path) -> None:
    result = chaos_pbt(tmp_path, reps=2, seed=0, members=4, epochs=6, interval=2, timeout=1100, say=lambda _m: None)
    report = "\n".join(result.lines())
    assert [k["moment"] for k in result.kills] == list(MOMENTS), report  # both kills landed, each at its moment
    assert result.final_returncode == 0, report  # resume exit 0
    # plain Optuna: each epoch once in history, metrics.jsonl and intermediate values; lineage and lr as decided
    assert result.ok, report
    assert result.exploits >= 2, report  # one per rung (epochs 2 and 4) at least
