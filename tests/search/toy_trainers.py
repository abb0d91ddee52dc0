"""Tiny trainers for controller tests: real functions run on real Dask workers, no torch.

``fit``: the value climbs towards ``quality`` over the epochs; ``quality < 0`` raises,
``quality == 99`` returns NaN. ``options.sleep`` seconds per epoch. ``options.die_once = "<path>"``: the first trial to
start creates that file and kills its worker process (a lost worker, once).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from trainers.api import Reporter, TrialConfig


def fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    quality = float(config.params["quality"])
    marker = config.options.get("die_once")
    if marker and not Path(marker).exists():
        Path(marker).write_text(str(config.number))
        os._exit(3)  # the worker process dies mid-task
    if quality < 0:
        raise ValueError(f"quality {quality} is negative: this trial fails on purpose")
    sleep = float(config.options.get("sleep", 0.0))
    metrics: dict[str, float] = {}
    for epoch in range(1, config.epochs + 1):
        time.sleep(sleep)
        score = quality * epoch / config.epochs
        metrics = {"score": score, "epoch": float(epoch), "examples": float(100 * epoch), "steps": float(epoch)}
        reporter.report(epoch, metrics)
        if reporter.should_stop():
            break
    if quality == 99:
        metrics["score"] = float("nan")
    return metrics


fit.accepted_params = frozenset({"quality", "tag"})  # type: ignore[attr-defined]
fit.reported_metrics = frozenset({"score", "epoch", "examples", "steps"})  # type: ignore[attr-defined]


def own_lr(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """A user's own trainer for report tests: reports its own ``lr`` (halved every epoch) and an ``error``.

    The trial number decides its fate, so a small campaign has all kinds: trial numbers in
    ``options.fail`` raise, those in ``options.bad`` report an error ten times the others'
    (a median pruner stops them), the rest improve with the number. ``lr`` and ``width``
    barely matter; ``schedule`` is accepted but ignored (this trainer has its own).
    """
    number = config.number
    if number in config.options.get("fail", ()):
        raise RuntimeError(f"trial {number} fails on purpose")
    sleep = float(config.options.get("sleep", 0.0))
    lr = float(config.params["lr"])
    final = (10.0 if number in config.options.get("bad", ()) else 1.0) / (number + 1) + 0.001 * config.params["width"]
    metrics: dict[str, float] = {}
    for epoch in range(1, config.epochs + 1):
        time.sleep(sleep)
        error = final * (1.0 + (config.epochs - epoch) / config.epochs)
        metrics = {
            "error": error,
            "lr": lr * 0.5 ** (epoch - 1),
            "epoch": float(epoch),
            "examples": float(50 * epoch),
            "steps": float(10 * epoch),
        }
        reporter.report(epoch, metrics)
        if reporter.should_stop():
            break
    return metrics


own_lr.accepted_params = frozenset({"lr", "width", "schedule"})  # type: ignore[attr-defined]
own_lr.reported_metrics = frozenset({"error", "lr", "epoch", "examples", "steps"})  # type: ignore[attr-defined]


def lossy_classifier(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """The built-in classifier, whose first run loses a report with its worker.

    ``options.lose_report = [step, "<marker path>"]``: while the marker does not exist, the report of
    ``step`` never reaches the controller, and after the checkpoint that covers it is written the
    worker process dies (the marker is created first). The re-run resumes from that checkpoint.
    """
    import dataclasses

    from trainers.classifier import fit as classifier_fit

    options = dict(config.options)
    step, marker = options.pop("lose_report")
    first_run = not Path(marker).exists()
    return classifier_fit(dataclasses.replace(config, options=options), _Lossy(reporter, int(step), marker, first_run))


class _Lossy:
    def __init__(self, inner: Reporter, step: int, marker: str, first_run: bool) -> None:
        self._inner, self._step, self._marker, self._first_run = inner, step, marker, first_run
        self._last = 0

    def report(self, step: int, metrics) -> None:  # type: ignore[no-untyped-def]
        self._last = step
        if not (self._first_run and step == self._step):
            self._inner.report(step, metrics)

    def should_stop(self) -> bool:  # the loop asks after its checkpoint: the worker dies right there
        if self._first_run and self._last == self._step:
            Path(self._marker).write_text("lost")
            os._exit(3)
        return self._inner.should_stop()


def hanging(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """Reports ``params.reports`` epochs, then (``params.hang``) stops answering for good.

    A hanging trial starts a child process (``sleep``) first and writes its pid to
    ``<options.pids>/<number>``, so a test can check that killing the trial ended it too.
    """
    import subprocess

    for epoch in range(1, int(config.params["reports"]) + 1):
        reporter.report(epoch, {"score": float(epoch), "epoch": float(epoch)})
    if not config.params["hang"]:
        time.sleep(float(config.options.get("sleep", 0.0)))
        return {"score": 1.0}
    child = subprocess.Popen(["sleep", "600"])
    Path(config.options["pids"], str(config.number)).write_text(str(child.pid))
    while True:  # never reports, never asks should_stop
        time.sleep(0.05)


def checkpointing(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """Checkpoints every epoch with the real ``save_checkpoint``; resumes from it, reporting its epochs again.

    ``options.fill = ["<folder>", "<marker>"]``: trial 1, while the marker does not exist, creates it and
    fills the disk of ``<folder>`` (a small tmpfs in the test) before its second checkpoint.
    """
    from trainers.checkpoint import load_checkpoint, save_checkpoint

    path = Path(config.checkpoint_dir or ".") / "checkpoint.pt"
    state = load_checkpoint(path) or {"epoch": 0, "history": []}
    for epoch, metrics in enumerate(state["history"], start=1):
        reporter.report(epoch, metrics)
    for epoch in range(int(state["epoch"]) + 1, config.epochs + 1):
        started = time.perf_counter()  # epoch_seconds: a copy re-sent after a failed checkpoint differs from it
        metrics = {
            "score": float(config.params["quality"]) * epoch / config.epochs,
            "epoch_seconds": time.perf_counter() - started,
        }
        reporter.report(epoch, metrics)
        if epoch == 2 and config.number == 1 and config.options.get("fill"):
            _fill_once(*config.options["fill"])
        save_checkpoint(path, {"epoch": epoch, "history": [*state["history"], metrics], "pad": b"x" * 4096})
        state = load_checkpoint(path) or state
    return dict(state["history"][-1])


def _fill_once(folder: str, marker: str) -> None:
    if Path(marker).exists():
        return
    Path(marker).write_text("filled")
    with open(Path(folder, "filler"), "wb", buffering=0) as fh:
        try:
            while True:
                fh.write(b"\0" * 65536)
                fh.flush()
        except OSError:
            pass
