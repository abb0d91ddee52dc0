"""The progress line counts trials running on a worker apart from trials queued for a slot (issue 48, point 6)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from toy_specs import toy_toml

from cluster.simulated import SimulatedExecutor, TrialPlan
from search.loop.campaign import Campaign, Snapshot
from search.loop.progress import render
from search.session.runner import load_study
from search.spec.campaign_spec import parse_spec
from search.store.folder import CampaignFolder


class _TwoSeconds:
    """A simulated trial: two epochs of one virtual second."""

    def plan(self, config, rng):  # type: ignore[no-untyped-def]
        return TrialPlan((1.0, 1.0), ({"score": 0.5, "epoch": 1.0}, {"score": 0.5, "epoch": 2.0}))


def test_trials_queued_ahead_of_two_workers_are_not_counted_as_running(tmp_path: Path) -> None:
    text = toy_toml(
        "counts",
        8,
        1,
        seed=5,
        space={"quality": {"type": "categorical", "choices": [0.25, 0.5]}},
        cluster={"n_workers": None},
        dispatch_ahead=2,
        batch_trials=1,
    )
    spec = parse_spec(tomllib.loads(text), "counts.toml", text)
    folder = CampaignFolder(tmp_path / "counts")
    folder.create(text)
    study = load_study(spec, folder, create=True)
    executor = SimulatedExecutor(2, _TwoSeconds(), controller_time_scale=0)
    seen: list[Snapshot] = []
    Campaign(spec, folder, study, executor, clock=executor.clock, on_progress=seen.append).run()
    assert max(s.running for s in seen) == 2  # two workers: never more than two trials run at once
    assert max(s.queued for s in seen) >= 1  # the queue ahead of them is counted apart
    line = render(next(s for s in seen if s.queued))
    assert "2 running, " in line and " queued" in line, line
