"""Chaos: kill the controller of a real campaign at random moments (SIGKILL or SIGTERM), and its Dask
workers too if asked, resume it each time, then check the study with plain Optuna.

    python -m bench.chaos [--reps 5] [--sampler random|tpe] [--seed 0] [--trials 30]
                          [--signal KILL|TERM] [--kill-workers N] [--keep DIR]
                          [--tear-journal] [--die-between P [--die-max N]]

A small real campaign (``python -m search run <spec>`` in its own process group, an
embedded LocalCluster, the trainer :func:`fit` below: a few epochs of short sleeps over
two continuous parameters) has its controller killed ``--reps`` times, each at a moment
drawn from ``--seed``: a uniform delay after the controller's storage first grows (so
the kill lands mid-campaign, not in its start-up).

- ``--signal KILL`` (default): SIGKILL; whatever the controller left behind (its Dask
  workers, its sampler child) is killed with it.
- ``--signal TERM``: SIGTERM, a clean interrupt; the controller must exit 130 on its own
  (within ``--term-grace`` s) leaving its trials resumable; its exit status is checked,
  and what it left behind in its process group is counted, then killed.

Each kill is followed by ``python -m search resume <folder>``; the last resume runs to
the end of the budget. ``--kill-workers N`` also SIGKILLs a Dask worker process (not the
controller) N times while the campaign runs: after gaps of ``uniform(0, --window)`` s of
running time (drawn from the seed, counted from when each controller's storage grew), one
worker chosen with the seed among those that are running :func:`fit` right now (processes
of the controller's process group whose parent is the controller and whose pid :func:`fit`
wrote into its trial folder; the embedded cluster's nanny, in the controller, starts a new
one). Each worker kill is a retry of the trials it held, from their checkpoints.

:func:`fit` checkpoints like the built-in trainer: after every ``checkpoint_every`` epochs
it writes its reports (and its identity) atomically to ``trials/<n>/chaos_checkpoint.json``;
a run that finds one reports again every report it covers, then trains on from there. So
the "missing reports" check tests the re-send and the controller's de-duplication.

Then the study is opened with plain Optuna, the way ``search.store.storage`` opens it
for readers (``JournalStorage(JournalFileBackend(path))``), and checked:

- **budget**: exactly ``--trials`` trials, numbered 0..n-1;
- **lost**: no trial left unfinished (RUNNING/WAITING);
- **failed**: no FAIL trial (each one is listed with its recorded reason);
- **duplicated**: no two trials with the same parameter set (the parameters are
  continuous: a repeat can only come from a sampler that replays its random stream);
- **missing reports**: every COMPLETE trial's ``history``, intermediate values and
  ``trials/<n>/metrics.jsonl`` hold every epoch step 1..epochs;
- **repeated reports**: no step twice in a COMPLETE trial's ``history`` or ``metrics.jsonl``;
- **interrupts** (``--signal TERM``): every SIGTERMed controller exited 130.

Two more ways to die (each its own function, the same checks):

- ``--tear-journal`` (:func:`torn_journal_chaos`): after each controller kill the journal is cut as a crash
  inside its last commit would cut it, right after a trial's creation (:func:`tear_journal`: the last
  ``"op_code":4`` line kept, the next one cut 40 bytes short, nothing after); the resume must still run
  every trial with the parameters it ran with (``fit`` refuses a checkpoint of another parameter set).
- ``--die-between P`` (:func:`die_between_chaos`, with ``--reps 0`` for these deaths alone): ``fit`` SIGKILLs
  its own worker right after a report reached the controller and before the checkpoint covering it, with
  chance P per epoch, at most ``--die-max`` times per trial; its re-run sends that report again with another
  ``epoch_seconds``, so "repeated reports" tests that the controller keeps one report per (trial, step).

Exit status 0 when every check passes, 1 otherwise. :func:`chaos` is the same as a
function (``tests/search/session/test_resume_no_duplicates.py`` calls it).
"""

from __future__ import annotations

import argparse
import contextlib
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

from bench.chaos_processes import WorkerKills, group_alive, kill_all, start_campaign, stop_campaign
from bench.chaos_study import (
    CHECKPOINT,
    DEATHS,
    PIDFILE,
    STUDY,
    ChaosResult,
    check_study,
    count_trials,
    metrics_steps,
    read_text,
)
from trainers.api import TrainerInfo, declare

__all__ = [
    "fit",
    "chaos",
    "check_study",
    "ChaosResult",
    "main",
    "tear_journal",
    "torn_journal_chaos",
    "die_between_chaos",
]


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
    """``epochs`` reports of a smooth score of ``x`` and ``y``, ``options.sleep`` seconds each.

    Checkpoints like the built-in trainer (README, "Writing a trainer"): every ``checkpoint_every``
    epochs its reports go atomically to ``checkpoint_dir/chaos_checkpoint.json``; a run that finds
    that file reports again every report it covers (one may never have reached the controller),
    then goes on from the epoch after. It also writes its pid to ``checkpoint_dir/chaos.pid`` so
    that :func:`chaos` can tell the Dask workers running a trial from the controller's other children
    (removed when it returns).
    """
    x, y = float(config.params["x"]), float(config.params["y"])
    sleep = float(config.options.get("sleep", 0.2))
    best = -((x - 0.3) ** 2) - (y - 0.1) ** 2
    folder = Path(config.checkpoint_dir) if config.checkpoint_dir else None
    identity = {"study": config.study, "number": config.number, "params": {"x": x, "y": y}}
    history: list[dict[str, float]] = []
    resumes: list[list[float]] = []  # [[time.time(), reports re-sent], ...] of the runs that found a checkpoint
    if folder is not None:
        folder.mkdir(parents=True, exist_ok=True)
        _write_atomic(folder / PIDFILE, str(os.getpid()))
        state = _load_checkpoint(folder / CHECKPOINT)
        if state is not None:
            if state.get("identity") != identity:
                raise ValueError(f"{folder / CHECKPOINT}: written by {state.get('identity')}, not {identity}")
            history = [dict(metrics) for metrics in state["history"]][: config.epochs]
            resumes = [*state.get("resumes", ()), [time.time(), len(history)]]
    try:
        for epoch, metrics in enumerate(history, start=1):  # what the checkpoint covers, again
            reporter.report(epoch, metrics)
        if resumes:  # for the figures only: which re-sent report filled a gap (check_study)
            _write_atomic(
                folder / CHECKPOINT, json.dumps({"identity": identity, "history": history, "resumes": resumes})
            )
        metrics = history[-1] if history else {"score": best - 1.0}
        for epoch in range(len(history) + 1, config.epochs + 1):
            started = time.perf_counter()
            time.sleep(sleep)
            metrics = {"score": best - 1.0 / epoch, "epoch_seconds": time.perf_counter() - started}
            history.append(metrics)
            reporter.report(epoch, metrics)
            _die_between(config, folder, epoch)  # options.die_between: before the checkpoint covering this epoch
            if folder is not None and epoch % config.checkpoint_every == 0:
                state = {"identity": identity, "history": history, "resumes": resumes}
                _write_atomic(folder / CHECKPOINT, json.dumps(state))
            if reporter.should_stop():
                break
        return metrics
    finally:
        if folder is not None:  # this process runs the trial no more
            with contextlib.suppress(FileNotFoundError):
                (folder / PIDFILE).unlink()


def _die_between(config: Any, folder: Path | None, epoch: int) -> None:
    """``options.die_between = P``: with chance P (drawn from the trial's seed, the epoch and its deaths) SIGKILL
    this process (its Dask worker) once the report of ``epoch`` reached the controller (its line is in the trial's
    ``metrics.jsonl``) and before the checkpoint covering it; at most ``options.die_max`` times (1) per trial."""
    chance = float(config.options.get("die_between", 0.0))
    if not chance or folder is None:
        return
    deaths = int(read_text(folder / DEATHS) or 0)
    if deaths >= int(config.options.get("die_max", 1)):
        return
    if random.Random(f"{config.seed}-{epoch}-{deaths}").random() >= chance:  # the trial's seed: from --seed
        return
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and epoch not in metrics_steps(folder / "metrics.jsonl"):
        time.sleep(0.01)
    _write_atomic(folder / DEATHS, str(deaths + 1))
    os.kill(os.getpid(), signal.SIGKILL)


def _write_atomic(path: Path, text: str) -> None:
    """``text`` to ``path`` through a temporary file in the same folder and one ``os.replace``."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _load_checkpoint(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None


declare(fit, TrainerInfo(accepted_params={"x", "y"}, reported_metrics={"score", "epoch_seconds"}))


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


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
    signal: str = "KILL",
    kill_workers: int = 0,
    term_grace: float = 60.0,
    after_kill: Any = None,
    options: str = "",
) -> ChaosResult:
    """Run the campaign, kill its controller ``reps`` times (``signal`` ``"KILL"`` or ``"TERM"``, each
    ``uniform(0, window)`` s after its storage grew), resume each time, and check the study. ``kill_workers``:
    also SIGKILL a worker that many times (see :class:`WorkerKills`). ``root``: where the campaign lives (a
    temporary folder otherwise, removed afterwards). ``after_kill(folder) -> dict``: done to the campaign folder
    after each kill (its answer joins the kill's record); ``options``: more trainer options (TOML, ``, k = v``)."""
    if signal not in ("KILL", "TERM"):
        raise ValueError(f"signal={signal!r}: KILL or TERM")
    if root is None:
        with tempfile.TemporaryDirectory(prefix="hypersweep-chaos-") as tmp:
            return chaos(
                sampler,
                reps,
                seed,
                trials,
                epochs,
                sleep,
                workers,
                window,
                Path(tmp),
                timeout,
                say,
                signal,
                kill_workers,
                term_grace,
                after_kill,
                options,
            )
    started = time.monotonic()
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    spec = root / "chaos.toml"
    text = SPEC.format(
        name=STUDY, sampler=sampler, seed=seed, trials=trials, epochs=epochs, sleep=sleep, workers=workers
    )
    sleeps = f"options = {{ sleep = {sleep} }}"
    spec.write_text(textwrap.dedent(text.replace(sleeps, f"{sleeps[:-2]}{options} }}")))
    runs = root / "runs"
    folder = runs / STUDY
    journal = folder / "study.journal"
    log = root / "controller.log"
    result = ChaosResult(sampler, trials, epochs, signal=signal, worker_kills_wanted=kill_workers)
    workers_killer = WorkerKills(kill_workers, window, seed, folder, say)
    deadline = started + timeout
    command = ["run", str(spec), "--runs-dir", str(runs)]

    def run_until(proc: subprocess.Popen, size: int, delay: float, run: int) -> None:
        """Wait until the storage grew past ``size``, then ``delay`` s more (or the controller's end)."""
        while proc.poll() is None and _size(journal) <= size and time.monotonic() < deadline:
            time.sleep(0.02)  # the controller is starting: its storage has not grown yet
        end = min(time.monotonic() + delay, deadline)
        last = time.monotonic()
        while proc.poll() is None and last < end:
            time.sleep(0.01)
            now = time.monotonic()
            workers_killer.tick(proc, now - last, run)
            last = now

    for run in range(1, reps + 1):
        delay = rng.uniform(0.0, window)
        size = _size(journal)
        proc = start_campaign(command, log)
        command = ["resume", str(folder)]
        stopped: dict[str, Any] = {}
        try:
            run_until(proc, size, delay, run)
            if proc.poll() is not None:
                result.finished_early = True
                result.final_returncode = proc.returncode
                break
            stopped = stop_campaign(proc, signal, term_grace)
        finally:
            if proc.poll() is None or group_alive(proc.pid):
                kill_all(proc)
        if signal == "TERM" and stopped["returncode"] == 0:  # the campaign ended before the interrupt did
            result.finished_early = True
            result.final_returncode = 0
            break
        if after_kill is not None:
            stopped.update(after_kill(folder))
        result.kills.append({"delay": delay, "trials": count_trials(folder), **stopped})
        say(
            f"kill {len(result.kills)} ({signal}): {delay:.2f} s in, {count_trials(folder)} trial(s) in the storage"
            + (f", exit status {stopped['returncode']}" if signal == "TERM" else "")
        )
    if not result.finished_early:
        proc = start_campaign(command, log)
        try:
            run_until(proc, _size(journal), float("inf"), reps + 1)
            if proc.poll() is None:
                say("the last resume did not finish in time")
        finally:
            if proc.poll() is None or group_alive(proc.pid):
                kill_all(proc)
        result.final_returncode = proc.returncode
    result.worker_kills = workers_killer.done
    result.final_stderr = log.read_text(errors="replace")[-4000:] if log.exists() else ""
    check_study(folder, result)
    result.seconds = time.monotonic() - started
    return result


# --- a torn journal; a death between a report and its checkpoint -------------------------------------------


def tear_journal(folder: Path) -> dict[str, Any]:
    """Cut ``study.journal`` as a crash inside its last commit would, right after a trial's creation: the last
    ``"op_code":4`` line (CREATE_TRIAL) is kept, the line after it loses its last 40 bytes (half of it when it is
    shorter) and everything after goes. Nothing is torn when no line follows the last creation."""
    journal = folder / "study.journal"
    try:
        lines = journal.read_bytes().splitlines(keepends=True)
    except FileNotFoundError:
        return {"torn": False, "cut_bytes": 0}
    creations = [i for i, line in enumerate(lines) if b'"op_code":4' in line]
    if not creations or creations[-1] + 1 >= len(lines):
        return {"torn": False, "cut_bytes": 0}
    kept = sum(map(len, lines[: creations[-1] + 1]))
    after = len(lines[creations[-1] + 1])
    end = kept + (after - 40 if after > 40 else after // 2)
    size = sum(map(len, lines))
    with open(journal, "r+b") as fh:
        fh.truncate(end)
    return {"torn": True, "cut_bytes": size - end, "torn_trial": len(creations) - 1}


def torn_journal_chaos(**kwargs: Any) -> ChaosResult:
    """:func:`chaos` (its arguments) with each controller kill followed by :func:`tear_journal`."""
    return chaos(after_kill=tear_journal, **kwargs)


def die_between_chaos(chance: float = 0.3, die_max: int = 2, **kwargs: Any) -> ChaosResult:
    """:func:`chaos` (its arguments; ``reps`` 0 unless given: no controller kill) whose trainer kills its own worker
    (SIGKILL) right after a report reached the controller and before the checkpoint covering it, with ``chance``
    per epoch, at most ``die_max`` times per trial (the default ``max_retries`` is 2: no trial runs out of them)."""
    kwargs.setdefault("reps", 0)
    return chaos(options=f", die_between = {float(chance)}, die_max = {int(die_max)}", **kwargs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="kill the controller this many times (default 5)")
    parser.add_argument(
        "--signal",
        choices=["KILL", "TERM"],
        default="KILL",
        help="KILL: kill -9 the controller (default); TERM: a clean interrupt, exit 130 expected",
    )
    parser.add_argument(
        "--kill-workers",
        type=int,
        default=0,
        metavar="N",
        help="also kill -9 a Dask worker process N times while the campaign runs (default 0)",
    )
    parser.add_argument("--sampler", choices=["random", "tpe"], default="random")
    parser.add_argument("--seed", type=int, default=0, help="the study seed and the kill moments' seed")
    parser.add_argument("--trials", type=int, default=30, help="the trial budget (default 30)")
    parser.add_argument("--epochs", type=int, default=3, help="reports per trial (default 3)")
    parser.add_argument("--sleep", type=float, default=0.2, help="seconds per epoch (default 0.2)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument(
        "--window",
        type=float,
        default=2.0,
        help="each kill lands uniform(0, WINDOW) s after the storage grows; worker kills "
        "uniform(0, WINDOW) s of running time apart (default 2)",
    )
    parser.add_argument(
        "--term-grace",
        type=float,
        default=60.0,
        help="seconds a SIGTERMed controller has to exit on its own (default 60)",
    )
    parser.add_argument("--timeout", type=float, default=600.0, help="give up after this many seconds")
    parser.add_argument(
        "--keep", type=Path, default=None, help="run in this folder and keep it (default: a temporary one)"
    )
    parser.add_argument("--json", action="store_true", help="also print the result as one JSON line")
    parser.add_argument(
        "--tear-journal",
        action="store_true",
        help="after each controller kill, tear the journal inside the line after its last trial "
        "creation (the line's last 40 bytes and all after it)",
    )
    parser.add_argument(
        "--die-between",
        type=float,
        default=0.0,
        metavar="P",
        help="the trainer SIGKILLs its worker between a report and its checkpoint with chance P per "
        "epoch, at most --die-max times per trial (use with --reps 0 for these deaths alone)",
    )
    parser.add_argument("--die-max", type=int, default=2, help="deaths per trial with --die-between (default 2)")
    parser.add_argument(
        "--pbt",
        action="store_true",
        help="population-based training: kill mid-segment and right after a rung's decision "
        "(bench/chaos_pbt.py; uses --reps, --seed, --keep, --timeout)",
    )
    args = parser.parse_args(argv)
    if args.pbt:
        return _main_pbt(args)
    common = dict(
        sampler=args.sampler,
        reps=args.reps,
        seed=args.seed,
        trials=args.trials,
        epochs=args.epochs,
        sleep=args.sleep,
        workers=args.workers,
        window=args.window,
        root=args.keep,
        timeout=args.timeout,
        signal=args.signal,
        kill_workers=args.kill_workers,
        term_grace=args.term_grace,
    )
    if args.die_between:
        result = die_between_chaos(
            args.die_between, args.die_max, **common, **({"after_kill": tear_journal} if args.tear_journal else {})
        )
    elif args.tear_journal:
        result = torn_journal_chaos(**common)
    else:
        result = chaos(**common)  # type: ignore[arg-type]
    print("\n".join(result.lines()))
    if args.json:
        print(json.dumps(dataclasses.asdict(result) | {"ok": result.ok, "final_stderr": None}))
    return 0 if result.ok else 1


def _main_pbt(args: argparse.Namespace) -> int:
    """``--pbt``: :func:`bench.chaos_pbt.chaos_pbt` with the shared options."""
    from bench.chaos_pbt import chaos_pbt

    if args.keep is None:
        with tempfile.TemporaryDirectory(prefix="hypersweep-chaos-pbt-") as tmp:
            result = chaos_pbt(Path(tmp), args.reps, args.seed, timeout=args.timeout)
    else:
        result = chaos_pbt(args.keep, args.reps, args.seed, timeout=args.timeout)
    print("\n".join(result.lines()))
    if args.json:
        print(json.dumps(dataclasses.asdict(result) | {"ok": result.ok, "final_log": None}))
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
