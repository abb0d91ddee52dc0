"""The words the code branches on, typed: stop reasons, segment transitions, where the sampler runs, directions.

Each enum is a ``StrEnum``: its members *are* their strings, so what is stored in a study, printed in a
message or written to a spec is exactly what it was as a plain string (``StopReason.PRUNED == "pruned"``).
Directions are Optuna's own :class:`~optuna.study.StudyDirection`; the spec keeps its words
(``"maximize"``/``"minimize"``), read with :func:`direction_of`.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping

from optuna.study import StudyDirection

from cluster.outcome import TrialStatus

__all__ = [
    "TrialStatus",
    "StopReason",
    "Transition",
    "SamplingMode",
    "StudyDirection",
    "direction_of",
    "maximizing",
    "feasible",
    "DIRECTIONS",
]


class StopReason(enum.StrEnum):
    """Why the controller stopped a trial before its last epoch (the trial's ``stop_reason``)."""

    PRUNED = "pruned"
    """The pruner judged it behind (told PRUNED)."""
    TARGET_REACHED = "target reached"
    """A scaling sweep's trial reached its target (told COMPLETE with its steps)."""
    TIME_BUDGET = "time budget"
    """The campaign's ``time_budget`` ran out while it ran."""
    TRIAL_TIMEOUT = "trial timeout"
    """It ran longer than ``trial_timeout``."""
    NEVER_STARTED = "time budget: never started"
    """Asked, but the time budget ran out before it was launched."""
    OUTPACED = "outpaced"
    """A scaling sweep's trial (``lr_grid``) ran more steps than its batch size's fewest to the target without
    reaching it: it cannot be that batch size's best (told PRUNED)."""
    RESOURCE_BUDGET = "resource budget"
    """The campaign's ``slot_hours`` / ``gpu_hours`` would not carry it to its end: stopped so the spend ends within
    the budget."""


class Transition(enum.StrEnum):
    """What follows a segment of a trial's life (a policy decides it, the campaign carries it out).

    A trial runs as a sequence of segments (:class:`search.loop.segments.Segment`); at a segment's end
    it either ends (:attr:`PRUNE`, :attr:`TARGET_REACHED`) or starts its next segment (the others).
    """

    START = "start"
    """Its first segment (from scratch, or from its own checkpoint after ``resume``)."""
    CONTINUE = "continue"
    """The next segment as the last one was: same width, same parameters (a PBT member that survived)."""
    RESIZE = "resize"
    """The next segment at another width (a promotion's resources), its overrides after a rule (the lr)."""
    EXPLOIT = "exploit"
    """PBT: the next segment from another trial's checkpoint, with explored parameters."""
    PRUNE = "prune"
    """The trial ends, told PRUNED with its stop reason."""
    TARGET_REACHED = "target reached"
    """The trial ends, told COMPLETE with the value its policy gives (a scaling sweep: the steps it took)."""

    @property
    def ends(self) -> bool:
        """Whether the trial ends here (no next segment)."""
        return self in (Transition.PRUNE, Transition.TARGET_REACHED)


class SamplingMode(enum.StrEnum):
    """Where the sampler runs (``[study] sampling``; see :mod:`search.sampling.process`)."""

    AUTO = "auto"
    """A child process for the samplers that allow it, else a thread; inline for an ordered campaign."""
    PROCESS = "process"
    """A child process, on a replica study."""
    THREAD = "thread"
    """A thread of the controller, ahead of the loop."""
    INLINE = "inline"
    """On the loop itself, in trial order."""


#: The spec's words for a direction, in the order its messages list them.
DIRECTIONS = ("maximize", "minimize")
#: Every word for a direction: the spec's, and a scaling goal's ``"max"``/``"min"``.
_WORDS = {
    "maximize": StudyDirection.MAXIMIZE,
    "max": StudyDirection.MAXIMIZE,
    "minimize": StudyDirection.MINIMIZE,
    "min": StudyDirection.MINIMIZE,
}


def direction_of(word: str | StudyDirection) -> StudyDirection:
    """The :class:`StudyDirection` a word names: the spec's ``"maximize"``/``"minimize"``, or ``"max"``/``"min"``
    (a scaling goal's); a ``StudyDirection`` is returned as it is."""
    if isinstance(word, StudyDirection):
        return word
    if word not in _WORDS:
        raise ValueError(f"direction {word!r}: must be one of {', '.join(_WORDS)}")
    return _WORDS[word]


def maximizing(direction: str | StudyDirection) -> bool:
    """Whether ``direction`` (a spec word or a :class:`StudyDirection`) maximizes."""
    return direction_of(direction) == StudyDirection.MAXIMIZE


def feasible(constraints: Mapping[str, float]) -> bool:
    """Whether a trial's ``[study] constraints`` values (``trial.constraints``; none: no constraints) are all <= 0."""
    return all(v <= 0 for v in constraints.values())
