"""A policy's decision to stop a trial (pruned at a rung) is durable before it is acted on, and stands on resume.

The campaign records the decision in the study (user attribute ``stop_decided``: the reason and
the step it was made at), flushes the storage, and only then sends the stop request. A
controller killed after that finds, on ``resume``, a trial still RUNNING with a decision: it is
told PRUNED with that reason and its reports so far (read back from its ``metrics.jsonl``), never
run again, so no rung is decided twice and no epoch is trained past the decision.
Only a stop whose transition is ``prune`` is such a verdict. A scaling sweep's ``target reached`` is not
(the trial's value is the steps it took), nor is a stop that leads to a next segment (``resize``): those
stay as they were, and such a trial runs again from its checkpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import optuna
from optuna.trial import FrozenTrial, TrialState

from cluster.executor import OK, Outcome
from search.compat import optuna_private as op
from search.loop.intermediate import IntermediateValues
from search.loop.ledger import Ledger
from search.loop.policies import Stop, Verdict
from search.loop.trials import RunningTrial
from search.store.records import Attr, write_attrs
from search.vocab.terms import Transition
from trainers.api import TrialConfig

__all__ = ["decide_stop", "decided_stop", "settle_decided"]

log = logging.getLogger(__name__)


def decide_stop(running: RunningTrial, stop: Stop, flush: Callable[[], object]) -> None:
    """Write the decision to prune ``running`` (its reason, the step and the examples seen) into the study and
    ``flush`` the storage; only then is it logged (and, by the caller, sent). Any other stop is only logged."""
    step = running.reports[-1][0] if running.reports else -1
    if stop.transition is Transition.PRUNE:
        decided: dict[str, object] = {"reason": stop.reason, "step": step}
        examples = running.view().examples()
        if examples is not None:
            decided["examples"] = examples
        write_attrs(running.trial, **{Attr.STOP_DECIDED: decided})
        flush()
    log.info("trial %d %s at step %d", running.number, stop.reason, step)


def decided_stop(frozen: FrozenTrial) -> str:
    """The stop reason recorded for ``frozen`` before its controller died ("" when none)."""
    decision = frozen.user_attrs.get(Attr.STOP_DECIDED)
    return str(decision.get("reason") or "") if isinstance(decision, dict) else ""


def settle_decided(
    resumable: list[FrozenTrial], study: optuna.Study, reports: IntermediateValues, ledger: Ledger
) -> list[FrozenTrial]:
    """Tell PRUNED each trial left running whose stop had been decided; return the others (to run again)."""
    rest = []
    for frozen in resumable:
        reason = decided_stop(frozen)
        config = frozen.user_attrs.get(Attr.CONFIG)
        if not reason or not isinstance(config, dict):
            rest.append(frozen)
            continue
        running = RunningTrial(optuna.Trial(study, op.frozen_id(study, frozen)), TrialConfig.from_dict(config), 1, 0.0)
        running.stop(Stop(reason))
        reports.replay(running, ())  # its reports so far, from its metrics.jsonl (any the study lacks are told)
        log.info(
            "trial %d was stopped before the controller died (%s): told PRUNED, not run again", frozen.number, reason
        )
        ledger.finish(running, Outcome(OK, stopped=True), Verdict(TrialState.PRUNED, (), reason))
    return rest
