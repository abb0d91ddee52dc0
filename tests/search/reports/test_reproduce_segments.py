"""``hypersweep reproduce`` of a trial resized from 1 to 2 slots at a rung (CPU twin, gloo): each segment is
replayed at its width and parameters, from the checkpoint the one before left, and MATCHes its record exactly."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from search.loop.hooks import CampaignHooks
from search.loop.segments import Segment, segment_configs
from search.reports.reproduce import comparison_text, reproduce_trial
from search.session.runner import RunOptions, run_campaign
from search.spec.campaign_spec import parse_spec
from search.vocab.terms import Transition
from tests.search.loop.test_segments import ResizeAtRung
from tests.search.toy_specs import digits_toml
from trainers.api import TrialConfig

SPEC = digits_toml("resize-repro", epochs=2, deterministic=True, space={"schedule": "warmup_cosine", "warmup": 0.2})


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_reproduce_replays_a_resized_trials_segments_at_their_widths_and_matches(tmp_path: Path) -> None:
    spec = parse_spec(tomllib.loads(SPEC), "resize-repro.toml", SPEC)
    hooks = CampaignHooks(policies=[ResizeAtRung(rung=1, width=2)])
    folder = run_campaign(spec, RunOptions(runs_dir=tmp_path, progress=False, hooks=hooks))
    result = reproduce_trial(folder.root, 0)
    text = comparison_text(result)
    assert result.exact and result.matched, text
    assert "replayed its 2 segments: widths 1, 2" in text
    assert {c.where for c in result.checks} == {"final", "step 1", "step 2"}  # every report compared


def test_each_segments_config_is_rebuilt_from_the_last_one() -> None:
    last = TrialConfig(
        "s", 0, {"lr": 0.02, "batch_size": 64}, seed=1, epochs=3, data_parallel=2, schedule_epochs=3,
        base_params={"lr": 0.01, "batch_size": 32},
    )  # fmt: skip
    segments = [
        Segment(0, Transition.START, 1, 0, 1, 0),
        Segment(1, Transition.RESIZE, 2, 1, 2, 100, {"batch_size": 64, "lr": 0.02}),
        Segment(2, Transition.RESIZE, 4, 2, 3, 200, {"batch_size": 128}),
    ]
    first, second, third = segment_configs(last, segments)
    assert (first.params, first.base_params, first.data_parallel, first.epochs) == (last.base_params, {}, 1, 1)
    assert first.schedule_epochs == 3 and first.own_params == second.own_params == third.own_params
    assert (second.params, second.data_parallel, second.epochs) == ({"lr": 0.02, "batch_size": 64}, 2, 2)
    assert (third.params, third.data_parallel, third.epochs) == ({"lr": 0.02, "batch_size": 128}, 4, 3)
