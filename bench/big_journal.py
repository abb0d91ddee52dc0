"""A 100,000-trial campaign on the default journal: controller time per trial, and ``status``, ``resume`` and
``report`` of it, with the journal's snapshot and without (the peer: the same commands replaying the whole
journal, in the same run).

The campaign is made in two steps: the real controller runs 200 trials on simulated workers
(bench.light.finished_campaign), then their trials, as the controller recorded them (attributes, reports,
times), are copied with ``Study.add_trial`` into a new study, and those journal lines repeated until it holds
``--trials`` finished trials (one journal line per trial; a controller writes about 15-25 per trial, so
the replay without a snapshot is shorter here than after a real campaign). The writer's snapshot is taken
as a campaign's end takes it. Then ``--more`` trials run through the real ``Campaign`` on simulated workers
on top of the big study: ``ctrl ms/trial`` is the controller's real time per trial there, beside the same
``--more`` trials on top of the 200-trial study it was made from (what a study's size adds)::

    python -m bench.big_journal [--trials 100000] [--more 500] [--reps 1]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import optuna

from bench.light import finished_campaign, time_command
from bench.simulate import NB201_CSV, TRIAL_SECONDS
from cluster.simulated import SimulatedExecutor, TableModel
from search.compat import optuna_private as op
from search.loop.campaign import Campaign
from search.session.runner import load_study
from search.spec.campaign_spec import load_spec
from search.store.folder import CampaignFolder
from search.store.heap import freeze_after_loads
from search.store.snapshot import snapshot_path
from search.store.storage import final_snapshot

__all__ = ["big_campaign", "controller_ms_per_trial", "main"]


def big_campaign(root: Path, n_trials: int, seed_trials: int = 200) -> Path:
    """A campaign folder holding ``n_trials`` finished trials (see the module's docstring), snapshotted."""
    seed = finished_campaign(root, seed_trials, workers=16)
    spec = load_spec(seed / "spec.toml", check_trainer=False)
    trials = load_study(spec, CampaignFolder(seed), create=False, writer=False).get_trials(deepcopy=False)
    text = (seed / "spec.toml").read_text().replace(f"n_trials = {seed_trials}", f"n_trials = {n_trials}")
    folder = CampaignFolder(root / "big")
    folder.root.mkdir()
    folder.create(text)
    study = load_study(load_spec(folder.spec, check_trainer=False), folder, create=True, writer=True)
    for trial in trials:
        study.add_trial(_copy(trial))
    op.storage_of(study).flush()
    _repeat_last_lines(folder.journal, len(trials), n_trials - len(trials))
    storage = op.storage_of(load_study(load_spec(folder.spec, check_trainer=False), folder, create=False, writer=True))
    final_snapshot(storage)  # as the end of a run leaves it
    return folder.root


def _repeat_last_lines(journal: Path, lines: int, more: int) -> None:
    """Append copies of the journal's last ``lines`` lines (whole CREATE_TRIAL entries: a trial's number comes
    from its place in the file) until ``more`` lines are added."""
    data = journal.read_bytes().splitlines(keepends=True)[-lines:]
    with open(journal, "ab") as fh:
        for i in range(more):
            fh.write(data[i % lines])
        fh.flush()
        os.fsync(fh.fileno())


def _copy(trial: optuna.trial.FrozenTrial) -> optuna.trial.FrozenTrial:
    return optuna.trial.create_trial(
        state=trial.state,
        values=trial.values,
        params=trial.params,
        distributions=trial.distributions,
        user_attrs=trial.user_attrs,
        system_attrs=trial.system_attrs,
        intermediate_values=trial.intermediate_values,
    )


def controller_ms_per_trial(folder: Path, more: int, workers: int = 64) -> float:
    """The real controller runs ``more`` trials on top of the study in ``folder``; its ms per trial."""
    spec = load_spec(folder / "spec.toml", check_trainer=False)
    study = load_study(spec, CampaignFolder(folder), create=False, writer=True)
    n_done = len(study.get_trials(deepcopy=False))
    spec = dataclasses.replace(spec, study=dataclasses.replace(spec.study, n_trials=n_done + more))
    executor = SimulatedExecutor(workers, TableModel(NB201_CSV, trial_seconds=TRIAL_SECONDS, jitter=0.1), seed=1)
    Campaign(spec, CampaignFolder(folder), study, executor, clock=executor.clock).run()
    final_snapshot(op.storage_of(study))
    finished = executor.counts["ok"] + executor.counts["lost"]
    return 1e3 * executor.controller_seconds / max(1, finished)


def _size_mb(path: Path) -> float:
    return path.stat().st_size / 1e6 if path.exists() else 0.0


def _snapshot_mb(journal: Path) -> float:
    head = snapshot_path(journal)
    return sum(_size_mb(p) for p in [head, *head.parent.glob(f"{head.name}.seg-*")])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.big_journal", description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument("--more", type=int, default=500)
    parser.add_argument("--reps", type=int, default=1)
    args = parser.parse_args(argv)
    py = sys.executable
    freeze_after_loads()  # as the `hypersweep` command does: else the first full collection after a load of
    # the 100,000-trial study (2.4-3.0 s here) falls in the controller's timed run in some repetitions
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        folder = big_campaign(Path(tmp), args.trials)
        os.sync()  # the 500 MB just written must not be the controller's first fsync's to wait for
        print(
            f"made {args.trials} trials in {time.perf_counter() - started:.0f} s "
            f"({_size_mb(folder / 'study.journal'):.0f} MB journal, "
            f"{_snapshot_mb(folder / 'study.journal'):.0f} MB snapshot with its segments)",
            flush=True,
        )
        commands = {
            "status": [py, "-m", "search", "status", str(folder)],
            "resume (finished)": [py, "-m", "search", "resume", str(folder), "--no-progress"],
            "report": [py, "-m", "search", "report", str(folder)],
        }
        rows = []
        for label, command in commands.items():
            rows.append((label, "snapshot", os.getloadavg()[0], statistics.median(time_command(command, args.reps))))
            print(rows[-1], flush=True)
        load = os.getloadavg()[0]
        big, small = [], []
        for _ in range(args.reps):  # alternated, so that both see the same machine
            small.append(controller_ms_per_trial(Path(tmp) / "light-random-200", args.more))  # the peer
            big.append(controller_ms_per_trial(folder, args.more))
        print(
            f"ctrl ms/trial at {args.trials} finished trials ({args.more} more, random, journal): "
            f"{statistics.median(big):.2f}; at 200 finished trials: {statistics.median(small):.2f} "
            f"(medians of {args.reps}: {[round(x, 2) for x in big]} / {[round(x, 2) for x in small]}; load {load:.1f})",
            flush=True,
        )
        head = snapshot_path(folder / "study.journal")
        for path in [head, *head.parent.glob(f"{head.name}.seg-*")]:  # the peer: the whole journal replayed
            path.unlink(missing_ok=True)
        label, command = "status", commands["status"]
        rows.append((label, "no snapshot", os.getloadavg()[0], statistics.median(time_command(command, args.reps))))
    print(f"{'command':20} {'journal':12} {'load':>5} {'median s':>9}   (reps={args.reps}, {args.trials} trials)")
    for label, kind, load, median in rows:
        print(f"{label:20} {kind:12} {load:5.1f} {median:9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
