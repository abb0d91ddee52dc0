"""Every file in examples/ end to end, as a new user runs it on a 2-worker machine.

Each example runs through the CLI's ``main`` (``hypersweep run``, or ``scaling``
for a spec with a ``[scaling]`` section) with 2 workers, then ``status``,
``report`` and ``reproduce`` of one trial; the exit codes are asserted, and the report's
best trial must be the one the study's direction says (the most accurate, the
Pareto front, or in a scaling sweep the fewest steps among the trials that
reached the target). The budgets are cut so that the file runs in CI (the full
examples take minutes each); a cut names the line it replaces, so an example
that changes fails here loudly instead of running in full unnoticed.
"""

from __future__ import annotations

import json
import math
import tomllib
from pathlib import Path

import optuna
import pytest
from optuna.trial import TrialState

from search.cli import main
from search.store.records import Attr, TrialRecord
from tests.campaign_storage import load

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.toml"))
CUTS: dict[str, dict[str, str]] = {  # the CNN-cell examples (evolution, pareto) run 1 epoch: ~1.6 s each here
    "digits.toml": {"n_trials = 16": "n_trials = 4", "epochs = 10": "epochs = 2"},
    "digits-branching.toml": {  # the sweep as digits-scaling's cut; the branching study: one point, 2 x 2 branches
        "batch_sizes = [8, 32, 128]": "batch_sizes = [64, 128, 256]",
        "trials_per_batch = 4": "trials_per_batch = 2",
        "epochs = 12 ": "epochs = 3 ",
        "points = [1, 2, 4, 8]": "points = [1]",
        "batch_sizes = [8, 16, 32, 64, 128, 256]": "batch_sizes = [64, 256]",
        "lr = 0.02 ": "lr = 0.1 ",
        "lr_factors = [0.125, 0.25, 0.5, 1.0, 2.0]": "lr_factors = [1.0, 2.0]",
        "branch_epochs = 2 ": "branch_epochs = 1 ",
    },
    "digits-elastic.toml": {"n_trials = 8": "n_trials = 4"},
    "digits-evolution.toml": {"n_trials = 24": "n_trials = 4", "epochs = 6": "epochs = 1"},
    "digits-pareto.toml": {"n_trials = 16": "n_trials = 4", "epochs = 4": "epochs = 1"},
    "digits-pbt.toml": {"interval = 3 ": "interval = 2 ", "epochs = 12": "epochs = 6"},  # two rungs (2 and 4)
    "digits-scaling.toml": {
        "batch_sizes = [8, 16, 32, 64, 128, 256]": "batch_sizes = [64, 128, 256]",
        "trials_per_batch = 8": "trials_per_batch = 2",
    },
    "mnist1d-scaling.toml": {
        "batch_sizes = [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]": "batch_sizes = [64, 128, 256]",
        "n_samples = 81920": "n_samples = 5000",  # generated in ~5 s instead of ~80 s
        "target = 0.78": "target = 0.5",
        "epochs = 60 ": "epochs = 20 ",
        "lr_grid = 5 ": "lr_grid = 3 ",  # 9 trials, then the widening where a best rate is at an edge
    },
}


def test_every_example_is_covered() -> None:
    assert EXAMPLES and sorted(CUTS) == EXAMPLES


def cut_copy(name: str, folder: Path) -> Path:
    text = (ROOT / "examples" / name).read_text()
    for old, new in CUTS[name].items():
        assert old in text, f"examples/{name} no longer has {old!r}: update CUTS in {Path(__file__).name}"
        text = text.replace(old, new)
    path = folder / name
    path.write_text(text)
    return path


def cli(capsys: pytest.CaptureFixture[str], *args: str | Path) -> tuple[int, str]:
    """``hypersweep ARGS`` in this process (the function the console script calls): exit code and stdout."""
    code = main([str(a) for a in args])
    return code, capsys.readouterr().out


def report_best(report_md: str) -> list[int]:
    """The trial numbers in the report's "Best trials" table, in its order (its "trial" column: a Pareto front has
    no "rank" column before it)."""
    section = report_md.split("## Best trials", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    at = [c.strip() for c in lines[0].split("|")].index("trial")
    return [int(row.split("|")[at]) for row in lines[1:]]


def dominated(a: tuple[float, ...], b: tuple[float, ...], signs: tuple[int, ...]) -> bool:
    """Whether ``b`` dominates ``a`` (``signs``: +1 maximise, -1 minimise)."""
    better_or_equal = all(s * y >= s * x for x, y, s in zip(a, b, signs, strict=True))
    return better_or_equal and any(s * y > s * x for x, y, s in zip(a, b, signs, strict=True))


def expected_best(spec: dict, trials: list[optuna.trial.FrozenTrial]) -> list[int]:
    """What the study's direction says is best, worked out here from the stored trials alone: the trials
    tied for the best value (one objective), or the Pareto front."""
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    study = spec["study"]
    if "scaling" in spec:  # fewest steps, among the trials whose reports reached the target
        metric, target = study["metric"], spec["scaling"]["target"]
        hit = [t for t in done if any(m.get(metric, -math.inf) >= target for _s, m in TrialRecord.of(t).history)]
        fewest = min((t.value for t in hit), default=None)
        return [t.number for t in hit if t.value == fewest]
    if "directions" in study:  # the Pareto front, as a set
        signs = tuple(1 if d == "maximize" else -1 for d in study["directions"])
        return sorted(
            t.number for t in done if not any(dominated(tuple(t.values), tuple(o.values), signs) for o in done)
        )
    pick = max if study["direction"] == "maximize" else min
    best = pick(t.value for t in done)
    return [t.number for t in done if t.value == best]


def reproduced_trial(spec: dict, trials: list[optuna.trial.FrozenTrial]) -> int:
    """A scaling sweep: a trial stopped at its target if there is one; an elastic campaign: the first
    complete trial that ran several segments (grew); else the first complete trial."""
    done = [t for t in trials if t.state == TrialState.COMPLETE]
    stopped = [t for t in done if t.user_attrs.get("stop_reason") == "target reached"]
    if "scaling" in spec:
        assert stopped, "no trial of the sweep was stopped at its target"
        return stopped[0].number
    if "elastic" in spec:  # a trial that grew, replayed at its widths
        grown = [t for t in done if len(t.user_attrs.get(Attr.SEGMENTS, [])) > 1]
        assert grown, "no trial of the elastic campaign grew"
        return grown[0].number
    return done[0].number


def elastic_rows(report_md: str) -> dict[int, tuple[int, ...]]:
    """The report's "Elastic trials" table: each trial's widths, segment by segment, where every segment shows its
    examples/s and goodput."""
    section = report_md.split("## Elastic trials", 1)[1].split("\n## ", 1)[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    columns = [c.strip() for c in lines[0].split("|")[1:-1]]
    widths: dict[int, tuple[int, ...]] = {}
    for line in lines[1:]:
        row = dict(zip(columns, (c.strip() for c in line.split("|")[1:-1]), strict=True))
        assert float(row["examples/s training"].replace(",", "")) > 0 and row["goodput (examples/s)"] != "n/a", row
        widths[int(row["trial"])] = (*widths.get(int(row["trial"]), ()), int(row["width"]))
    return widths


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs_end_to_end(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    spec_path = cut_copy(name, tmp_path)
    spec = tomllib.loads(spec_path.read_text())
    command = "scaling" if "scaling" in spec else "run"
    runs = tmp_path / "runs"
    code, out = cli(capsys, command, spec_path, "--runs-dir", runs, "--workers", "2", "--no-progress")
    assert code == 0, out[-3000:]
    ran, folder = out, runs / spec["study"]["name"]

    code, status = cli(capsys, "status", folder)
    assert code == 0 and "controller not running" in status, status
    code, out = cli(capsys, "report", folder)
    assert code == 0, out
    trials = load(folder, spec["study"]["name"]).get_trials()
    best = expected_best(spec, trials)
    report_md = (folder / "report" / "report.md").read_text()
    shown = report_best(report_md)
    if "directions" in spec["study"]:
        assert sorted(shown) == best, (shown, best)
    else:  # the first row is one of the trials tied for the best value
        assert shown and shown[0] in best, (shown, best)
    if "scaling" in spec:  # the sweep's objective, only over the trials that reached the target
        assert f"best steps_to_target = {trials[best[0]].value:.6g} (trial " in status, status
        assert (folder / "scaling" / "conclusion.txt").read_text().strip() in report_md
        assert "<h3>Conclusion</h3>" in (folder / "report" / "index.html").read_text()
        if "branching" in spec["scaling"]:  # the critical batch at each point, in its folder and on the page
            summary = json.loads((folder / "branching" / "summary.json").read_text())
            assert set(summary["critical"]) == {str(p) for p in spec["scaling"]["branching"]["points"]}
            assert "Critical batch over training" in report_md and "Critical batch over training" in ran

    if "elastic" in spec:  # a promoted trial grew 1 -> 2 -> 4 ranks (the last across both workers)
        widths = [[r["width"] for r in t.user_attrs.get(Attr.SEGMENTS, [])] for t in trials]
        assert [1, 2, 4] in widths, widths
        resized = {t.number: tuple(w) for t, w in zip(trials, widths, strict=True) if len(set(w)) > 1}
        assert elastic_rows(report_md) == resized  # the report's section: each resized trial, each segment
        assert '<section id="elastic">' in (folder / "report" / "index.html").read_text()
    number = reproduced_trial(spec, trials)
    code, again = cli(capsys, "reproduce", folder, number)
    assert code == 0 and f"MATCH: trial {number} reproduces" in again, again[-3000:]
    print(json.dumps({"example": name, "trials": len(trials), "best": best, "reproduced": number}))
