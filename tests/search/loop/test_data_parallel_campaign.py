"""A campaign mixing k=1 and k=2 data-parallel trials on a real 2-process LocalCluster."""

from __future__ import annotations

import tomllib
from pathlib import Path

import optuna
import pytest

from search.session.runner import RunOptions, run_campaign
from search.spec.campaign_spec import SpecError, parse_spec
from tests.campaign_storage import load
from tests.search.toy_specs import digits_toml

pytestmark = pytest.mark.slow

SPEC = digits_toml(
    "dp",
    4,
    2,
    seed=4,
    max_retries=None,
    space={"data_parallel": {"type": "categorical", "choices": [1, 2]}},
    cluster={"n_workers": 2},
)


@pytest.mark.timeout(400)
def test_mixed_widths_never_oversubscribe_the_declared_slots(tmp_path: Path) -> None:
    spec = parse_spec(tomllib.loads(SPEC), "dp.toml", SPEC)
    folder = run_campaign(spec, RunOptions(runs_dir=tmp_path, progress=False))
    trials = load(folder.root, "dp").get_trials()
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials), [
        t.user_attrs.get("fail_reason") for t in trials
    ]
    widths = {t.user_attrs["width"] for t in trials}
    assert widths == {1, 2}, "the seed should draw both widths"
    assert all(t.user_attrs["config"]["data_parallel"] == t.user_attrs["width"] for t in trials)
    for worker in {t.user_attrs["worker"] for t in trials}:
        spans = [
            (t.user_attrs["started"], t.user_attrs["finished"], t.user_attrs["width"])
            for t in trials
            if t.user_attrs["worker"] == worker
        ]
        for start, _end, _w in spans:
            in_use = sum(w for s, e, w in spans if s <= start < e)
            assert in_use <= 2, f"worker {worker} ran {in_use} slots at once; it declares 2"


def test_a_trial_wider_than_all_workers_together_is_refused_before_anything_is_created(tmp_path: Path) -> None:
    text = SPEC.replace("choices = [1, 2]", "choices = [1, 8]")  # 4 would span both workers (test_wide_trials)
    spec = parse_spec(tomllib.loads(text), "dp.toml", text)
    with pytest.raises(
        SpecError,
        match=r"space.data_parallel: a trial may take 8 CPU slots, but the embedded "
        r"cluster's 2 worker\(s\) have 4 in all \(2 each\)",
    ):
        run_campaign(spec, RunOptions(runs_dir=tmp_path, progress=False))
    assert not (tmp_path / "dp").exists()


def test_batch_not_divisible_by_the_width_is_a_spec_error() -> None:
    text = SPEC.replace("batch_size = 32", "batch_size = 31")
    with pytest.raises(SpecError, match="space.batch_size: global batch 31 is not divisible by data_parallel = 2"):
        parse_spec(tomllib.loads(text), "dp.toml")
