"""bench/elastic_campaign.py: the real Campaign on the simulated cluster, ASHA with elastic widths against fixed
widths; its trial model resumes a trial where its checkpoint is, the same curve at any width."""

from __future__ import annotations

import numpy as np
import pytest

from bench import elastic_campaign as bench


def config(number: int, start: int, end: int, width: int) -> dict[str, object]:
    params = {"x1": 0.3, "x2": 0.5, "batch_size": bench.BATCH}
    return {"number": number, "params": params, "resume_epoch": start, "epochs": end, "data_parallel": width}


def test_a_run_resumes_at_its_checkpoint_with_the_same_curve_at_any_width_and_pays_a_restart() -> None:
    model = bench.ElasticCurves(seed=0)
    whole = model.plan(config(7, 0, 6, 1), np.random.default_rng(1))
    first = model.plan(config(7, 0, 2, 1), np.random.default_rng(2))
    wider = model.plan(config(7, 2, 6, 4), np.random.default_rng(3))
    assert [m["epoch"] for m in wider.metrics] == [3.0, 4.0, 5.0, 6.0]
    assert [m["value"] for m in first.metrics + wider.metrics] == [m["value"] for m in whole.metrics]
    assert wider.metrics[0]["examples"] == 3 * bench.EXAMPLES
    assert wider.epoch_seconds[0] > wider.epoch_seconds[1] + bench.RESTART * 0.9  # each run's start costs
    assert sum(wider.epoch_seconds[1:]) < 0.5 * sum(whole.epoch_seconds[3:])  # 4 slots: over 2x faster


@pytest.mark.slow
def test_elastic_widens_trials_into_idle_slots_and_reaches_the_common_best_no_later() -> None:
    row = bench.compare(16, seed=0)
    assert row["elastic"]["resized"] > 0
    assert row["elastic"]["time"] <= min(row["fixed-1"]["time"], row["fixed-8"]["time"])
    assert row["elastic"]["best"] == row["target"]
