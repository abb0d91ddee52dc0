"""User hooks on a running campaign: Optuna-style callbacks after each tell, and a hook on each report.

```python
def log_best(study, trial):                 # optuna's callback signature: (Study, FrozenTrial)
    if trial.number >= 10 and study.best_value > 0.95:
        study.stop()                         # or: raise search.StopCampaign("good enough")

search.run(spec, callbacks=[log_best], on_report=lambda number, step, metrics: print(number, step, metrics))
```

Both run on the controller's thread: keep them short. After ``study.stop()`` or
:class:`StopCampaign` from either hook, the campaign asks no new trial; trials already
running finish and are told (as ``study.optimize`` does after ``study.stop()``); trials
asked and not started end PRUNED (``never started``). Any other exception a hook raises
ends the campaign the same way, and ``search.run`` raises it once the campaign has stopped.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import optuna
from optuna.trial import FrozenTrial

from search.compat import optuna_private as op

if TYPE_CHECKING:  # the policies import the loop's parts; the hooks are imported by the session's options
    from search.loop.policies import Policy

__all__ = ["StopCampaign", "CampaignHooks", "Callback", "ReportHook"]

log = logging.getLogger(__name__)

Callback = Callable[[optuna.Study, FrozenTrial], Any]
ReportHook = Callable[[int, int, Mapping[str, float]], Any]


class StopCampaign(Exception):  # noqa: N818 - named for what it does, like optuna.TrialPruned
    """Raise from a callback or ``on_report`` hook to end the campaign cleanly (running trials finish)."""


@dataclasses.dataclass
class CampaignHooks:
    """The hooks of one campaign; ``stopped`` once a hook asked to stop, ``error`` a hook's own failure."""

    callbacks: Sequence[Callback] = ()
    on_report: ReportHook | None = None
    policies: Sequence[Policy] = ()  # more scheduling policies, asked after the fault policies, before the spec's
    stopped: bool = False
    reason: str = ""
    error: BaseException | None = None

    def __post_init__(self) -> None:
        self.callbacks = tuple(self.callbacks)
        self.policies = tuple(self.policies)
        for i, fn in enumerate((*self.callbacks, *([self.on_report] if self.on_report else []))):
            if not callable(fn):
                raise TypeError(f"callbacks[{i}] = {fn!r}: must be callable (a function of (study, frozen_trial))")

    def sink(self, study: optuna.Study) -> HookSink:
        """A report sink (see :mod:`search.store.sinks`) that calls the hooks for ``study``."""
        return HookSink(self, study)

    def _guarded(self, what: str, fn: Callable[[], Any]) -> None:
        if self.stopped and self.error is not None:
            return
        try:
            fn()
        except StopCampaign as exc:
            self.stop(f"{what} raised StopCampaign" + (f": {exc}" if str(exc) else ""))
        except Exception as exc:  # noqa: BLE001 - raised again by search.run once the campaign has stopped
            log.error("%s failed; the campaign stops: %s: %s", what, type(exc).__name__, exc, exc_info=True)
            self.error = exc
            self.stop(f"{what} failed: {type(exc).__name__}: {exc}")

    def stop(self, reason: str) -> None:
        if not self.stopped:
            self.stopped, self.reason = True, reason
            log.info("campaign stopping: %s", reason)


class HookSink:
    """Calls ``on_report`` for each report kept and each callback after each tell, in the controller's thread."""

    def __init__(self, hooks: CampaignHooks, study: optuna.Study) -> None:
        self._hooks = hooks
        self._study = study

    def record(self, number: int, step: int, metrics: Mapping[str, float], at: float) -> None:
        hook = self._hooks.on_report
        if hook is not None:
            self._hooks._guarded("on_report", lambda: hook(number, step, dict(metrics)))

    def finish(self, number: int, state: str, values: Sequence[float] | None, params: Mapping[str, Any]) -> None:
        if not self._hooks.callbacks:
            return
        storage, study = op.storage_of(self._study), self._study
        frozen = storage.get_trial(storage.get_trial_id_from_study_id_trial_number(op.study_id(study), number))
        for callback in self._hooks.callbacks:
            self._hooks._guarded(
                f"callback {getattr(callback, '__name__', callback)!r}", functools.partial(self._call, callback, frozen)
            )

    def _call(self, callback: Callback, frozen: FrozenTrial) -> None:
        """Optuna's ``study.stop()`` works only inside ``optimize``: the callback runs as if it were there."""
        if op.run_callback(self._study, callback, frozen):
            self._hooks.stop(f"study.stop() in callback {getattr(callback, '__name__', callback)!r}")

    def close(self) -> None:
        return None
