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

With ``grow = "goodput"`` a trial runs in one segment (at the rungs too, unless ``shrink``) until slots sit idle:
then :meth:`ElasticGrowth.widen_idle` picks, among all the running trials, those to widen by goodput per slot
(:func:`~search.elastic.allocate.grow` over them all at once); each one's segment ends at its next report (a
``resize`` stop, its checkpoint there) and its next one takes the slots the room then has
(:meth:`ElasticGrowth.fit_room`). The slots promised to a trial whose stop is under way are not given twice.

With ``grow = "pbt"`` no segment ends here: a PBT member's segments end at the population's rungs, and when a rung
is decided :class:`~search.loop.barrier.Barrier` asks :meth:`ElasticGrowth.widen_survivors` which survivors widen
into the slots the population's next segments leave idle (the global batch fixed: the width changes speed only).

With ``grow = "goodput"`` and a rung pruner (``asha``, ``hyperband``), a trial past the last rung (no rung stops it
before its last epoch: the examples it has left are known) may also take slots that come free while new trials wait
(:meth:`ElasticGrowth.hurry`, :func:`search.elastic.allocate.hurry`): where the seconds its result comes sooner,
weighed by the chance that it is the search's best, exceed the delay that the extra slot-seconds of all the trials
expected past the last rung (``n_trials / reduction_factor^rungs``, at least 1; that chance is one over them),
hurried alike, cause a result queued behind them; its goodput from AdaptDL's prior (half a step fixed) until it
has measured a second per-replica batch. The slots are held from new trials (:meth:`ElasticGrowth.held_slots`) until its resize begins.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence

from cluster.goodput import Goodput, StepTime, adascale_gain, fit_step_model
from cluster.outcome import Outcome
from search.elastic.allocate import Candidate, Finishing, grow, hurry, shrink
from search.loop.policies import Decision, NextSegment
from search.loop.segments import Segment, Stop, following, lr_for_batch, segment_config
from search.loop.trials import TrialView
from search.spec.campaign_spec import PrunerSpec
from search.spec.elastic import ElasticSpec
from search.store.records import Attr
from search.vocab.terms import Transition
from trainers.api import TrialConfig

GROW_STOP = "grow into idle slots"  # the reason of a resize stop that ends a segment for idle slots
HURRY_STOP = "grow past the last rung"  # the reason of a resize stop for a trial that runs to its last epoch

__all__ = [
    "ElasticGrowth",
    "elastic_policies",
    "rung_epochs",
    "step_times",
    "NOISE",
    "BATCH",
    "LR",
    "GROW_STOP",
    "HURRY_STOP",
]

NOISE = "b_simple"  # the trainer's measured gradient noise scale (noise_scale_every)
BATCH = "batch_size"  # the global batch parameter
LR = "lr"
ADAPTDL_FIXED = 0.5  # AdaptDL's prior: half a step fixed until a second per-replica batch is measured
RUNG_PRUNERS = ("asha", "hyperband")  # past their last rung below the end, a trial runs to its last epoch


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

    def __init__(self, spec: ElasticSpec, rungs: Sequence[int], finishers: float | None = None) -> None:
        """``finishers``: the trials expected past the last of the pruner's ``rungs`` (None: no rung pruner, so no
        trial is sure to run to its end and none is hurried)."""
        self.spec = spec
        self.idle = spec.grow == "goodput"  # grows into idle slots, at any epoch boundary
        self.pbt = spec.grow == "pbt"  # PBT's own segments end at its rungs: widen_survivors, none cut here
        self.rungs = () if self.pbt or (self.idle and not spec.shrink) else tuple(rungs)  # goodput: only to shrink
        self.last_rung = max(rungs, default=0) if finishers is not None else 0  # 0: no trial is hurried
        self.share = 1.0 / max(1.0, finishers or 1.0)  # the chance a trial past the last rung ends the best
        self._granted: dict[int, int] = {}  # trial -> the width hurry gave it, for its next segment
        self._intent: dict[int, int] = {}  # trial -> the slots hurry holds for it until they are free
        self._promised: dict[int, int] = {}  # trial -> slots it will add once its resize stop ends its segment
        self._looked: tuple[int, int, frozenset[tuple[int, int]]] | None = None  # the room of the last look

    def first_segment(self, config: TrialConfig) -> TrialConfig:
        end = self._next_end(0, config.epochs)
        if end >= config.epochs:
            return config
        return dataclasses.replace(config, epochs=end, schedule_epochs=config.schedule_epochs or config.epochs)

    def on_report(self, running: TrialView, metrics: Mapping[str, float]) -> Stop | None:
        return None

    def on_finished(self, running: TrialView, outcome: Outcome) -> Decision:
        hurried = running.number in self._promised and running.number in self._granted
        granted = self._granted.pop(running.number, running.width) if hurried else running.width
        self._granted.pop(running.number, None)
        self._promised.pop(running.number, None)
        self._intent.pop(running.number, None)
        config = running.config
        total = config.schedule_epochs or config.epochs
        resizing = running.stop_transition is Transition.RESIZE and bool(running.stop_reason)
        if self.pbt or not outcome.ok or (running.stop_reason and not resizing):
            return None  # a PBT member's next segment is the population's; failed, pruned: the others decide
        reached = _reached(running)
        cut = reached if resizing and running.segment().start_epoch < reached < config.epochs else config.epochs
        if cut >= total:
            return None  # at its end: the other policies decide
        width = granted if self.idle else self._width_after(running)  # goodput: else by the room (fit_room)
        end = config.epochs if cut < config.epochs else self._next_end(cut, total)
        nxt = segment_config(config, width, self._overrides(running, width), end)
        how = Transition.RESIZE if width != running.width else Transition.CONTINUE
        record = [*running.trial.user_attrs.get(Attr.ELASTIC, []), self._record(running, outcome)]
        before = dataclasses.replace(config, epochs=cut)
        segment = following(running.segment(), how, before, nxt, running.examples())
        return NextSegment(nxt, segment, {Attr.ELASTIC: record})

    def widen_idle(self, running: Sequence[TrialView], free: int, waiting: int) -> dict[int, Stop]:
        """``grow = "goodput"``: of the ``running`` trials, those to widen into the ``free`` slots the trials that wait
        (for ``waiting`` slots) and the reserve leave idle, by goodput per slot over them all: ``{trial: the resize
        stop that ends its segment at its next report}``. Their slots stay promised until their segments end."""
        spare = self._spare(free, waiting, None)
        if not self.idle or spare < 1:
            return {}
        candidates = [Candidate(v.number, v.width, self._goodput(v)) for v in running if self._may_widen(v)]
        chosen = grow(candidates, spare, self.spec.widths, 0, self.spec.most_slots, self.spec.min_gain)
        widths = {v.number: v.width for v in running}
        self._promised.update({n: w - widths[n] for n, w in chosen.items()})
        return {n: Stop(f"{GROW_STOP}: to {w} slots", Transition.RESIZE) for n, w in sorted(chosen.items())}

    def widen_survivors(self, survivors: Sequence[TrialView], free: int, waiting: int) -> dict[int, int]:
        """``grow = "pbt"``: of a decided rung's ``survivors`` (at the widths their next segments take), those to widen
        into the ``free`` slots the population's next segments leave idle beside trials that wait (for ``waiting``
        slots) and, while any wait, the reserve, by goodput per slot over them all: ``{trial: its new width}``."""
        spare = self._spare(free, waiting, None)
        if not self.pbt or spare < 1:
            return {}
        candidates = [Candidate(v.number, v.width, self._goodput(v)) for v in survivors]
        return dict(grow(candidates, spare, self.spec.widths, 0, self.spec.most_slots, self.spec.min_gain))

    def hurry(self, running: Sequence[TrialView], free: int, slots: int, now: float) -> dict[int, Stop]:
        """``grow = "goodput"`` with a rung pruner: of the ``running`` trials past the last rung, those to widen even
        while new trials wait, by expected time to the search's best result (:func:`search.elastic.allocate.hurry`,
        over the slots that trials not past the last rung hold: those come free as they end). The slots a trial is
        to take are held from new trials from then on; once they are ``free``, its resize stop: ``{trial: stop}``
        (the cluster has ``slots``)."""
        if not self.idle or self.last_rung < 1 or slots < 1:
            return {}
        past = [v for v in running if _reached(v) >= self.last_rung]
        taken = sum(v.width for v in past) + self.held_slots()
        finishing = [f for v in past if self._may_widen(v) and (f := self._finishing(v, now)) is not None]
        if slots - taken >= 1 and finishing:
            chosen = hurry(finishing, slots - taken, slots, self.spec.widths, self.share, self.spec.most_slots)
            widths = {v.number: v.width for v in running}
            self._intent.update({n: w - widths[n] for n, w in chosen.items()})
            self._granted.update(chosen)
        gains = {n: self._gain(v, slots, now) for v in past if (n := v.number) in self._intent}
        return self._ready(free, sorted(self._intent, key=lambda n: (-gains.get(n, 0.0), n)))

    def _gain(self, running: TrialView, slots: int, now: float) -> float:
        """The expected time-to-best gain per slot of the width hurry gave ``running``, as things stand now."""
        f = self._finishing(running, now)
        width = self._granted.get(running.number, running.width)
        return f.net(width, slots, self.share) / max(1, width - running.width) if f is not None else 0.0

    def _ready(self, free: int, order: Sequence[int]) -> dict[int, Stop]:
        """The resize stops of the trials (in ``order``) whose held slots are ``free`` now (besides those promised
        already)."""
        room, stops = free - self.promised_slots(), {}
        for number in order:
            if self._intent[number] <= room:
                room -= self._intent[number]
                self._promised[number] = self._intent.pop(number)
                stops[number] = Stop(f"{HURRY_STOP}: to {self._granted[number]} slots", Transition.RESIZE)
        return stops

    def held_slots(self) -> int:
        """The slots promised to trials whose resize stops are under way or are to come: held from new trials."""
        return self.promised_slots() + sum(self._intent.values())

    def promised_slots(self) -> int:
        """The slots promised to trials whose resize stops are under way."""
        return sum(self._promised.values())

    def has_spare(self, free: int, waiting: int) -> bool:
        """``grow = "goodput"`` and slots idle beyond the ``waiting`` trials, the reserve and the promised slots."""
        return self.idle and self._spare(free, waiting, None) >= 1

    def worth_a_look(self, free: int, waiting: int, running: Collection[tuple[int, int]]) -> bool:
        """Whether :meth:`widen_idle` may answer otherwise than at its last look: the ``free`` slots, the
        ``waiting`` ones or the ``running`` trials it may widen (their numbers and widths) changed since."""
        looked, self._looked = self._looked, (free, waiting, frozenset(running))
        return looked != self._looked

    def fit_room(self, running: TrialView, step: NextSegment, free: int, waiting: int) -> NextSegment:
        """``step`` (the trial's next segment) as the room has it: narrower where trials wait (:meth:`give_back`);
        with ``grow = "goodput"``, wider into the slots the ``free`` ones (its own included) leave idle beside the
        ``waiting`` trials, the reserve and the slots promised to others."""
        if self.idle and step.segment.width > running.width:  # hurried: its slots were held for it
            fitting = max([w for w in self.spec.widths if w <= max(free, running.width)], default=running.width)
            return step if step.segment.width <= fitting else self._rewidth(running, step, max(fitting, running.width))
        narrower = self.give_back(running, step, free, waiting)
        if not self.idle or narrower.segment.width < step.segment.width:
            return narrower
        spare = self._spare(free - step.segment.width, waiting, running.number)
        if spare < 1:
            return step
        candidate = Candidate(running.number, step.segment.width, self._goodput(running))
        chosen = grow([candidate], spare, self.spec.widths, 0, self.spec.most_slots, self.spec.min_gain)
        return self._rewidth(running, step, chosen[running.number]) if chosen else step

    def narrower_retry(self, running: TrialView, room: int) -> tuple[int, NextSegment] | None:
        """A lost run's retry at the widest width that fits ``room`` slots (the workers left): the epoch its segment
        is cut at (its last report's; the checkpoint there) and the segment that goes on from there to the cut
        one's end (one whose last epoch was reported before its run was lost: on to the next segment's end). None
        when its width fits, or no width does."""
        fitting = [w for w in self.spec.widths if w <= room]
        if running.width <= room or not fitting:
            return None
        width, config = fitting[-1], running.config
        total = config.schedule_epochs or config.epochs
        cut = _reached(running) if _reached(running) < total else _last_epoch(running)
        end = config.epochs if cut < config.epochs else self._next_end(cut, total)
        nxt = segment_config(config, width, self._overrides(running, width), end)
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
        return step if width == step.segment.width else self._rewidth(running, step, width)

    # --- the parts --------------------------------------------------------------------------------

    def _rewidth(self, running: TrialView, step: NextSegment, width: int) -> NextSegment:
        """``step`` at ``width`` (from the same epoch), its batch and learning rate after the spec."""
        config = segment_config(running.config, width, self._overrides(running, width), step.config.epochs)
        changed = {k: v for k, v in config.params.items() if running.config.params.get(k) != v}
        how = Transition.RESIZE if width != running.width else Transition.CONTINUE
        return NextSegment(
            config, dataclasses.replace(step.segment, width=width, overrides=changed, transition=how), step.attrs
        )

    def _spare(self, free: int, waiting: int, besides: int | None) -> int:
        """The ``free`` slots that trials waiting for ``waiting`` slots, the reserve (while any wait) and the slots
        promised to trials other than ``besides`` leave idle."""
        promised = sum(extra for number, extra in self._promised.items() if number != besides)
        promised += sum(self._intent.values())
        return free - max(0, waiting) - (self.spec.reserve if waiting > 0 else 0) - promised

    def _may_widen(self, running: TrialView) -> bool:
        """Running (started), not stopping, narrower than it may be, and an epoch to go after its next report."""
        total = running.config.schedule_epochs or running.config.epochs
        return (
            running.started_at is not None
            and not running.stop_reason
            and running.width < self.spec.most_slots
            and running.number not in self._promised
            and running.number not in self._intent
            and total - _reached(running) >= 2
        )

    def _finishing(self, running: TrialView, now: float) -> Finishing | None:
        """``running`` as a :class:`Finishing` trial when it is past the last rung, may widen and reports examples;
        else None. Its restart: its current run's first report's time less one epoch at its goodput."""
        reached = _reached(running)
        total = running.config.schedule_epochs or running.config.epochs
        if reached < max(1, self.last_rung) or total - reached < 2:
            return None
        seen = running.examples()
        if not seen or running.started_at is None:
            return None
        per_epoch = seen / reached
        goodput = self._goodput(running, ADAPTDL_FIXED)  # taking slots from waiting trials: not the optimistic prior
        epoch = per_epoch / goodput(running.width)
        runs = [t for _s, m, t in running.reports if t >= running.started_at and "epoch" in m]
        restart = max(0.0, runs[0] - running.started_at - epoch) if runs else 0.0
        until = max(0.0, runs[-1] + epoch - now) if runs else epoch
        candidate = Candidate(running.number, running.width, goodput)
        return Finishing(candidate, (total - reached - 1) * per_epoch, restart, until)

    def _next_end(self, after: int, total: int) -> int:
        return min([r for r in self.rungs if r > after] or [total])

    def _width_after(self, running: TrialView) -> int:
        wider = [w for w in self.spec.widths if running.width < w <= self.spec.most_slots]
        if not wider:
            return running.width
        candidate = Candidate(running.number, running.width, self._goodput(running))
        chosen = grow([candidate], wider[0] - running.width, self.spec.widths, 0, None, self.spec.min_gain)
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

    def _goodput(self, running: TrialView, fixed_share: float = 0.0) -> Goodput:
        """Its goodput per width from the step times it measured; ``fixed_share``: the prior's fixed part of a step
        while one per-replica batch is measured (:func:`~cluster.goodput.fit_step_model`)."""
        base = running.config.base_params or running.config.params
        batch = float(base.get(BATCH, 1))
        measured = step_times(running, batch, self.spec.batch == "grow", self.spec.start_width)
        one = batch / self.spec.start_width if self.spec.batch == "grow" else batch  # the global batch at width 1
        model = fit_step_model(measured or [StepTime(1, one, 1.0)], fixed_share)  # none measured: no all-reduce
        return Goodput(model, batch, self.spec.start_width, self.spec.batch == "grow", _last_noise(running))


def _last_noise(running: TrialView) -> float | None:
    for _step, metrics, _t in reversed(running.reports):
        value = metrics.get(NOISE)
        if value is not None and math.isfinite(value) and value >= 0:
            return float(value)
    return None


def _reached(running: TrialView) -> int:
    """The epoch of its last report within its current segment (its checkpoint's; none there: the segment's start)."""
    start = running.segment().start_epoch
    return max([start, *(int(m["epoch"]) for _s, m, _t in running.reports if "epoch" in m)])


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
    """Seconds per step at each report: the trainer's own ``epoch_seconds`` over the epoch's steps where it reports
    them (so a one-epoch segment is measured too, its start-up left out), else the time between consecutive
    reports of the same width (the first report of each run left out: it holds the run's start)."""
    out: list[StepTime] = []
    previous: tuple[int, float, float, float] | None = None  # width, epoch, steps, time
    for _step, metrics, t in running.reports:
        if "steps" not in metrics or "epoch" not in metrics:
            previous = None
            continue
        width = _width_at(running.segments, metrics["epoch"], running.width)
        now = (width, metrics["epoch"], metrics["steps"], t)
        batch = base_batch * width / start_width if grows else base_batch
        seconds = _epoch_step_seconds(metrics, previous)
        if seconds is None and previous is not None and previous[0] == width and now[2] > previous[2]:
            seconds = (now[3] - previous[3]) / (now[2] - previous[2])
        if seconds is not None and seconds > 0:
            out.append(StepTime(width, batch / width, seconds))
        previous = now
    return out


def _epoch_step_seconds(metrics: Mapping[str, float], previous: tuple[int, float, float, float] | None) -> float | None:
    """``epoch_seconds`` over the steps of that one epoch (since the report before, or since step 0 at epoch 1);
    None where the trainer does not report it or the steps before are not known."""
    seconds = metrics.get("epoch_seconds")
    if seconds is None:
        return None
    if previous is not None and metrics["epoch"] == previous[1] + 1:
        before = previous[2]
    elif previous is None and metrics["epoch"] == 1:
        before = 0.0
    else:
        return None
    steps = metrics["steps"] - before
    return float(seconds) / steps if steps > 0 else None


def elastic_policies(
    elastic: ElasticSpec | None, pruning: PrunerSpec, epochs: int, pruner: str = "", n_trials: int = 0
) -> list[ElasticGrowth]:
    """The policy of a spec's ``[elastic]`` table (none without one), its segments ending at the ``[pruner]``'s
    rungs within the trainer's ``epochs``; with a rung ``pruner`` (``asha``, ``hyperband``), the trials expected
    past its last rung out of ``n_trials``: ``n_trials / reduction_factor^rungs``."""
    if elastic is None:
        return []
    rungs = rung_epochs(pruning.min_resource, pruning.reduction_factor, epochs)
    finishers = n_trials / pruning.reduction_factor ** len(rungs) if pruner in RUNG_PRUNERS and n_trials else None
    return [ElasticGrowth(elastic, rungs, finishers)]
