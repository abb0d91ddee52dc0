"""When the trials ran: each one's span on its worker, the idle gaps between the runs of a resumed campaign,
the time axis that cuts them, and utilization over the time the campaign ran. No plotting."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from optuna.trial import FrozenTrial

from search.store.records import TrialRecord

__all__ = [
    "Span",
    "timeline",
    "timeline_origin",
    "resume_times",
    "idle_gaps",
    "TimeAxis",
    "slot_count",
    "utilization",
    "worker_labels",
    "resized_trials",
    "bar_heights",
    "BAR_HEIGHT",
]

BAR_HEIGHT = 0.6  # a run's bar on its worker's row (rows 1 apart); the widest segment's where widths differ

Trial = FrozenTrial | TrialRecord


def worker_labels(workers: Sequence[str]) -> dict[str, str]:
    """Short, readable names for worker addresses: ``w1 :port`` on one host, ``w1 host:port`` across hosts."""
    ordered = sorted(set(workers))
    parts = {}
    for w in ordered:
        bare = w.split("://", 1)[-1]
        host, _, port = bare.rpartition(":")
        parts[w] = (host, port) if host and port.isdigit() else (bare, "")
    one_host = len({h for h, _p in parts.values()}) == 1
    labels = {}
    for i, w in enumerate(ordered, 1):
        host, port = parts[w]
        if not host.replace(".", "").isdigit() and "." in host:
            host = host.split(".", 1)[0]  # a DNS name: its first label
        where = (f":{port}" if port else host) if one_host else (f"{host[:18]}:{port}" if port else host[:24])
        labels[w] = f"w{i} {where}"
    return labels


@dataclasses.dataclass(frozen=True)
class Span:
    """One trial's time on one worker, in seconds since the campaign's first start."""

    number: int
    worker: str
    devices: str
    start: float
    end: float
    state: str
    asked: float | None = None  # when the controller asked it (same origin): asked -> start is waiting, not training
    width: int | None = None  # the slots its segment ran on, where the trial ran in segments (None: one segment)

    @property
    def waited(self) -> float:
        """Seconds from being asked to starting on the worker (queue, dispatch, worker start-up); 0 if unknown."""
        return max(0.0, self.start - self.asked) if self.asked is not None else 0.0


def timeline(trials: Sequence[Trial], asked: Mapping[int, float] | None = None) -> list[Span]:
    """Each timed trial's run on its worker; ``asked``: epoch seconds each trial was asked, where known.

    Times are seconds since :func:`timeline_origin`. An ask recorded after
    the start (clocks of different hosts) is dropped rather than drawn backwards.
    """
    timed, ask = _timed_asks(trials, asked)
    if not timed:
        return []
    origin: float = min([r.started for r in timed] + list(ask.values()))  # type: ignore[type-var, assignment]
    spans = []
    for r in timed:
        # a trial in segments (a PBT member, a resized trial): a span per run, the time since the one before as its wait
        runs = _runs(r)
        for i, (start, end, worker, width) in enumerate(runs):
            wait_from = ask.get(r.number) if i == 0 else runs[i - 1][1]
            spans.append(
                Span(
                    number=r.number,
                    worker=worker,
                    devices=",".join(str(d) for d in r.devices),
                    start=start - origin,
                    end=end - origin,
                    state=r.state.name,
                    asked=wait_from - origin if wait_from is not None else None,
                    width=width,
                )
            )
    return sorted(spans, key=lambda s: (s.worker, s.start))


def _runs(r: TrialRecord) -> list[tuple[float, float, str, int | None]]:
    """A timed trial's runs on workers, each with its segment's width: each run of each of its segments (an older
    campaign's PBT member: its ``pbt_segments``), else its one run (width None)."""
    runs: list[tuple[float, float, str, int | None]] = [
        (float(a), float(b), str(w), int(s["width"])) for s in r.segments for a, b, w in s.get("runs") or ()
    ]
    if runs:
        return runs
    if r.pbt_segments:
        return [(a, b, w, None) for a, b, w in r.pbt_segments]
    return [(r.started, r.finished, "?" if r.worker is None else r.worker, None)]  # type: ignore[list-item]


def _timed_asks(
    trials: Sequence[Trial], asked: Mapping[int, float] | None
) -> tuple[list[TrialRecord], dict[int, float]]:
    timed = [r for r in map(TrialRecord.of, trials) if r.timed]
    asked = asked or {}
    ask = {r.number: asked[r.number] for r in timed if r.number in asked and asked[r.number] <= r.started}  # type: ignore[operator]
    return timed, ask


def resized_trials(spans: Sequence[Span]) -> set[int]:
    """The trials whose segments ran at more than one width."""
    widths: dict[int, set[int]] = {}
    for s in spans:
        if s.width is not None:
            widths.setdefault(s.number, set()).add(s.width)
    return {number for number, seen in widths.items() if len(seen) > 1}


def bar_heights(spans: Sequence[Span]) -> np.ndarray:
    """Each span's bar height: :data:`BAR_HEIGHT`, or, where the segments ran at different widths, in proportion
    to the log of its width (the widest's :data:`BAR_HEIGHT`, a width of 1 a third of it); a span of a trial
    that did not change segment (width None) is taken at the narrowest width seen."""
    known = [s.width for s in spans if s.width is not None]
    if len(set(known)) < 2:
        return np.full(len(spans), BAR_HEIGHT)
    narrowest, widest = min(known), max(known)
    widths = np.array([narrowest if s.width is None else s.width for s in spans], dtype=float)
    share = np.log2(widths) / math.log2(widest) if widest > 1 else np.ones(len(spans))
    return BAR_HEIGHT * (1 + 2 * share) / 3


def timeline_origin(trials: Sequence[Trial], asked: Mapping[int, float] | None = None) -> float | None:
    """Epoch seconds of :func:`timeline`'s zero: the earliest start or ask of a timed trial (None: none)."""
    timed, ask = _timed_asks(trials, asked)
    return min([r.started for r in timed] + list(ask.values())) if timed else None  # type: ignore[type-var]


def resume_times(environment: Mapping[str, Any] | None) -> list[float]:
    """Epoch seconds at which each resume of the campaign began (its ``environment.json`` record)."""
    resumes = (environment or {}).get("resumes") or []
    at = [r.get("captured_unix") for r in resumes if isinstance(r, Mapping)]
    return sorted(float(t) for t in at if isinstance(t, (int, float)) and not isinstance(t, bool))


def idle_gaps(
    trials: Sequence[Trial], resumes: Sequence[float], asked: Mapping[int, float] | None = None
) -> list[tuple[float, float]]:
    """The idle gaps between the runs of a resumed campaign, as epoch seconds (from, to).

    For each resume: from the last trial end before it to the first ask or start after it,
    where no trial ran across it. Nothing of the campaign ran in such a gap.
    """
    timed, ask = _timed_asks(trials, asked)
    runs = [(r.number, i, start, end) for r in timed for i, (start, end, _w, _k) in enumerate(_runs(r))]
    gaps = set()
    for at in resumes:
        before = [end for _n, _i, _start, end in runs if end <= at]
        after = [min(start, ask.get(n, start)) if i == 0 else start for n, i, start, _end in runs if start >= at]
        if before and after and not any(start < at < end for _n, _i, start, end in runs):
            lo, hi = max(before), min(after)
            if hi > lo:
                gaps.add((lo, hi))
    return sorted(gaps)


@dataclasses.dataclass(frozen=True)
class TimeAxis:
    """Seconds since an origin -> seconds on a drawn time axis, with the idle ``gaps`` (same origin) cut out."""

    gaps: tuple[tuple[float, float], ...] = ()

    @classmethod
    def since(cls, origin: float, gaps: Sequence[tuple[float, float]]) -> TimeAxis:
        """The axis for times counted from ``origin`` (epoch seconds), ``gaps`` given in epoch seconds."""
        return cls(tuple((a - origin, b - origin) for a, b in gaps))

    def __call__(self, t: float) -> float:
        return t - sum(min(t, b) - a for a, b in self.gaps if t > a)

    def of(self, times: np.ndarray) -> np.ndarray:
        """The axis for many times at once (as ``__call__`` for each)."""
        out = np.array(times, dtype=float)
        for a, b in self.gaps:
            out -= np.clip(times, a, b) - a
        return out

    @property
    def cut_s(self) -> float:
        """Seconds cut from the axis in all."""
        return sum(b - a for a, b in self.gaps)

    def marks(self) -> list[tuple[float, float]]:
        """Where each cut falls on the drawn axis, and how many seconds it cut."""
        return [(self(a), b - a) for a, b in self.gaps]


def slot_count(environment: Mapping[str, Any] | None, spans: list[Span]) -> int:
    """Trial slots of the cluster: its GPU (else CPU) resource total, else one per worker seen."""
    cluster = (environment or {}).get("cluster") or {}
    resources = cluster.get("resources") or {}
    for key in ("GPU", "CPU"):
        if resources.get(key):
            return max(1, int(resources[key]))
    return max(1, len({s.worker for s in spans}))


def utilization(spans: list[Span], slots: int, axis: TimeAxis | None = None) -> dict[str, Any]:
    """Busy time / (slots x the time the campaign ran), overall and per worker.

    The time it ran is its span less the idle gaps ``axis`` cuts (between the runs of a resumed campaign).
    """
    if not spans:
        return {"slots": slots, "span_s": 0.0, "busy_s": 0.0, "utilization": None, "per_worker": {}, "cut_s": 0.0}
    axis = axis or TimeAxis()
    span = axis(max(s.end for s in spans)) - axis(min(s.start for s in spans))
    busy = sum(max(0.0, s.end - s.start) for s in spans)
    per_worker: dict[str, float] = {}
    for s in spans:
        per_worker[s.worker] = per_worker.get(s.worker, 0.0) + max(0.0, s.end - s.start)
    return {
        "slots": slots,
        "span_s": span,
        "cut_s": axis.cut_s,
        "busy_s": busy,
        "utilization": busy / (slots * span) if span > 0 else None,
        "per_worker": {w: (b / span if span > 0 else None) for w, b in sorted(per_worker.items())},
    }
