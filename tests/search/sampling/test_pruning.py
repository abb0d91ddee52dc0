"""Controller-side pruning with real training on a real LocalCluster."""

from __future__ import annotations

import tomllib
from pathlib import Path

import optuna
import pytest

from cluster import ClusterOptions, DaskExecutor, open_cluster
from search.loop.campaign import Campaign
from search.session.runner import load_study
from search.spec.campaign_spec import SpecError, parse_spec
from search.store.folder import CampaignFolder

pytestmark = pytest.mark.slow

SPEC = """
[study]
name = "prune"
direction = "maximize"
metric = "val_accuracy"
sampler = "random"
seed = 0
n_trials = 4
pruner = "asha"

[pruner]
resource = "examples"
reduction_factor = 3

[trainer]
entry = "trainers.classifier:fit"
dataset = "synthetic"
epochs = 6
options = { n_samples = 30000, n_features = 40 }

[space]
lr = { type = "float", low = 0.0, high = 0.2 }
optimizer = "sgd"
batch_size = 64
hidden = 64
"""


@pytest.mark.timeout(240)
def test_a_trial_with_lr_zero_is_pruned_at_its_first_rung_and_stops_within_one_report(tmp_path: Path) -> None:
    spec = parse_spec(tomllib.loads(SPEC), "prune.toml", SPEC)
    folder = CampaignFolder(tmp_path / "prune")
    folder.create(SPEC)
    study = load_study(spec, folder, create=True)
    for lr in (0.1, 0.12, 0.08, 0.0):  # the bad one comes last, so the rung has values to compare
        study.enqueue_trial({"lr": lr})
    with open_cluster(ClusterOptions(n_workers=2)) as client:
        Campaign(spec, folder, study, DaskExecutor(client, "test-prune")).run()

    trials = {t.params["lr"]: t for t in study.get_trials()}
    bad = trials[0.0]
    assert bad.state == optuna.trial.TrialState.PRUNED, bad.user_attrs
    assert bad.user_attrs["stop_reason"] == "pruned"
    first_rung = min(bad.intermediate_values)
    assert first_rung == 30000 * 0.8  # one epoch of examples: rungs count data, not steps
    # Pruned at its first report; it saw the stop at the next one: at most 2 of 6 epochs ran.
    assert len(bad.user_attrs["history"]) <= 2
    assert bad.user_attrs["stop_latency"] >= 0.0  # recorded: report sent -> trial stopped (its size is a benchmark's)
    good = [t for lr, t in trials.items() if lr > 0]
    # ASHA keeps the best third of each rung: the good trials run on, the best to the end.
    assert any(t.state == optuna.trial.TrialState.COMPLETE and len(t.user_attrs["history"]) == 6 for t in good)
    assert max(len(t.user_attrs["history"]) for t in good) > len(bad.user_attrs["history"])


def test_pruner_settings_that_cannot_work_are_spec_errors() -> None:
    bad_factor = SPEC.replace("reduction_factor = 3", "reduction_factor = 1")
    with pytest.raises(SpecError, match="pruner.reduction_factor: must be >= 2"):
        parse_spec(tomllib.loads(bad_factor), "p.toml")
    bad_resource = SPEC.replace('resource = "examples"', 'resource = "tokens"')
    with pytest.raises(SpecError, match="pruner.resource"):
        parse_spec(tomllib.loads(bad_resource), "p.toml")
