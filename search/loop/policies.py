"""The policy seam: what may stop a trial early, and what happens when one ends.

A policy sees two moments of a trial (as Syne Tune's schedulers and Dask's
``AdaptiveCore`` do) and the campaign asks each in turn; the first that answers
decides. A policy gets a frozen :class:`~search.loop.trials.TrialView` (as Optuna's
hooks get a ``FrozenTrial``) and changes nothing: what is to be written comes back with
its decision, and the campaign, the one owner of the trial's state, applies it.

A trial's life is a sequence of segments (:mod:`search.loop.segments`); what follows a segment is one
typed :class:`~search.vocab.terms.Transition` (``continue``, ``resize``, ``exploit``, ``prune``,
``target reached``).

- ``on_report(trial, metrics) -> Stop | None``: the trial's segment ends at its next report, and the
  :class:`~search.loop.segments.Stop`'s transition says what follows (``prune``: told PRUNED with its reason;
  ``target reached``: told COMPLETE by its policy; ``resize``: a next segment its policy starts), or None.
- ``on_finished(trial, outcome) -> Resubmit | NextSegment | Verdict | Halt | Park | Note | None``: run the same
  segment again (a retry; whether the re-run is counted as a retry or a free re-send, and the attributes to
  record), start the trial's next segment (:class:`NextSegment`: a resize, its width and overrides), the verdict
  to tell, stop the campaign (a full disk), park it, or leave it to the next policy (None, or a :class:`Note` of
  attributes to record; last comes the campaign's default verdict: the spec's metrics).
  :func:`decide` asks them in turn and returns a :class:`Ruling`: the decision and the attributes.
- A policy that ends segments at set epochs (a rung) also plans each trial's first segment
  (:class:`PlansSegments`: ``first_segment(config) -> config``, asked before the trial is sent).

A new scheduling rule (ASHA's promotions, a budget per rung, a resize at a rung, ...) is one more class
here, added in :func:`policies_for` (or, from the API, a policy in ``CampaignHooks.policies``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import optuna
from optuna.trial import TrialState

from cluster.executor import CANCELLED, LOST, Outcome
from search.loop.intermediate import IntermediateValues
from search.loop.oom import OOM_CONSTRAINT, OUT_OF_MEMORY
from search.loop.segments import Segment, Stop
from search.loop.trials import Prepared, TrialView
from search.pbt.policy import PBTPolicy
from search.pbt.population import Population
from search.sampling.samplers import sampler_info
from search.sampling.seeds import component_seed
from search.spec.campaign_spec import CampaignSpec
from search.store.folder import CampaignFolder
from search.store.records import Attr
from search.vocab.terms import StopReason, Transition, maximizing
from trainers.api import TrialConfig

if TYPE_CHECKING:  # search.scaling (scipy, pandas) is imported by a scaling sweep only: a controller starts faster
    from search.scaling.target import TargetGoal

__all__ = [
    "Policy",
    "PlansSegments",
    "Stop",
    "Resubmit",
    "NextSegment",
    "Verdict",
    "Halt",
    "Park",
    "Note",
    "OutOfMemory",
    "Decision",
    "Ruling",
    "TARGET_REACHED",
    "HaltOnDiskErrors",
    "KilledTrials",
    "RetryLostTrials",
    "PopulationSegments",
    "ScalingTarget",
    "Pruning",
    "population_of",
    "policies_for",
    "first_stop",
    "first_segments",
    "decide",
]

log = logging.getLogger(__name__)

TARGET_REACHED = StopReason.TARGET_REACHED


@dataclasses.dataclass(frozen=True)
class Resubmit:
    """Run the trial's segment again (same number, same slot width) with ``config``.

    ``requeue``: a free re-send (it only shared a lost or killed worker); ``retry``: charged as a retry;
    ``attrs``: user attributes to record on the trial first.
    """

    config: TrialConfig
    requeue: bool = False
    retry: bool = False
    attrs: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class NextSegment:
    """Start the trial's next segment: ``config`` (its width, overrides and end), described by ``segment``
    (recorded in the trial's ``segments``); ``attrs``: user attributes to record on the trial first."""

    config: TrialConfig
    segment: Segment
    attrs: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.segment.transition.ends or self.segment.transition is Transition.START:
            raise ValueError(f"a next segment begins by continue, resize or exploit, not {self.segment.transition!r}")
        if self.segment.width != self.config.data_parallel:
            raise ValueError(
                f"segment width {self.segment.width} != its config's data_parallel {self.config.data_parallel}"
            )


@dataclasses.dataclass(frozen=True)
class Verdict:
    """What to tell the study about a finished trial."""

    state: TrialState
    values: tuple[float, ...] = ()
    reason: str = ""
    attrs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """User attributes to record on the trial first."""
    constraints: Mapping[str, float] = dataclasses.field(default_factory=dict)
    """Constraint values to set (``Trial.set_constraint``; > 0: infeasible for a sampler that reads them)."""


@dataclasses.dataclass(frozen=True)
class Halt:
    """Stop the campaign (one line, exit status 1), keeping this trial and every other unfinished one for ``resume``."""

    reason: str


@dataclasses.dataclass(frozen=True)
class Park:
    """The trial waits, holding no slot, for the campaign to send it on (a PBT member at its rung)."""

    outcome: Outcome


@dataclasses.dataclass(frozen=True)
class Note:
    """No decision (the next policy decides), but user attributes to record on the trial."""

    attrs: Mapping[str, Any]


Decision = Resubmit | NextSegment | Verdict | Halt | Park | Note | None


@dataclasses.dataclass(frozen=True)
class Ruling:
    """What the policies decided about a finished trial, and every attribute they asked to record."""

    decision: Resubmit | NextSegment | Verdict | Halt | Park | None
    attrs: Mapping[str, Any]
    constraints: Mapping[str, float] = dataclasses.field(default_factory=dict)


class Policy(Protocol):
    def on_report(self, running: TrialView, metrics: Mapping[str, float]) -> Stop | None: ...

    def on_finished(self, running: TrialView, outcome: Outcome) -> Decision: ...


@runtime_checkable
class PlansSegments(Protocol):
    """A policy that ends segments at set epochs: where a trial's first segment ends (and the LR schedule's
    whole span, ``schedule_epochs``), before it is sent. Not its width: that is the space's."""

    def first_segment(self, config: TrialConfig) -> TrialConfig: ...


class HaltOnDiskErrors:
    """A trial that failed because its storage did (full, read-only) is not the trial's fault: the campaign stops
    with it unfinished, so that ``resume``, once there is space, runs it again instead of keeping a FAIL."""

    def __init__(self, folder: CampaignFolder) -> None:
        self.folder = folder

    def on_report(self, running: TrialView, metrics: Mapping[str, float]) -> Stop | None:
        return None

    def on_finished(self, running: TrialView, outcome: Outcome) -> Decision:
        if not outcome.disk_error:
            return None
        where = f" on {outcome.host}" if outcome.host else ""
        return Halt(
            f"trial {running.number} stopped by a disk error{where} ({outcome.error}); unfinished trials "
            f"are kept: free space, then 'hypersweep resume {self.folder.root}'"
        )


class OutOfMemory:
    """PRUNED with reason "out of memory", infeasible for a sampler that reads constraints; never retried as a loss
    (it comes before :class:`RetryLostTrials`: a worker killed near its memory limit ran out of memory)."""

    def __init__(self, constrained: bool) -> None:
        self.constrained = constrained

    def on_report(self, running: TrialView, metrics: Mapping[str, float]) -> Stop | None:
        return None

    def on_finished(self, running: TrialView, outcome: Outcome) -> Decision:
        if not outcome.oom:
            return None
        attrs: dict[str, Any] = {Attr.OUT_OF_MEMORY: outcome.error or OUT_OF_MEMORY}
        if outcome.traceback:
            attrs[Attr.TRACEBACK] = outcome.traceback[-20_000:]
        constraints = {OOM_CONSTRAINT: 1.0} if self.constrained else {}
        return Verdict(TrialState.PRUNED, (), OUT_OF_MEMORY, attrs=attrs, constraints=constraints)


class KilledTrials:
    """A trial killed for ignoring a time limit's stop request gets its verdict; the trials killed with it run again.

    The killed one is PRUNED with the kill as its reason when it reported something (its
    intermediate values stand), else FAIL. A trial that only shared its worker (or its batch task)
    is sent again for free, from its checkpoint, unless it was itself asked to stop: then it is
    PRUNED (or FAIL) with its own stop reason.
    """

    def on_report(self, running: TrialView, metrics: Mapping[str, float]) -> Stop | None:
        return None

    def on_finished(self, running: TrialView, outcome: Outcome) -> Decision:
        if running.killed:
            return _ended_without_result(running, running.killed)
        if not running.collateral or outcome.status not in (LOST, CANCELLED):
            return None
        if _ending(running):
            return _ended_without_result(running, f"{running.stop_reason} (its worker was restarted)")
        log.info("trial %d ended with another trial's worker; sent again (not a retry)", running.number)
        return Resubmit(running.config, requeue=True)


def _ending(running: TrialView) -> bool:
    """Asked to stop for good: a scaling sweep's target reached is not (its value is the steps it took, known only
    once it ends: a trial whose worker is lost after the target runs again from its checkpoint to the same report,
    rather than counting as never reached, so a sweep's result does not depend on a worker lost under load)."""
    return bool(running.stop_reason) and running.stop_transition is not Transition.TARGET_REACHED


def _ended_without_result(running: TrialView, reason: str) -> Verdict:
    """PRUNED when it reported (its intermediate values stand) or never started; FAIL when it ran and said nothing."""
    pruned = bool(running.reports) or running.started_at is None
    return Verdict(TrialState.PRUNED if pruned else TrialState.FAIL, (), reason)


class RetryLostTrials:
    """A trial whose worker died runs again elsewhere (from its last checkpoint), up to ``max_retries`` times.

    Only a trial that had started is charged a retry: one that was only queued on the lost worker
    (or waiting behind another trial of its batch), or whose worker's batch job reached its walltime (the job
    ended, the trial did not fail), is sent again for free, at most ``MAX_REQUEUES`` times.
    """

    MAX_REQUEUES = 10

    def __init__(self, max_retries: int) -> None:
        self.max_retries = max_retries

    def on_report(self, running: TrialView, metrics: Mapping[str, float]) -> Stop | None:
        return None

    def on_finished(self, running: TrialView, outcome: Outcome) -> Decision:
        if outcome.status != LOST:
            return None
        if _ending(running):  # it was ending anyway (pruned, out of time): no retry, its stop is the verdict
            return _ended_without_result(running, f"{running.stop_reason} (then its worker was lost)")
        if outcome.job_expired and running.requeues < self.MAX_REQUEUES:
            log.warning(
                "trial %d: its worker's batch job reached its walltime; sent again from its checkpoint (not a retry)",
                running.number,
            )
            return Resubmit(running.config, requeue=True)
        if running.started_at is None and running.requeues < self.MAX_REQUEUES:
            log.info("trial %d had not started on its lost worker; sent again (not a retry)", running.number)
            return Resubmit(running.config, requeue=True)
        if running.attempts >= self.max_retries:
            return (
                _ended_without_result(running, f"{running.stop_reason} (then its worker was lost)")
                if running.stop_reason
                else None
            )
        attempt = running.attempts + 1
        log.warning(
            "trial %d lost its worker (%s); retry %d of %d", running.number, outcome.error, attempt, self.max_retries
        )
        return Resubmit(running.config, retry=True, attrs={"retries": attempt})


class PopulationSegments:
    """Population-based training: a member that finished a segment waits at its rung (:class:`Park`), holding
    no slot, until the whole rung is decided (:class:`~search.loop.barrier.Barrier` sends its next segment)."""

    def __init__(self, population: Population) -> None:
        self.population = population

    def on_report(self, running: TrialView, metrics: Mapping[str, float]) -> Stop | None:
        return None

    def on_finished(self, running: TrialView, outcome: Outcome) -> Decision:
        if not outcome.ok or running.stop_reason:
            return None
        if not self.population.arrive(running.config, outcome.metrics):
            return Park(outcome)
        return Note(self.population.attributes(running.number, running.history()))


class ScalingTarget:
    """A batch-size scaling sweep: stop a trial once it reaches the target; its value is the steps it took."""

    def __init__(self, goal: TargetGoal) -> None:
        self.goal = goal

    def on_report(self, running: TrialView, metrics: Mapping[str, float]) -> Stop | None:
        return Stop(TARGET_REACHED, Transition.TARGET_REACHED) if self.goal.reached(metrics) else None

    def on_finished(self, running: TrialView, outcome: Outcome) -> Decision:
        if not outcome.ok or (running.stop_reason and running.stop_transition is not Transition.TARGET_REACHED):
            return None
        # the stop reason is recorded ("target reached"), so reports and reproduce know where it was stopped
        return Verdict(TrialState.COMPLETE, (self.goal.value(running.history()),), running.stop_reason)


class Pruning:
    """The study's pruner, asked at each report (single-objective studies only)."""

    def __init__(self, values: IntermediateValues, multi_objective: bool) -> None:
        self.values = values
        self.multi_objective = multi_objective

    def on_report(self, running: TrialView, metrics: Mapping[str, float]) -> Stop | None:
        if self.multi_objective or not self.values.should_prune(running.trial):
            return None
        return Stop(StopReason.PRUNED)  # the campaign records it (search.loop.stops) before the trial is asked to stop

    def on_finished(self, running: TrialView, outcome: Outcome) -> Decision:
        return None


def population_of(spec: CampaignSpec, folder: CampaignFolder, study: optuna.Study | None = None) -> Population | None:
    """The PBT population (None without a ``[pbt]`` table); its first segments are set when trials are configured.

    ``study``: where the members that ended early (FAIL, PRUNED) are found, so that no rung waits for them.
    """
    if spec.pbt is None:
        return None
    maximize = maximizing(spec.study.directions[0])
    policy = PBTPolicy(spec.pbt, maximize, spec.space.distributions(), component_seed(spec.study.seed, "pbt"))

    def left() -> set[int]:
        if study is None:
            return set()
        ended = (TrialState.FAIL, TrialState.PRUNED)
        return {t.number for t in study.get_trials(deepcopy=False, states=ended)}

    return Population(policy, folder, spec.study.metrics[0], spec.trainer.epochs, spec.study.n_trials, left)


def policies_for(
    spec: CampaignSpec,
    folder: CampaignFolder,
    population: Population | None,
    values: IntermediateValues,
    extra: Sequence[Policy] = (),
) -> list[Policy]:
    """The spec's policies, in the order they are asked (``extra``: an API user's, after the fault policies)."""
    constrained = sampler_info(spec.study.sampler).supports_constraints  # it reads an OOM trial's infeasibility
    policies: list[Policy] = [
        HaltOnDiskErrors(folder),
        OutOfMemory(constrained),
        KilledTrials(),
        RetryLostTrials(spec.study.max_retries),
        *extra,
    ]
    if population is not None:
        policies.append(PopulationSegments(population))
    if spec.scaling is not None:
        from search.scaling.outcomes import goal_of

        goal = goal_of(spec)
        if goal is not None:
            if spec.scaling.lr_grid:  # a trial past its batch size's fewest steps to target cannot be its best
                from search.loop.outpaced import Outpaced

                policies.append(Outpaced(goal))  # first: it notes every trial that reached the target
            policies.append(ScalingTarget(goal))
    policies.append(Pruning(values, spec.study.multi_objective))
    return policies


def first_stop(policies: list[Policy], running: TrialView, metrics: Mapping[str, float]) -> Stop | None:
    for policy in policies:
        stop = policy.on_report(running, metrics)
        if stop is not None:
            return stop
    return None


def first_segments(policies: list[Policy], group: list[Prepared]) -> list[Prepared]:
    """``group`` with each trial's first segment as the policies that plan segments set it (its width kept)."""
    planners = [p for p in policies if isinstance(p, PlansSegments)]
    if not planners:
        return group
    planned = []
    for prepared in group:
        config = prepared.config
        if len(prepared.segments) > 1:  # resumed in a later segment: planned when it began
            planned.append(prepared)
            continue
        for planner in planners:
            config = planner.first_segment(config) if config is not None else None
            if config is not None and config.data_parallel != prepared.width:
                raise ValueError(f"{type(planner).__name__}.first_segment changed a trial's width: the space sets it")
        planned.append(dataclasses.replace(prepared, config=config))
    return planned


def decide(policies: list[Policy], running: TrialView, outcome: Outcome) -> Ruling:
    """The first decision of ``policies`` (None: the campaign's default verdict), with every attribute to record."""
    attrs: dict[str, Any] = {}
    for policy in policies:
        decision = policy.on_finished(running, outcome)
        if isinstance(decision, Note):
            attrs.update(decision.attrs)
        elif decision is not None:
            attrs.update(decision.attrs if isinstance(decision, (Resubmit, NextSegment, Verdict)) else {})
            return Ruling(decision, attrs, decision.constraints if isinstance(decision, Verdict) else {})
    return Ruling(None, attrs)
