"""Chaos: kill -9 the controller of a real campaign at random moments, resume it each time, then check
the study with plain Optuna.

    python -m bench.chaos [--reps 5] [--sampler random|tpe] [--seed 0] [--trials 30] [--keep DIR]

A small real campaign (``python -m search run <spec>`` in its own process group, an
embedded LocalCluster, the trainer :func:`fit` below: a few epochs of short sleeps over
two continuous parameters) is killed with SIGKILL ``--reps`` times, each at a moment
drawn from ``--seed``: a uniform delay after the controller's storage first grows (so
the kill lands mid-campaign, not in its start-up). Whatever the controller left behind
(its Dask workers, its sampler child) is killed with it. Each kill is followed by
``python -m search resume <folder>``; the last resume runs to the end of the budget.

Then the study is opened with plain Optuna, the way ``search.store.storage`` opens it
for readers (``JournalStorage(JournalFileBackend(path))``), and checked:

- **budget**: exactly ``--trials`` trials, numbered 0..n-1;
- **lost**: no trial left unfinished (RUNNING/WAITING); FAIL ones are listed too;
- **duplicated**: no two trials with the same parameter set (the parameters are
  continuous: a repeat can only come from a sampler that replays its random stream);
- **missing reports**: every COMPLETE trial's ``history`` and intermediate values
  hold every epoch step 1..epochs.

Exit status 0 when every check passes, 1 otherwise. :func:`chaos` is the same as a
function (``tests/search/test_resume_no_duplicates.py`` calls it).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from trainers.api import declare, TrainerInfo

__all__ = ["fit", "chaos", "check_study", "ChaosResult", "main"]

ROOT = Path(__file__).resolve().parents[1]
STUDY = "chaos"

SPEC = """
[study]
name = "{name}"
direction = "maximize"
metric = "score"
sampler = "{sampler}"
seed = {seed}
n_trials = {trials}
pruner = "none"

[trainer]
entry = "bench.chaos:fit"
epochs = {epochs}
options = {{ sleep = {sleep} }}

[space]
x = {{ type = "float", low = 0.0, high = 1.0 }}
y = {{ type = "float", low = -1.0, high = 1.0 }}

[cluster]
n_workers = {workers}
"""


def fit(config: Any, reporter: Any) -> dict[str, float]:
    """``epochs`` reports of a smooth score of ``x`` and ``y``, ``options.sleep`` seconds each."""
    x, y = float(config.params["x"]), float(config.params["y"])
    sleep = float(config.options.get("sleep", 0.2))
    best = -((x - 0.3) ** 2) - (y - 0.1) ** 2
    metrics = {"score": best - 1.0}
    for epoch in range(1, config.epochs + 1):
        time.sleep(sleep)
        metrics = {"score": best - 1.0 / epoch}
        reporter.report(epoch, metrics)
        if reporter.should_stop():
            break
    return metrics


declare(fit, TrainerInfo(accepted_params={"x", "y"}, reported_metrics={"score"}))


# --- the checks, with plain Optuna ---------------------------------------------------------------


@dataclasses.dataclass
class ChaosResult:
    """What the kills did and what the study holds afterwards."""

    sampler: str
    budget: int
    epochs: int
    kills: list[dict[str, float]] = dataclasses.field(default_factory=list)  # per kill: delay, trials then
    finished_early: bool = False  # the budget was spent before every kill happened
    final_returncode: int | None = None
    final_stderr: str = ""
    trials: int = 0
    states: dict[str, int] = dataclasses.field(default_factory=dict)
    lost: list[int] = dataclasses.field(default_factory=list)
    failed: list[int] = dataclasses.field(default_factory=list)
    duplicated: list[list[int]] = dataclasses.field(default_factory=list)  # groups of trial numbers
    missing_reports: dict[int, list[int]] = dataclasses.field(default_factory=dict)  # number -> missing steps
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (
            self.final_returncode == 0 and self.trials == self.budget and not self.lost
            and not self.duplicated and not self.missing_reports
        )  # fmt: skip

    def lines(self) -> list[str]:
        out = [f"sampler {self.sampler}: {len(self.kills)} kill(s) -9 of the controller"
               + (" (the budget was spent before the last one)" if self.finished_early else "")]  # fmt: skip
        for i, kill in enumerate(self.kills, 1):
            out.append(f"  kill {i}: {kill['delay']:.2f} s after the storage grew, "
                       f"{int(kill['trials'])} trial(s) in the storage")  # fmt: skip
        def verdict(bad: object) -> str:
            return "FAIL" if bad else "OK"

        missing = sum(map(len, self.missing_reports.values()))
        out += [
            f"final resume exit status: {self.final_returncode}",
            f"budget:            {self.trials} trials of {self.budget}  {verdict(self.trials != self.budget)}",
            f"states:            {', '.join(f'{n} {s}' for s, n in sorted(self.states.items()))}",
            f"lost (unfinished): {len(self.lost)} {self.lost or ''}  {verdict(self.lost)}",
            f"failed trials:     {len(self.failed)} {self.failed or ''}",
            f"duplicated params: {len(self.duplicated)} {self.duplicated or ''}  {verdict(self.duplicated)}",
            f"missing reports:   {missing} step(s) in {len(self.missing_reports)} trial(s) "
            f"{self.missing_reports or ''}  {verdict(self.missing_reports)}",
            f"wall time:         {self.seconds:.1f} s",
            "RESULT: " + ("PASS" if self.ok else "FAIL"),
        ]  # fmt: skip
        if self.final_returncode not in (0, None) and self.final_stderr:
            out.append("last resume's stderr (tail):\n" + self.final_stderr[-2000:])
        return out


def open_study(folder: Path, name: str = STUDY) -> Any:
    """The campaign's study, opened with plain Optuna as a reader (``search.store.storage.open_storage``)."""
    import optuna
    from optuna.storages.journal import JournalFileBackend, JournalStorage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = JournalStorage(JournalFileBackend(str(folder / "study.journal")))
    return optuna.load_study(study_name=name, storage=storage)


def check_study(folder: Path, result: ChaosResult, name: str = STUDY) -> ChaosResult:
    """Fill ``result`` from the study in ``folder``: budget, lost, duplicated, missing reports."""
    from optuna.trial import TrialState

    trials = open_study(folder, name).get_trials(deepcopy=False)
    result.trials = len(trials)
    result.states = dict(collections.Counter(t.state.name for t in trials))
    result.lost = [t.number for t in trials if not t.state.is_finished()]
    result.failed = [t.number for t in trials if t.state == TrialState.FAIL]
    by_params: dict[tuple, list[int]] = collections.defaultdict(list)
    for t in trials:
        by_params[tuple(sorted(t.params.items()))].append(t.number)
    result.duplicated = [numbers for numbers in by_params.values() if len(numbers) > 1]
    every = set(range(1, result.epochs + 1))
    for t in trials:
        if t.state != TrialState.COMPLETE:
            continue
        history = {int(step) for step, _metrics in t.user_attrs.get("history") or ()}
        missing = sorted((every - history) | (every - set(t.intermediate_values)))
        if missing:
            result.missing_reports[t.number] = missing
    return result


# --- the kills --------------------------------------------------------------------------------------


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def _start(args: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "search", *args, "--no-progress"], cwd=ROOT, env=_env(),
            stdout=fh, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_all(proc: subprocess.Popen) -> None:
    """SIGKILL the controller, then whatever it left in its process group (workers, the sampler child)."""
    try:
        os.kill(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)
    deadline = time.monotonic() + 30
    while _group_alive(proc.pid) and time.monotonic() < deadline:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            break
        time.sleep(0.1)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


def _count_trials(folder: Path) -> int:
    try:
        return len(open_study(folder).get_trials(deepcopy=False))
    except Exception:  # noqa: BLE001 - a journal being written, or not created yet
        return -1


def chaos(
    sampler: str = "random",
    reps: int = 5,
    seed: int = 0,
    trials: int = 30,
    epochs: int = 3,
    sleep: float = 0.2,
    workers: int = 2,
    window: float = 2.0,
    root: Path | None = None,
    timeout: float = 300.0,
    say: Any = print,
) -> ChaosResult:
    """Run the campaign, kill -9 its controller ``reps`` times (each ``uniform(0, window)`` s after its
    storage grew), resume each time, and check the study. ``root``: where the campaign lives (a temporary
    folder otherwise, removed afterwards)."""
    if root is None:
        with tempfile.TemporaryDirectory(prefix="hypersweep-chaos-") as tmp:
            return chaos(sampler, reps, seed, trials, epochs, sleep, workers, window, Path(tmp), timeout, say)
    started = time.monotonic()
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    spec = root / "chaos.toml"
    spec.write_text(textwrap.dedent(SPEC.format(name=STUDY, sampler=sampler, seed=seed, trials=trials,
                                                epochs=epochs, sleep=sleep, workers=workers)))  # fmt: skip
    runs = root / "runs"
    folder = runs / STUDY
    journal = folder / "study.journal"
    log = root / "controller.log"
    result = ChaosResult(sampler, trials, epochs)
    deadline = started + timeout
    command = ["run", str(spec), "--runs-dir", str(runs)]
    for _ in range(reps):
        delay = rng.uniform(0.0, window)
        size = _size(journal)
        proc = _start(command, log)
        command = ["resume", str(folder)]
        try:
            while proc.poll() is None and _size(journal) <= size and time.monotonic() < deadline:
                time.sleep(0.02)  # the controller is starting: its storage has not grown yet
            end = time.monotonic() + delay
            while proc.poll() is None and time.monotonic() < end:
                time.sleep(0.01)
            if proc.poll() is not None:
                result.finished_early = True
                result.final_returncode = proc.returncode
                break
        finally:
            _kill_all(proc)
        result.kills.append({"delay": delay, "trials": float(_count_trials(folder))})
        say(f"kill {len(result.kills)}: {delay:.2f} s in, {_count_trials(folder)} trial(s) in the storage")
    if not result.finished_early:
        proc = _start(command, log)
        try:
            proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            say("the last resume did not finish in time")
        finally:
            if proc.poll() is None:
                _kill_all(proc)
            elif _group_alive(proc.pid):
                _kill_all(proc)
        result.final_returncode = proc.returncode
    result.final_stderr = log.read_text(errors="replace")[-4000:] if log.exists() else ""
    check_study(folder, result)
    result.seconds = time.monotonic() - started
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="kill -9 the controller this many times (default 5)")
    parser.add_argument("--sampler", choices=["random", "tpe"], default="random")
    parser.add_argument("--seed", type=int, default=0, help="the study seed and the kill moments' seed")
    parser.add_argument("--trials", type=int, default=30, help="the trial budget (default 30)")
    parser.add_argument("--epochs", type=int, default=3, help="reports per trial (default 3)")
    parser.add_argument("--sleep", type=float, default=0.2, help="seconds per epoch (default 0.2)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--window", type=float, default=2.0,
                        help="each kill lands uniform(0, WINDOW) s after the storage grows (default 2)")  # fmt: skip
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    parser.add_argument("--keep", type=Path, default=None,
                        help="run in this folder and keep it (default: a temporary one)")  # fmt: skip
    parser.add_argument("--json", action="store_true", help="also print the result as one JSON line")
    args = parser.parse_args(argv)
    result = chaos(args.sampler, args.reps, args.seed, args.trials, args.epochs, args.sleep, args.workers,
                   args.window, args.keep, args.timeout)  # fmt: skip
    print("\n".join(result.lines()))
    if args.json:
        print(json.dumps(dataclasses.asdict(result) | {"ok": result.ok, "final_stderr": None}))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
