"""The spec's ``[elastic]`` section: the widths a trial may take, when it grows, what happens to its batch and
learning rate, and how many slots stay for new trials.

The allocation by goodput is :mod:`search.elastic.allocate`; how a trial is resized is a segment of its life
(:mod:`search.loop.segments`). docs/howto/elastic.md is the guide.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from search.elastic.allocate import MIN_GAIN
from search.spec.table import SpecError, SpecTable

__all__ = ["ElasticSpec", "ELASTIC_KEYS", "GROW_WHEN", "BATCH_MODES", "LR_RULES", "parse_elastic"]

ELASTIC_KEYS = ("widths", "grow", "batch", "lr_rule", "reserve", "max_slots", "shrink", "min_gain")
GROW_WHEN = ("promotion", "pbt", "goodput")
BATCH_MODES = ("fixed", "grow")
LR_RULES = ("linear", "sqrt", "adascale")
_RUNG_PRUNERS = ("asha", "hyperband")  # the pruners that promote at rungs


@dataclasses.dataclass(frozen=True)
class ElasticSpec:
    """Elastic trials: each starts at the smallest width and may grow (or shrink) between segments."""

    widths: tuple[int, ...]
    """The data-parallel widths a trial may take, increasing, each >= 1, e.g. `[1, 2, 4]`; a trial starts at the
    first. Required."""
    grow: str = "promotion"
    """When a trial grows: `promotion` (at an ASHA/Hyperband rung it passes, where goodput per slot gains enough),
    `goodput` (whenever slots sit idle beyond what waiting trials and the reserve need: the running trials that gain
    most goodput per slot widen at their next report, any pruner), or `pbt` (when `[study] scheduler = "pbt"` decides
    a rung, the members that survive it, not those that exploit, widen into the slots the population's next segments
    leave idle, by goodput per slot over them all; needs `batch = "fixed"`)."""
    batch: str = "fixed"
    """`fixed`: the global batch stays (each replica's share shrinks; the optimisation path does not change), or
    `grow`: each replica's batch stays, the global batch grows with the width and the learning rate follows
    `lr_rule`."""
    lr_rule: str | None = None
    """With `batch = "grow"`: `linear`, `sqrt` (the default) or `adascale` (AdaScale's gain from the gradient noise
    scale the trainer measures: `[trainer] options = { noise_scale_every = k }`). Not with `batch = "fixed"`."""
    reserve: int = 1
    """Free slots kept for new trials while any wait or may still be asked (`grow = "goodput"` widens no trial into
    them)."""
    max_slots: int | None = None
    """The most slots one trial may hold; default: the largest width."""
    shrink: bool = False
    """Whether a grown trial gives slots back at its next segment boundary when new trials wait and the free slots
    (its own included) cannot hold them beside it: to the width that costs it least speedup."""
    min_gain: float = MIN_GAIN
    """The least speedup per added slot a resize must promise, from the throughput the trial measured (default 0.25:
    a new trial on that slot would gain a whole one); 0: any width predicted not to slow it; a negative value, e.g.
    -1: every width that fits, even one measured slower (to watch the mechanism where data parallelism does not pay,
    as on a 2-core machine)."""

    def __post_init__(self) -> None:
        _check_widths(self.widths)
        for name, value, allowed in (("grow", self.grow, GROW_WHEN), ("batch", self.batch, BATCH_MODES)):
            if value not in allowed:
                raise ValueError(f"elastic {name}={value!r}: must be one of {', '.join(allowed)}")
        if self.grow == "pbt" and self.batch != "fixed":
            raise ValueError(
                f"elastic batch={self.batch!r}: must be 'fixed' with grow = 'pbt' (PBT explores the learning rate "
                "itself; a rule's rate would fight it)"
            )
        if self.batch == "fixed" and self.lr_rule is not None:
            raise ValueError(f"elastic lr_rule={self.lr_rule!r}: the global batch is fixed, so the rate stays")
        if self.batch == "grow" and self.lr_rule not in LR_RULES:
            raise ValueError(f"elastic lr_rule={self.lr_rule!r}: must be one of {', '.join(LR_RULES)}")
        if self.reserve < 0:
            raise ValueError(f"elastic reserve={self.reserve!r}: must be >= 0 slots")
        if not -1.0 <= self.min_gain <= 1.0:
            raise ValueError(f"elastic min_gain={self.min_gain!r}: must be between -1 and 1 (speedup per added slot)")
        if self.max_slots is not None and self.max_slots < max(self.widths):
            raise ValueError(f"elastic max_slots={self.max_slots!r}: must be >= the largest width ({max(self.widths)})")

    @property
    def start_width(self) -> int:
        return self.widths[0]

    @property
    def most_slots(self) -> int:
        return max(self.widths) if self.max_slots is None else self.max_slots


def _check_widths(widths: Sequence[int]) -> None:
    if len(widths) < 2:
        raise ValueError(f"elastic widths={list(widths)!r}: need at least two widths, e.g. [1, 2, 4]")
    if any(isinstance(w, bool) or not isinstance(w, int) or w < 1 for w in widths):
        raise ValueError(f"elastic widths={list(widths)!r}: each must be an integer >= 1")
    if any(b <= a for a, b in zip(widths, widths[1:], strict=False)):
        raise ValueError(f"elastic widths={list(widths)!r}: must be strictly increasing")


def _from_table(t: SpecTable) -> ElasticSpec:
    if not t.has("widths"):
        raise t.error("widths", "is required: the widths a trial may take, e.g. [1, 2, 4]")
    widths = t.data["widths"]
    if not isinstance(widths, list):
        raise t.error("widths", f"must be a list of integers, e.g. [1, 2, 4], got {widths!r}")
    batch = t.choice("batch", BATCH_MODES, "fixed")
    rule = t.choice("lr_rule", LR_RULES, "sqrt") if batch == "grow" else None
    if batch == "fixed" and t.has("lr_rule"):
        raise t.error("lr_rule", "only with batch = 'grow': a fixed global batch keeps its learning rate")
    max_slots = t.int("max_slots", minimum=1) if t.has("max_slots") else None
    grow, reserve = t.choice("grow", GROW_WHEN, "promotion"), t.int("reserve", 1, minimum=0)
    try:
        gain = t.float("min_gain", MIN_GAIN)
        return ElasticSpec(tuple(widths), grow, batch, rule, reserve, max_slots, t.bool("shrink", False), gain)
    except ValueError as exc:  # "elastic <key>=<value>: <rule>"
        key, _, problem = str(exc).removeprefix("elastic ").partition("=")
        raise t.error(key, problem.partition(": ")[2] or problem) from None


class _Study(Protocol):  # what of [study] it reads (a frozen StudySpec)
    @property
    def pruner(self) -> str: ...
    @property
    def scheduler(self) -> str: ...


class _Trainer(Protocol):  # what of [trainer] it reads (a frozen TrainerSpec)
    @property
    def data_parallel(self) -> int: ...
    @property
    def options(self) -> Mapping[str, Any]: ...


def parse_elastic(
    source: str,
    data: Mapping[str, Any],
    study: _Study,
    trainer: _Trainer,
    searched_width: bool,
    batches: Sequence[int],
) -> ElasticSpec | None:
    """The ``[elastic]`` table of the spec's ``data`` (None: none), checked against the rest of the spec: the
    study's pruner and scheduler, the trainer's ``data_parallel`` and options, whether ``[space]`` searches
    ``data_parallel`` (``searched_width``), and the global batch sizes it may take (``batches``)."""
    if "elastic" not in data:
        return None
    t = SpecTable(source, "elastic", data["elastic"], ELASTIC_KEYS)
    spec = _from_table(t)
    if spec.grow == "promotion" and study.pruner not in _RUNG_PRUNERS:
        raise t.error("grow", f"'promotion' needs [study] pruner = 'asha' or 'hyperband', got {study.pruner!r}")
    if spec.grow == "pbt" and study.scheduler != "pbt":
        raise t.error("grow", "'pbt' needs [study] scheduler = 'pbt'")
    if searched_width:
        raise SpecError(source, "space.data_parallel", "[elastic] sets each trial's width; remove it from [space]")
    if trainer.data_parallel != spec.start_width:
        raise SpecError(
            source, "trainer.data_parallel", f"must be [elastic] widths[0] = {spec.start_width}: a trial starts there"
        )
    if spec.lr_rule == "adascale" and not trainer.options.get("noise_scale_every"):
        raise t.error("lr_rule", "'adascale' needs the noise scale: [trainer] options = { noise_scale_every = k }")
    if spec.batch == "fixed":
        for batch in batches:
            bad = [w for w in spec.widths if batch % w]
            if bad:
                raise t.error("widths", f"global batch {batch} is not divisible by width {bad[0]} (batch = 'fixed')")
    return spec
