"""LR schedules: pinned values, agreement with torch.optim.lr_scheduler, properties."""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from spaces import (
    SCHEDULE_FAMILIES,
    Constant,
    Cosine,
    Exponential,
    OneCycle,
    Piecewise,
    Schedule,
    SpaceError,
    StepDecay,
    WarmupCosine,
    make_schedule,
    schedule_from_dict,
)

Factory = Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler]


def torch_lrs(base_lr: float, steps: int, factory: Factory) -> list[float]:
    """The LR torch uses at optimizer steps 0..steps-1."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=base_lr)
    sched = factory(opt)
    lrs = []
    for _ in range(steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def assert_matches(ours: Schedule, start: int, expected: list[float]) -> None:
    got = [ours(start + i) for i in range(len(expected))]
    assert got == pytest.approx(expected, rel=1e-9, abs=1e-12)


def warmup_lrs(base_lr: float, warmup: int) -> list[float]:
    return torch_lrs(
        base_lr,
        warmup,
        lambda o: torch.optim.lr_scheduler.LinearLR(o, 1.0 / warmup, 1.0, total_iters=warmup - 1),
    )


# ---- pinned values: step 0, end of warmup, end of decay ----------------------


def test_constant_pins() -> None:
    s = Constant(0.1, warmup_steps=4)
    assert (s(0), s(3), s(4), s(10_000)) == pytest.approx((0.025, 0.1, 0.1, 0.1))
    assert Constant(0.1)(0) == 0.1


def test_step_decay_pins() -> None:
    s = StepDecay(0.1, step_size=10, gamma=0.5, warmup_steps=5)
    assert s(0) == pytest.approx(0.02)
    assert s(4) == pytest.approx(0.1)
    assert s(14) == pytest.approx(0.1)
    assert s(15) == pytest.approx(0.05)
    assert s(35) == pytest.approx(0.0125)


def test_exponential_pins() -> None:
    s = Exponential(1.0, gamma=0.5, warmup_steps=2)
    assert (s(0), s(1), s(2), s(3), s(5)) == pytest.approx((0.5, 1.0, 1.0, 0.5, 0.125))


def test_cosine_pins() -> None:
    s = Cosine(0.1, total_steps=110, min_lr=0.001, warmup_steps=10)
    assert s(0) == pytest.approx(0.01)
    assert s(9) == pytest.approx(0.1)
    assert s(10) == pytest.approx(0.1)
    assert s(60) == pytest.approx((0.1 + 0.001) / 2)
    assert s(110) == pytest.approx(0.001)
    assert s(500) == pytest.approx(0.001)


def test_warmup_cosine_requires_warmup() -> None:
    s = WarmupCosine(0.2, total_steps=20, warmup_steps=4)
    assert (s(0), s(3), s(20)) == pytest.approx((0.05, 0.2, 0.0))
    with pytest.raises(SpaceError) as info:
        WarmupCosine(0.2, total_steps=20)
    assert info.value.key == "warmup_cosine.warmup_steps"


def test_onecycle_pins() -> None:
    s = OneCycle(1.0, total_steps=100, pct_start=0.3, div_factor=25.0, final_div_factor=1e4)
    assert s.base_lr == 1.0 and s.warmup_steps == 30
    assert s(0) == pytest.approx(0.04)
    assert s(29) == pytest.approx(1.0)
    assert s(99) == pytest.approx(0.04 / 1e4)
    assert s(1000) == pytest.approx(0.04 / 1e4)


def test_piecewise_pins_and_round_trip() -> None:
    s = Piecewise(((0, 0.1), (10, 0.05), (25, 0.2)))
    assert (s(0), s(9), s(10), s(24), s(25), s(10_000)) == (0.1, 0.1, 0.05, 0.05, 0.2, 0.2)
    assert s.to_list() == [[0, 0.1], [10, 0.05], [25, 0.2]]
    assert Piecewise.from_list(s.to_list()) == s


# ---- agreement with torch -----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("warmup", [0, 1, 5])
def test_step_decay_matches_steplr(warmup: int) -> None:
    s = StepDecay(0.3, step_size=7, gamma=0.3, warmup_steps=warmup)
    if warmup:
        assert_matches(s, 0, warmup_lrs(0.3, warmup))
    assert_matches(s, warmup, torch_lrs(0.3, 40, lambda o: torch.optim.lr_scheduler.StepLR(o, 7, 0.3)))


@pytest.mark.slow
@pytest.mark.parametrize("warmup", [0, 3])
def test_exponential_matches_exponentiallr(warmup: int) -> None:
    s = Exponential(0.1, gamma=0.95, warmup_steps=warmup)
    if warmup:
        assert_matches(s, 0, warmup_lrs(0.1, warmup))
    assert_matches(s, warmup, torch_lrs(0.1, 50, lambda o: torch.optim.lr_scheduler.ExponentialLR(o, 0.95)))


@pytest.mark.parametrize(("warmup", "min_lr"), [(0, 0.0), (8, 0.001)])
def test_cosine_matches_cosineannealinglr(warmup: int, min_lr: float) -> None:
    total = 60
    s = Cosine(0.1, total_steps=total, min_lr=min_lr, warmup_steps=warmup)
    if warmup:
        assert_matches(s, 0, warmup_lrs(0.1, warmup))
    span = total - warmup
    expected = torch_lrs(0.1, span + 1, lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, span, min_lr))
    assert_matches(s, warmup, expected)


def test_warmup_cosine_matches_linear_then_cosine() -> None:
    s = WarmupCosine(0.05, total_steps=40, min_lr=0.0, warmup_steps=10)
    assert_matches(s, 0, warmup_lrs(0.05, 10))
    assert_matches(s, 10, torch_lrs(0.05, 31, lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 30)))


@pytest.mark.parametrize(
    ("total", "pct", "div", "final_div"),
    [(100, 0.3, 25.0, 1e4), (37, 0.25, 10.0, 100.0), (2, 0.75, 25.0, 1e4), (50, 0.9, 5.0, 1e3)],
)
def test_onecycle_matches_onecyclelr(total: int, pct: float, div: float, final_div: float) -> None:
    s = OneCycle(0.5, total_steps=total, pct_start=pct, div_factor=div, final_div_factor=final_div)
    expected = torch_lrs(
        0.5,
        total,
        lambda o: torch.optim.lr_scheduler.OneCycleLR(
            o,
            0.5,
            total_steps=total,
            pct_start=pct,
            div_factor=div,
            final_div_factor=final_div,
            cycle_momentum=False,
            three_phase=False,
        ),
    )
    assert_matches(s, 0, expected)


# ---- construction errors ------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "key", "fragment"),
    [
        (lambda: StepDecay(0.1, step_size=0), "step.step_size", ">= 1"),
        (lambda: StepDecay(0.1, step_size=2, gamma=0.0), "step.gamma", "(0, 1]"),
        (lambda: Constant(0.0), "constant.base_lr", "> 0"),
        (lambda: Constant(True), "constant.base_lr", "(bool)"),
        (lambda: Constant(0.1, warmup_steps=-1), "constant.warmup_steps", ">= 0"),
        (lambda: Exponential(0.1, gamma=1.5), "exponential.gamma", "(0, 1]"),
        (lambda: Cosine(0.1, total_steps=5, warmup_steps=5), "cosine.total_steps", "> warmup_steps"),
        (lambda: Cosine(0.1, total_steps=5, min_lr=0.2), "cosine.min_lr", "[0, base_lr"),
        (lambda: OneCycle(0.1, total_steps=1), "onecycle.total_steps", ">= 2"),
        (lambda: OneCycle(0.1, total_steps=10, pct_start=1.0), "onecycle.pct_start", "(0, 1)"),
        (lambda: OneCycle(0.1, total_steps=3, pct_start=0.3), "onecycle.pct_start", "more than one step"),
        (lambda: OneCycle(0.1, total_steps=10, div_factor=0), "onecycle.div_factor", "> 0"),
        (lambda: Piecewise(()), "piecewise.points", "empty"),
        (lambda: Piecewise(((1, 0.1),)), "piecewise.points[0].step", "must be 0"),
        (lambda: Piecewise(((0, 0.1), (0, 0.2))), "piecewise.points[1].step", "> the previous"),
        (lambda: Piecewise(((0, 0.1), (5,))), "piecewise.points[1]", "pair"),
        (lambda: make_schedule("cosin", 0.1, 10), "schedule.family", "did you mean 'cosine'"),
        (lambda: make_schedule("cosine", 0.1, 10, warmup_steps=10), "schedule.warmup_steps", "< total_steps"),
        (lambda: make_schedule("cosine", 0.1, 0), "schedule.total_steps", ">= 1"),
    ],
)
def test_construction_errors(build: Callable[[], object], key: str, fragment: str) -> None:
    with pytest.raises(SpaceError) as info:
        build()
    assert info.value.key == key
    assert fragment in info.value.problem


def test_bad_step_is_refused() -> None:
    with pytest.raises(SpaceError, match="step: must be >= 0"):
        Constant(0.1)(-1)
    with pytest.raises(SpaceError, match="step: must be an integer"):
        Constant(0.1)(1.5)  # type: ignore[arg-type]


# ---- make_schedule, describe --------------------------------------------------


def test_make_schedule_defaults() -> None:
    assert make_schedule("constant", 0.1, 100) == Constant(0.1)
    assert make_schedule("step", 0.1, 100, 10) == StepDecay(0.1, 33, 0.1, 10)
    exp = make_schedule("exponential", 0.1, 100, 20)
    assert exp(100) == pytest.approx(0.001)
    assert make_schedule("cosine", 0.1, 100) == Cosine(0.1, 100)
    assert make_schedule("warmup_cosine", 0.1, 100) == WarmupCosine(0.1, 100, 0.0, 5)
    assert make_schedule("onecycle", 0.1, 100) == OneCycle(0.1, 100)
    one = make_schedule("onecycle", 0.1, 100, warmup_steps=10)
    assert one(9) == pytest.approx(0.1) and one.warmup_steps == 10


@pytest.mark.parametrize("family", SCHEDULE_FAMILIES)
def test_describe_round_trips_with_builtins(family: str) -> None:
    s = make_schedule(family, 0.1, 50, warmup_steps=5)
    d = s.describe()
    assert d["family"] == family
    assert all(type(v) in (str, int, float) for v in d.values())
    assert schedule_from_dict(d) == s
    assert pickle.loads(pickle.dumps(s)) == s
    p = Piecewise(((0, 0.1), (3, 0.01)))
    assert schedule_from_dict(p.describe()) == p


# ---- properties ---------------------------------------------------------------

lrs = st.floats(1e-5, 10.0)
totals = st.integers(2, 400)


@st.composite
def schedules(draw: st.DrawFn) -> tuple[Schedule, int]:
    """A schedule and the number of steps it is meant to run."""
    family = draw(st.sampled_from(SCHEDULE_FAMILIES + ("piecewise",)))
    total = draw(totals)
    base = draw(lrs)
    if family == "piecewise":
        steps = sorted(draw(st.sets(st.integers(1, total), max_size=5)))
        return Piecewise(tuple((s, draw(lrs)) for s in [0, *steps])), total
    if family == "onecycle":
        pct = draw(st.floats(min(0.99, 1.01 / total + 1e-6), 0.99))
        if pct * total <= 1.0:
            pct = 0.99
        return OneCycle(base, total, pct, draw(st.floats(1.0, 1e3)), draw(st.floats(1.0, 1e4))), total
    warmup = draw(st.integers(1 if family == "warmup_cosine" else 0, total - 1))
    if family == "step":
        step_size = draw(st.integers(max(1, total // 20), total))  # at most ~20 decays
        return StepDecay(base, step_size, draw(st.floats(0.05, 1.0)), warmup), total
    if family == "exponential":
        return Exponential(base, draw(st.floats(0.9, 1.0)), warmup), total
    if family in ("cosine", "warmup_cosine"):
        cls = Cosine if family == "cosine" else WarmupCosine
        return cls(base, total, draw(st.floats(0.0, base)), warmup), total
    return make_schedule(family, base, total, warmup), total


@settings(max_examples=150, deadline=None)
@given(schedules())
def test_every_schedule_is_finite_and_positive_in_range(drawn: tuple[Schedule, int]) -> None:
    schedule, total = drawn
    peak = max([schedule.base_lr, *(lr for _, lr in getattr(schedule, "points", ()))])
    for step in range(total):
        lr = schedule(step)
        assert type(lr) is float
        assert math.isfinite(lr) and 0.0 < lr <= peak * (1 + 1e-12)
    assert math.isfinite(schedule(total)) and schedule(total) >= 0.0
