"""``[scaling.branching]``: the table's checks, and the study run by ``hypersweep scaling`` as trials of a campaign
(recorded, resumable), on the built-in digits trainer with real Dask workers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from search.reports.report import SECTION_IDS
from search.session.runner import RunOptions, resume_campaign, run_campaign
from search.spec.campaign_spec import SpecError, load_spec, parse_spec
from search.store.folder import CampaignFolder
from search.store.records import Attr
from search.store.storage import open_storage, storage_url

SWEEP = """
[study]
name = "tiny-branching"
direction = "maximize"
metric = "val_accuracy"
seed = 3

[scaling]
batch_sizes = [32, 64, 128]
target = 0.5
trials_per_batch = 1

[trainer]
entry = "trainers.classifier:fit"
dataset = "digits"
epochs = 2
options = { noise_scale_every = 8 }

[space]
model = "mlp"
hidden = 16
optimizer = "sgd"
momentum = 0.9
schedule = "constant"
lr = { type = "float", low = 0.01, high = 0.1, log = true }
"""

BRANCHING = """
[scaling.branching]
points = [1]
batch_sizes = [32, 128]
lr = 0.05
lr_factors = [1.0, 2.0]
epsilon = 0.05
"""


def _parse(text: str) -> Any:
    import tomllib

    return parse_spec(tomllib.loads(text), "s.toml", text, check_trainer=False)


def test_the_table_takes_the_sweep_s_batch_sizes_and_the_trainer_s_epochs() -> None:
    branching = _parse(SWEEP + BRANCHING.replace("batch_sizes = [32, 128]\n", "")).scaling.branching
    assert branching.batch_sizes == (32, 64, 128) and branching.reference_batch == 32 and branching.epochs == 2
    assert branching.points == (1,) and branching.lr == 0.05 and branching.lr_factors == (1.0, 2.0)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (("points = [1]", "points = [1, 1]"), "scaling.branching.points: points=(1, 1): must be strictly increasing"),
        (("points = [1]", "points = [2]"), "scaling.branching.epochs: epochs=2: must be an int > the last point 2"),
        (("points = [1]\n", ""), "scaling.branching.points: is required"),
        (("lr = 0.05", "lr = -1"), "scaling.branching.lr: lr=-1: must be a finite number > 0"),
        (("lr = 0.05\n", ""), "scaling.branching.lr: is required"),
        (("[32, 128]", "[32, 32]"), "scaling.branching.batch_sizes: batch_sizes=(32, 32): must be distinct ints >= 1"),
        (("[1.0, 2.0]", "[1.0, 0]"), "scaling.branching.lr_factors: lr_factors=(1.0, 0): must be a non-empty list"),
        (("[1.0, 2.0]", "2.0"), "scaling.branching.lr_factors: must be a list, got float 2.0"),
        (("epsilon = 0.05", "epsilon = 1"), "scaling.branching.epsilon: epsilon=1: must be in [0, 1)"),
        (("epsilon = 0.05", "branch_epochs = 0"), "scaling.branching.branch_epochs: branch_epochs=0: must be an int"),
        (("epsilon = 0.05", 'lr_rule = "cube"'), "scaling.branching.lr_rule: 'cube' is not one of none, linear, sqrt"),
        (("epsilon = 0.05", "widen = -1"), "scaling.branching.widen: widen=-1: must be an int >= 0"),
        (("epsilon = 0.05", "reference_batch = 128"), "reference_batch=128: must be the smallest of batch_sizes"),
        (("epsilon = 0.05", "epsilons = 0.05"), "scaling.branching.epsilons: unknown key (did you mean 'epsilon'?)"),
    ],
)
def test_each_key_is_checked_with_the_value_and_the_rule(change: tuple[str, str], message: str) -> None:
    with pytest.raises(SpecError) as caught:
        _parse(SWEEP + BRANCHING.replace(*change))
    assert message in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (('schedule = "constant"', 'schedule = "cosine"'), 'need [space] schedule = "constant"'),
        (('schedule = "constant"', 'hidden2 = { type = "int", low = 8, high = 16 }'), "hidden2 searched"),
        (('schedule = "constant"', "warmup = 0.1"), "need no warmup"),
    ],
)
def test_the_reference_run_needs_a_fixed_space_at_a_constant_rate(change: tuple[str, str], message: str) -> None:
    with pytest.raises(SpecError, match="scaling.branching") as caught:
        _parse(SWEEP.replace(*change) + BRANCHING)
    assert message in str(caught.value)


def _trials(folder: CampaignFolder) -> list[Any]:
    import optuna

    sub = CampaignFolder(folder.branching)
    storage = open_storage(storage_url("", sub), writer=False, create=False)
    return optuna.load_study(study_name="tiny-branching-branching", storage=storage).get_trials()


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_hypersweep_scaling_runs_the_branching_study_as_trials_and_reports_it(tmp_path: Path) -> None:
    path = tmp_path / "s.toml"
    path.write_text(SWEEP + BRANCHING)
    spec = load_spec(path)
    options = RunOptions(runs_dir=tmp_path / "runs", progress=False, n_workers=2)
    folder = run_campaign(spec, options)
    out = folder.branching
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["critical"]) == {"1"} and summary["critical"]["1"] in (32, 128)
    assert summary["b_simple"]["1"] > 0  # the reference measured its noise scale
    assert (out / "critical.png").read_bytes()[:4] == b"\x89PNG"
    trials = _trials(folder)
    # the reference in 2 segments, 2 x 2 branches; where the batch grows the scheduled run (2 segments) and the
    # last batch from the start (else both are the reference)
    assert len(trials) == (6 if len(summary["schedule"]) == 1 else 9)
    assert all(t.state.name == "COMPLETE" for t in trials)
    configs = [t.user_attrs[Attr.CONFIG] for t in trials]
    assert [c["epochs"] for c in configs[:2]] == [1, 2] and {c["epochs"] for c in configs[2:6]} == {2}
    assert all(Path(c["checkpoint_dir"]).is_relative_to(out) for c in configs)
    assert all(c["log_dir"] == str(CampaignFolder(out).trial(t.number)) for c, t in zip(configs, trials))
    branches = {(c["params"]["batch_size"], c["params"]["lr"]) for c in configs[2:6]}
    assert branches == {(32, 0.05), (32, 0.1), (128, 0.2), (128, 0.4)}  # linear rule x factors
    reference = dict(trials[0].user_attrs[Attr.HISTORY][-1][1])
    for t in trials[2:6]:  # each branch starts at the reference's epoch-1 checkpoint: its first report is that one
        assert t.user_attrs[Attr.HISTORY][0][1] == reference
    # the report's section shows the critical batch beside B_simple and the saving in steps
    from search.reports.report import write_report

    page = write_report(folder.root).index.read_text()
    section = page.split('<section id="branching">')[1].split("</section>")[0]
    assert "B_<wbr>simple there" in section and ("at equal examples" in section or "No saving" in section)
    assert "branching" in SECTION_IDS
    # resumed with its results gone: every run is found by its key, none runs again, the same results follow
    (out / "summary.json").unlink()
    before = [t.number for t in trials]
    resume_campaign(folder.root, options)
    assert [t.number for t in _trials(folder)] == before
    assert json.loads((out / "summary.json").read_text()) == summary


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_branching_study_stopped_between_rounds_carries_on_without_running_a_run_twice(tmp_path: Path) -> None:
    from cluster import ClusterOptions, DaskExecutor, open_cluster
    from search.loop.progress import Progress
    from search.session.branching import BRANCH_KEY, run_branching_study
    from search.session.runner import load_study

    path = tmp_path / "s.toml"
    path.write_text(SWEEP + BRANCHING)
    spec = load_spec(path)
    folder = CampaignFolder(tmp_path / "c")
    folder.create(spec.text)
    rounds: list[str] = []

    def load(s: Any, f: CampaignFolder, create: bool) -> Any:
        return load_study(s, f, create, writer=True)

    with open_cluster(ClusterOptions(n_workers=2)) as client:

        def stops_at_the_branches(name: str) -> DaskExecutor:
            rounds.append(name)
            if len(rounds) == 3:  # the reference's two segments ran; the controller dies before the branches
                raise KeyboardInterrupt
            return DaskExecutor(client, name)

        with pytest.raises(KeyboardInterrupt):
            run_branching_study(spec, folder, load, stops_at_the_branches, Progress(enabled=False))
        first = [(t.number, t.user_attrs[BRANCH_KEY], t.state.name) for t in _trials(folder)]
        assert [s for *_, s in first[:2]] == ["COMPLETE", "COMPLETE"]  # the branches enqueued at most
        assert not (folder.branching / "summary.json").exists()
        kept = (folder.branching / "points" / "1" / "checkpoint.pt").read_bytes()
        result = run_branching_study(
            spec, folder, load, lambda name: DaskExecutor(client, name), Progress(enabled=False)
        )
    trials = _trials(folder)
    assert [(t.number, t.user_attrs[BRANCH_KEY]) for t in trials[:2]] == [(n, k) for n, k, _ in first[:2]]
    assert len(trials) == (6 if len(result.schedule) == 1 else 9)  # the reference's segments did not run again
    assert len({t.user_attrs[BRANCH_KEY] for t in trials}) == len(trials)  # no run twice
    assert all(t.state.name == "COMPLETE" for t in trials)
    assert (folder.branching / "points" / "1" / "checkpoint.pt").read_bytes() == kept
    assert json.loads((folder.branching / "summary.json").read_text())["critical"] == {"1": result.critical[1]}


def test_the_saving_in_steps_is_read_at_equal_examples() -> None:
    from search.reports.branching_section import step_saving

    run = {"final_examples": 17256, "final_val_loss": 0.07}
    summary = {"fixed": {**run, "final_steps": 2160}, "scheduled": {**run, "final_steps": 411}}
    assert step_saving(summary).startswith(
        "The schedule saves 81% of the steps at equal examples: 411 steps against 2,160"
    )
    same = {"fixed": {**run, "final_steps": 90}, "scheduled": {**run, "final_steps": 90}}
    assert step_saving(same).startswith("No saving: the scheduled run took 90 steps, the fixed run 90")
    assert "no saving can be read" in step_saving({"fixed": {}, "scheduled": {}})


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_branch_whose_worker_is_lost_is_retried_from_the_point_s_checkpoint(tmp_path: Path) -> None:
    from cluster import ClusterOptions, DaskExecutor, open_cluster
    from search.loop.progress import Progress
    from search.session.branching import run_branching_study
    from search.session.runner import load_study

    marker = tmp_path / "died"
    text = (SWEEP + BRANCHING).replace('"trainers.classifier:fit"', '"branch_trainers:fit"')
    text = text.replace("noise_scale_every = 8 }", f'noise_scale_every = 8, die_once = "{marker}" }}')
    path = tmp_path / "s.toml"
    path.write_text(text)
    spec = load_spec(path)
    folder = CampaignFolder(tmp_path / "c")
    folder.create(spec.text)
    with open_cluster(ClusterOptions(n_workers=2)) as client:
        run_branching_study(
            spec,
            folder,
            lambda s, f, create: load_study(s, f, create, writer=True),
            lambda name: DaskExecutor(client, name),
            Progress(enabled=False),
        )
    died = int(marker.read_text())  # the branch whose worker was lost
    trials = _trials(folder)
    assert all(t.state.name == "COMPLETE" for t in trials)
    # it dies as it starts: a retry, or a free re-send where its start had not reached the controller (a race)
    retried = [t.number for t in trials if t.user_attrs.get(Attr.RETRIES)]
    assert retried in ([], [died]) and trials[died].user_attrs.get(Attr.RETRIES, 1) == 1
    # it ran again from the point's checkpoint: its first report is the reference's at epoch 1
    assert trials[died].user_attrs[Attr.HISTORY][0][1] == dict(trials[0].user_attrs[Attr.HISTORY][-1][1])
    assert json.loads((folder.branching / "summary.json").read_text())["critical"]["1"] in (32, 128)


def test_the_study_s_campaign_judges_branches_by_val_loss_and_the_reference_is_the_space_s_constants() -> None:
    from search.session.branching import branching_spec, reference_config

    text = SWEEP.replace('sampler = "tpe"\n', "").replace("seed = 3\n", 'seed = 3\nsampler = "tpe"\n')
    spec = _parse(text + "\n[sampler]\nn_startup_trials = 2\n" + BRANCHING)
    b = branching_spec(spec)
    assert (b.study.name, b.study.metrics, b.study.directions) == (
        "tiny-branching-branching",
        ("val_loss",),
        ("minimize",),
    )
    assert b.study.sampler == "random" and not b.sampler_options and b.study.fail_fast == 0 and b.scaling is None
    assert not b.space.names and b.study.pruner == "none"
    config = reference_config(spec.space.fixed(), spec.study, spec.trainer, spec.scaling.branching)
    assert config.params == {
        "model": "mlp",
        "hidden": 16,
        "optimizer": "sgd",
        "momentum": 0.9,
        "schedule": "constant",
        "batch_size": 32,
        "lr": 0.05,
        "lr_scaling": "none",
    }
    assert (config.seed, config.epochs, config.checkpoint_every, config.options) == (3, 2, 1, {"noise_scale_every": 8})
