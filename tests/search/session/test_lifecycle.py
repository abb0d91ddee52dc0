"""Campaign lifecycle: enqueued configurations, a new trial budget on resume, warm starts, a changed spec.

Real campaigns (``search.run`` / ``search.resume`` on an embedded LocalCluster of one worker, journal
storage, the toy trainer) and the real command line for the exit codes and one-line errors.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import optuna
import pytest
from optuna.trial import TrialState
from toy_specs import toy_spec

import search
from search.api import _quiet, to_toml
from search.loop.ledger import Ledger
from search.reports.data import load_campaign
from search.reports.status import status_text
from search.session.lifecycle import ENQUEUED, spec_to_resume
from search.session.runner import CampaignExistsError, RunOptions
from search.session.warm_start import WARM_START, WarmStartError, is_warm_start, source_trials
from search.spec.campaign_spec import parse_spec
from search.spec.changes import SPEC_CHANGES, SpecChangedError, spec_changes, with_n_trials
from search.spec.table import SpecError
from search.store.folder import CampaignFolder

HERE = Path(__file__).resolve().parents[1]  # tests/search: the shared trainers
ROOT = HERE.parents[1]
BIN = Path(sys.executable).parent


def toy(name: str, n_trials: int = 3, high: float = 1.0, **top: Any) -> dict[str, Any]:
    space = {
        "quality": {"type": "float", "low": 0.0, "high": high},
        "tag": {"type": "categorical", "choices": ["a", "b"]},
    }
    return toy_spec(name, n_trials, epochs=1, seed=5, space=space, top=top)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [str(BIN / "hypersweep"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )


def write_spec(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(to_toml(data))
    return path


@pytest.fixture(scope="module")
def enqueued(tmp_path_factory: pytest.TempPathFactory) -> search.Result:
    """A finished campaign of 3 trials: one configuration from ``[[enqueue]]``, one from ``enqueue=``."""
    runs = tmp_path_factory.mktemp("runs")
    spec = toy("enq", enqueue=[{"quality": 0.25, "tag": "b"}])
    return search.run(spec, runs_dir=runs, progress=False, enqueue={"quality": 0.75})


# --- enqueue -------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(240)  # a hang guard
def test_enqueued_configurations_run_first_within_the_budget(enqueued: search.Result) -> None:
    trials = enqueued.study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3  # the budget: 2 enqueued + 1 sampled
    assert trials[0].params == {"quality": 0.25, "tag": "b"} and trials[0].user_attrs[ENQUEUED] == "spec [[enqueue]]"
    assert trials[1].params["quality"] == 0.75 and trials[1].user_attrs[ENQUEUED] == "search.run(enqueue=...)"
    assert trials[1].params["tag"] in ("a", "b")  # left out: sampled
    assert ENQUEUED not in trials[2].user_attrs
    assert enqueued.trials["params.quality"].tolist()[:2] == [0.25, 0.75]


@pytest.mark.slow
@pytest.mark.timeout(240)  # a hang guard
def test_resume_with_n_trials_extends_the_budget_keeps_it_and_enqueues_nothing_again(enqueued: search.Result) -> None:
    with pytest.raises(ValueError, match=r"--n-trials 2: must be >= 3, the trials this campaign has already finished"):
        search.resume(enqueued.folder, n_trials=2, progress=False)
    result = search.resume(enqueued.folder, n_trials=5, progress=False)
    trials = result.study.get_trials()
    assert len(trials) == 5 and all(t.state == TrialState.COMPLETE for t in trials)
    assert sum(ENQUEUED in t.user_attrs for t in trials) == 2  # not enqueued again
    spec_text = (enqueued.folder / "spec.toml").read_text()
    assert tomllib.loads(spec_text)["study"]["n_trials"] == 5 and result.spec.study.n_trials == 5
    spec, changes = spec_to_resume(CampaignFolder(enqueued.folder), RunOptions())  # a later plain resume
    assert spec.study.n_trials == 5 and changes == []
    history = result.study.user_attrs[SPEC_CHANGES]
    assert history[-1]["changes"] == ["study.n_trials: 3 -> 5"]


def test_enqueued_values_are_checked_against_the_space(tmp_path: Path) -> None:
    def parse(entries: Any) -> Any:
        return parse_spec(toy("bad", enqueue=entries), "bad.toml", check_trainer=False)

    unknown = r"^bad.toml: enqueue\[0\].qualty: not a searched parameter \(did you mean 'quality'\?\)$"
    with pytest.raises(SpecError, match=unknown):
        parse([{"qualty": 0.5}])
    with pytest.raises(SpecError, match=r"^bad.toml: enqueue\[1\].quality: 1.5 is outside \[0.0, 1.0\]$"):
        parse([{"quality": 0.5}, {"quality": 1.5}])
    with pytest.raises(SpecError, match=r"^bad.toml: enqueue\[0\].tag: 'c' is not one of \['a', 'b'\]$"):
        parse({"tag": "c"})
    with pytest.raises(SpecError, match=r"4 configurations do not fit in the budget of 3 trials"):
        parse([{"tag": "a"}] * 4)
    assert parse([{"quality": 1, "tag": "a"}]).enqueue == ({"quality": 1, "tag": "a"},)


@pytest.mark.slow
@pytest.mark.timeout(240)  # a hang guard
def test_run_enqueue_file_errors_are_one_line_exit_2(tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "toy.toml", toy("cli"))
    (tmp_path / "params.json").write_text(json.dumps([{"quality": 0.5}, {"quality": -1}]))
    proc = cli("run", str(spec), "--enqueue", "params.json", "--runs-dir", "runs", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == "hypersweep: params.json: enqueue[1].quality: -1 is outside [0.0, 1.0]"
    assert not (tmp_path / "runs" / "cli").exists()


def test_deterministic_campaign_with_more_enqueued_trials_than_its_lag_may_ask() -> None:
    data = toy("det", n_trials=8)
    data["study"].update(deterministic=True, parallelism=2)
    spec = parse_spec(data, "det.toml", check_trainer=False)
    study = optuna.create_study(direction="maximize")
    for q in (0.1, 0.2, 0.3, 0.4, 0.5):
        study.enqueue_trial({"quality": q})
    ledger = Ledger(spec, study, CampaignFolder(Path("/nonexistent")))
    ledger.load(study.get_trials())
    assert ledger.next_number == 0 and ledger.may_ask()  # the waiting trials are the next asks


# --- warm start ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(240)  # a hang guard
def test_warm_start_from_a_campaign_feeds_the_sampler_and_counts_nothing(
    enqueued: search.Result, tmp_path: Path
) -> None:
    source = str(enqueued.folder)
    narrow = toy("warm", n_trials=2, high=0.5)  # trials with quality above 0.5 do not fit
    fitting = [t for t in enqueued.study.get_trials() if t.params["quality"] <= 0.5]
    result = search.run(narrow, runs_dir=tmp_path, progress=False, warm_start=source)
    trials = result.study.get_trials()
    copies = [t for t in trials if is_warm_start(t)]
    assert len(copies) == len(fitting) and all(t.user_attrs[WARM_START] == source for t in copies)
    assert sorted(t.params["quality"] for t in copies) == sorted(t.params["quality"] for t in fitting)
    used = result.study.user_attrs[WARM_START]
    assert used["used"] == len(fitting) and used["skipped"] == len(enqueued.study.get_trials()) - len(fitting)
    own = [t for t in trials if not is_warm_start(t)]
    assert len(own) == 2 and all(t.state == TrialState.COMPLETE for t in own)  # the budget: this campaign's own
    assert not {t.params["quality"] for t in own} & {t.params["quality"] for t in copies}  # nothing run again
    assert len(result.trials) == 2 and set(result.trials["number"]) == {t.number for t in own}
    assert result.best_value == max(t.value for t in own)
    status = status_text(result.folder)
    assert "2 of 2 trials" in status and "2 complete" in status and f"{used['used']} trial(s) from {source}" in status
    assert "trials: 2 COMPLETE, 0 PRUNED, 0 FAIL" in result.summary()
    assert {t.number for t in load_campaign(result.folder).trials} == {t.number for t in own}  # what reports show
    # TPE would now sample from them: the study's finished trials, as the sampler reads them.
    assert len(result.study.get_trials(states=(TrialState.COMPLETE,))) == 2 + len(fitting)


@pytest.mark.slow
def test_warm_start_from_an_optuna_study_takes_complete_and_reported_pruned_trials(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'old.db'}"
    old = optuna.create_study(study_name="old", storage=url, direction="maximize")
    dists = {
        "quality": optuna.distributions.FloatDistribution(0.0, 1.0),
        "tag": optuna.distributions.CategoricalDistribution(["a", "b"]),
    }
    make = optuna.trial.create_trial
    old.add_trials(
        [
            make(value=0.3, params={"quality": 0.3, "tag": "a"}, distributions=dists),
            make(
                state=TrialState.PRUNED,
                params={"quality": 0.2, "tag": "b"},
                distributions=dists,
                intermediate_values={1: 0.1},
            ),
            make(state=TrialState.PRUNED, params={"quality": 0.4, "tag": "b"}, distributions=dists),  # nothing reported
            make(state=TrialState.FAIL, params={"quality": 0.5, "tag": "b"}, distributions=dists),
            make(value=0.9, params={"quality": 0.9, "tag": "a"}, distributions=dists),  # outside [0, 0.5]
        ]
    )
    spec = parse_spec(toy("new", high=0.5), "new.toml", check_trainer=False)
    objective = (spec.objective_directions, spec.objective_metrics)
    found = source_trials(f"{url}#old", *objective)
    assert [t.params["quality"] for t in found] == [0.3, 0.2, 0.9]
    assert [t.params["quality"] for t in source_trials(url, *objective)] == [0.3, 0.2, 0.9]  # the storage's only study
    from search.session.warm_start import warm_start

    study = optuna.create_study(direction="maximize")
    done = warm_start(study, f"{url}#old", found, spec.space, bool(spec.study.constraints))
    assert (done.used, done.skipped) == (2, 1)
    assert "2 finished trial(s) used, 1 skipped" in done.line()
    assert [t.state for t in study.get_trials()] == [TrialState.COMPLETE, TrialState.PRUNED]
    assert study.get_trials()[1].intermediate_values == {1: 0.1}
    with pytest.raises(WarmStartError, match=r"the storage holds no study 'nope' \(it holds: old\)"):
        source_trials(f"{url}#nope", *objective)
    with pytest.raises(WarmStartError, match=r"its study optimises \['minimize'\], this one \['maximize'\]"):
        optuna.create_study(study_name="down", storage=url, direction="minimize")
        source_trials(f"{url}#down", *objective)
    with pytest.raises(WarmStartError, match=r"not a campaign folder \(no spec.toml\)"):
        source_trials(str(tmp_path / "nowhere"), *objective)


@pytest.mark.slow
@pytest.mark.timeout(240)  # a hang guard
def test_a_study_name_clash_is_one_line_exit_2_not_a_traceback(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    optuna.create_study(study_name="clash", storage=url)
    spec = write_spec(tmp_path / "clash.toml", toy("clash") | {"study": {**toy("clash")["study"], "storage": url}})
    proc = cli("run", str(spec), "--runs-dir", "runs", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1 and "already holds a study named 'clash'" in proc.stderr
    assert f"--warm-start '{url}#clash'" in proc.stderr
    assert not (tmp_path / "runs" / "clash").exists()
    with pytest.raises(CampaignExistsError):
        search.run(tmp_path / "clash.toml", runs_dir=tmp_path / "runs", progress=False)


# --- a changed spec --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(300)  # a hang guard
def test_a_changed_spec_is_listed_and_refused_unless_allowed(tmp_path: Path) -> None:
    first = search.run(toy("changed", n_trials=1), runs_dir=tmp_path, progress=False)
    frozen = first.folder / "spec.toml"
    data = tomllib.loads(frozen.read_text())
    data["space"]["quality"]["high"] = 0.5
    data["trainer"]["epochs"] = 2
    frozen.write_text(to_toml(data))
    proc = cli("resume", str(first.folder), "--n-trials", "2", "--no-progress", cwd=tmp_path)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert "the spec differs from the one the campaign started with" in lines[0]
    assert lines[1:3] == ["  trainer.epochs: 1 -> 2", "  space.quality.high: 1.0 -> 0.5"]  # not n_trials: allowed
    assert "--allow-changes" in lines[-1]
    result = search.resume(first.folder, n_trials=2, allow_changes=True, progress=False)
    assert [t.state for t in result.study.get_trials()] == [TrialState.COMPLETE] * 2
    assert result.study.get_trials()[1].params["quality"] <= 0.5  # run under the new spec
    assert result.study.user_attrs[SPEC_CHANGES][-1]["changes"] == [
        "study.n_trials: 1 -> 2",
        "trainer.epochs: 1 -> 2",
        "space.quality.high: 1.0 -> 0.5",
    ]
    assert spec_to_resume(CampaignFolder(first.folder), RunOptions())[1] == []  # recorded: a plain resume is fine
    data["study"]["name"] = "other"
    (tmp_path / "renamed.toml").write_text(to_toml(data))
    with pytest.raises(SpecChangedError, match=r"cannot change study.name: \"changed\" -> \"other\""):
        search.resume(first.folder, spec=tmp_path / "renamed.toml", allow_changes=True, progress=False)


@pytest.mark.slow
@pytest.mark.timeout(300)  # a hang guard
def test_resume_enqueues_the_entries_a_changed_spec_adds_within_the_budget(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = search.run(toy("grow", n_trials=2, enqueue=[{"quality": 0.25}]), runs_dir=tmp_path, progress=False)
    frozen = first.folder / "spec.toml"
    data = tomllib.loads(frozen.read_text())
    data["enqueue"] = [{"quality": 0.25}, {"quality": 0.5, "tag": "b"}]  # the first one ran already
    frozen.write_text(to_toml(data))
    with pytest.raises(
        SpecError,
        match=r"enqueue: 1 new configuration\(s\) do not fit in the 0 trial\(s\) left "
        r"of the budget of 2; raise it with --n-trials$",
    ):
        search.resume(first.folder, allow_changes=True, progress=False)
    capsys.readouterr()
    result = search.resume(first.folder, n_trials=3, allow_changes=True, progress=False)
    assert "enqueued 1 configuration(s) new in [[enqueue]]: they run next" in capsys.readouterr().out
    trials = result.study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 3
    assert trials[2].params == {"quality": 0.5, "tag": "b"} and ENQUEUED in trials[2].user_attrs
    assert sum(t.params["quality"] == 0.25 for t in trials) == 1  # not enqueued again
    result = search.resume(first.folder, n_trials=4, progress=False)  # recorded: nothing enqueued again
    assert [ENQUEUED in t.user_attrs for t in result.study.get_trials()] == [True, False, True, False]


def test_spec_changes_and_n_trials_edit_keep_the_rest_of_the_file() -> None:
    text = '# my campaign\n[study]\nname = "x"  # the name\nn_trials = 20  # budget\n\n[space]\nlr = 0.1\n'
    edited = with_n_trials(text, 40)
    assert edited == '# my campaign\n[study]\nname = "x"  # the name\nn_trials = 40  # budget\n\n[space]\nlr = 0.1\n'
    assert tomllib.loads(with_n_trials('[study]\nname = "x"\n[space]\nlr = 0.1\n', 7))["study"]["n_trials"] == 7
    assert spec_changes(tomllib.loads(text), tomllib.loads(edited)) == ["study.n_trials: 20 -> 40"]
    assert spec_changes({"a": {"b": 1}}, {"a": {"c": "x"}}) == ["a.b: 1 -> (unset)", 'a.c: (unset) -> "x"']


def test_quiet_sets_optuna_to_warning_for_the_call_only() -> None:
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.INFO)
    try:
        with _quiet(dask=False):
            assert optuna.logging.get_verbosity() == optuna.logging.WARNING
        assert optuna.logging.get_verbosity() == optuna.logging.INFO
    finally:
        optuna.logging.set_verbosity(level)
