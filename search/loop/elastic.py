"""The ``[elastic]`` policy: a trial's segments end at the pruner's rungs; one that passes a rung (promoted) goes on
at the next wider width where its goodput gains enough per slot, with its batch and learning rate after the spec.

At each rung the trial's checkpoint ends its segment; its next segment (a ``resize``, or a ``continue`` at the
same width) starts from that checkpoint at the new width: a new run with a new rendezvous, on one worker or
across workers, examples seen, optimizer, schedule and RNG states carried by the checkpoint (the trainer's
``resume``). With ``batch = "fixed"`` the global batch and the learning rate stay (each replica's share shrinks);
with ``batch = "grow"`` each replica's batch stays and the learning rate is the trial's own rate after
``lr_rule`` for the grown global batch (from the trial's base parameters, so rules do not compound).

Whether a grow is worth its slots is :func:`search.elastic.allocate.grow`'s choice for this one trial, from the
step times it measured at each width (its reports' ``steps`` and worker times) and its last measured gradient
noise scale (``b_simple``). The slots themselves are the dispatcher's: a segment wider than the free slots
waits for them like any task, and one wider than all the workers together goes on at its width.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

from cluster.goodput import Goodput, StepTime, adascale_gain, fit_step_model
from cluster.outcome import Outcome
from search.elastic.allocate import Candidate, grow, shrink
from search.loop.policies import Decision, NextSegment
from search.loop.segments import Segment, Stop, following, lr_for_batch, segment_config
from search.loop.trials import TrialView
from search.spec.campaign_spec import PrunerSpec
from search.spec.elastic import ElasticSpec
from search.store.records import Attr
from search.vocab.terms import Transition
from trainers.api import TrialConfig

__all__ = ["ElasticGrowth", "elastic_policies", "rung_epochs", "step_times", "NOISE", "BATCH", "LR"]

NOISE = "b_simple"  # the trainer's measured gradient noise scale (noise_scale_every)
BATCH = "batch_size"  # the global batch parameter
LR = "lr"


def rung_epochs(min_resource: int, reduction_factor: int, epochs: int) -> tuple[int, ...]:
    """The ASHA rungs below ``epochs``: ``min_resource x reduction_factor^k`` (``min_resource`` 0: one epoch)."""
    first = max(1, min_resource)
    rungs = []
    rung = first
    while rung < epochs:
        rungs.append(rung)
        rung *= max(2, reduction_factor)
    return tuple(rungs)


class ElasticGrowth:
    """Segments at the rungs; a promoted trial grows (see the module's docstring)."""

    def __init__(self, spec: ElasticSpec, rungs: Sequence[int]) -> None:
        self.spec, self.rungs = spec, tuple(rungs)

    def first_segment(self, config: TrialConfig) -> TrialConfig:
        end = self._next_end(0, config.epochs)
        if end >= config.epochs:
            return config
        return dataclasses.replace(config, epochs=end, schedule_epochs=config.schedule_epochs or config.epochs)

    def on_report(self, running: TrialView, metrics: Mapping[str, float]) -> Stop | None:
        return None

    def on_finished(self, running: TrialView, outcome: Outcome) -> Decision:
        config = running.config
        total = config.schedule_epochs or config.epochs
        if not outcome.ok or running.stop_reason or config.epochs >= total:
            return None  # failed, pruned at its rung, or at its end: the other policies decide
        width = self._width_after(running)
        overrides = self._overrides(running, width)
        nxt = segment_config(config, width, overrides, self._next_end(config.epochs, total))
        how = Transition.RESIZE if width != running.width else Transition.CONTINUE
        record = [*running.trial.user_attrs.get(Attr.ELASTIC, []), self._record(running, outcome)]
        segment = following(running.segment(), how, config, nxt, running.examples())
        return NextSegment(nxt, segment, {Attr.ELASTIC: record})

    def narrower_retry(self, running: TrialView, room: int) -> tuple[int, NextSegment] | None:
        """A lost run's retry at the widest width that fits ``room`` slots (the workers left): the epoch its segment
        is cut at (its last report's; the checkpoint there) and the segment that goes on from there to the cut
        one's end. None when its width fits, or no width does."""
        fitting = [w for w in self.spec.widths if w <= room]
        if running.width <= room or not fitting:
            return None
        width, config, cut = fitting[-1], running.config, _last_epoch(running)
        nxt = segment_config(config, width, self._overrides(running, width), config.epochs)
        before = dataclasses.replace(config, epochs=cut)
        return cut, NextSegment(nxt, following(running.segment(), Transition.RESIZE, before, nxt, running.examples()))

    def give_back(self, running: TrialView, step: NextSegment, free: int, waiting: int) -> NextSegment:
        """``step`` (a grown trial's next segment) narrower, with ``shrink = true``, where trials wait for ``waiting``
        slots that the ``free`` ones (its own included) cannot hold beside it: as few slots given back as cost it
        least speedup (:func:`search.elastic.allocate.shrink`)."""
        short = step.segment.width + waiting - free
        if not self.spec.shrink or waiting <= 0 or short <= 0 or running.width <= self.spec.start_width:
            return step
        candidate = Candidate(running.number, step.segment.width, self._goodput(running))
        width = shrink([candidate], short, self.spec.widths).get(running.number, step.segment.width)
        if width == step.segment.width:
            return step
        config = running.config
        nxt = segment_config(config, width, self._overrides(running, width), step.config.epochs)
        return NextSegment(
            nxt, following(running.segment(), Transition.RESIZE, config, nxt, running.examples()), step.attrs
        )

    # --- the parts --------------------------------------------------------------------------------

    def _next_end(self, after: int, total: int) -> int:
        return min([r for r in self.rungs if r > after] or [total])

    def _width_after(self, running: TrialView) -> int:
        wider = [w for w in self.spec.widths if running.width < w <= self.spec.most_slots]
        if not wider:
            return running.width
        candidate = Candidate(running.number, running.width, self._goodput(running))
        chosen = grow([candidate], free=wider[0] - running.width, widths=self.spec.widths, reserve=0)
        return chosen.get(running.number, running.width)

    def _overrides(self, running: TrialView, width: int) -> dict[str, float | int]:
        if self.spec.batch == "fixed" or width == running.width:
            return {}
        base = running.config.base_params or running.config.params
        batch = int(base[BATCH])
        new_batch = batch * width // self.spec.start_width
        lr = float(base[LR])
        if self.spec.lr_rule == "adascale":
            noise = _last_noise(running)
            new_lr = lr * adascale_gain(new_batch / batch, batch, batch if noise is None else noise)
        else:
            new_lr = lr_for_batch(lr, batch, new_batch, str(self.spec.lr_rule))
        return {BATCH: new_batch, LR: new_lr}

    def _record(self, running: TrialView, outcome: Outcome) -> dict[str, float | int | None]:
        """The segment that ended: its width, batch, lr, examples/s over its run (its start and rendezvous
        included) and statistical efficiency relative to the trial's first batch."""
        params = running.config.params
        seen, start = running.examples(), running.segment().examples or 0
        seconds = (outcome.finished or 0.0) - (outcome.started or 0.0)
        rate = (seen - start) / seconds if seen is not None and seconds > 0 else None
        return {
            "segment": running.segment().index,
            "width": running.width,
            "batch": int(params[BATCH]) if BATCH in params else None,
            "lr": float(params[LR]) if LR in params else None,
            "examples_per_second": rate,
            "efficiency": self._goodput(running).efficiency(running.width),
        }

    def _goodput(self, running: TrialView) -> Goodput:
        base = running.config.base_params or running.config.params
        batch = float(base.get(BATCH, 1))
        measured = step_times(running, batch, self.spec.batch == "grow", self.spec.start_width)
        one = batch / self.spec.start_width if self.spec.batch == "grow" else batch  # the global batch at width 1
        model = fit_step_model(measured or [StepTime(1, one, 1.0)])  # none measured: AdaptDL's prior, no all-reduce
        return Goodput(model, batch, self.spec.start_width, self.spec.batch == "grow", _last_noise(running))


def _last_noise(running: TrialView) -> float | None:
    for _step, metrics, _t in reversed(running.reports):
        value = metrics.get(NOISE)
        if value is not None and math.isfinite(value) and value >= 0:
            return float(value)
    return None


def _last_epoch(running: TrialView) -> int:
    """The epoch of its last report within its current segment (none there: the segment's start)."""
    start = running.segment().start_epoch
    epochs = [int(m["epoch"]) for _s, m, _t in running.reports if "epoch" in m]
    return max([start, *(e for e in epochs if e < running.config.epochs)])


def _width_at(segments: Sequence[Segment], epoch: float, width: int) -> int:
    """The width the trial ran at when it reported ``epoch`` (its segments' record; none: ``width``)."""
    at = [s.width for s in segments if s.start_epoch < epoch]
    return at[-1] if at else width


def step_times(running: TrialView, base_batch: float, grows: bool, start_width: int) -> list[StepTime]:
    """Seconds per step between consecutive reports of the same width (the first report of each run is left
    out: it holds the run's start)."""
    out: list[StepTime] = []
    previous: tuple[int, float, float, float] | None = None  # width, epoch, steps, time
    for _step, metrics, t in running.reports:
        if "steps" not in metrics or "epoch" not in metrics:
            previous = None
            continue
        width = _width_at(running.segments, metrics["epoch"], running.width)
        now = (width, metrics["epoch"], metrics["steps"], t)
        if previous is not None and previous[0] == width and now[2] > previous[2] and now[3] > previous[3]:
            batch = base_batch * width / start_width if grows else base_batch
            out.append(StepTime(width, batch / width, (now[3] - previous[3]) / (now[2] - previous[2])))
        previous = now
    return out


def elastic_policies(elastic: ElasticSpec | None, pruning: PrunerSpec, epochs: int) -> list[ElasticGrowth]:
    """The policy of a spec's ``[elastic]`` table (none without one), its segments ending at the ``[pruner]``'s
    rungs within the trainer's ``epochs``."""
    if elastic is None:
        return []
    return [ElasticGrowth(elastic, rung_epochs(pruning.min_resource, pruning.reduction_factor, epochs))]
