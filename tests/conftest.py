"""The `slow` mark is kept honest: with ``HYPERSWEEP_SLOW_LIMIT=SECONDS`` set (CI sets it), a test that is not
marked ``slow`` and takes longer than that (its set-up and call together) fails, naming its time.

Under ``--dist loadgroup`` (``.ci/run``) each test goes to whichever xdist worker is free, except the tests of a
module that share a module- or class-scoped fixture: they stay together on one worker (``xdist_group``), so
that its set-up (often a whole campaign) runs once."""

from __future__ import annotations

import os
from collections.abc import Generator

import pytest

LIMIT_VARIABLE = "HYPERSWEEP_SLOW_LIMIT"
SHARED_SCOPES = frozenset({"module", "class", "package"})  # a fixture set up once for several tests
SETUP_SECONDS = pytest.StashKey[float]()
LIMIT = pytest.StashKey["float | None"]()


def slow_limit() -> float | None:
    """The limit in seconds from the environment (None: not checked)."""
    value = os.environ.get(LIMIT_VARIABLE, "").strip()
    if not value:
        return None
    try:
        limit = float(value)
    except ValueError:
        raise pytest.UsageError(f"{LIMIT_VARIABLE}={value!r}: must be a number of seconds") from None
    if limit <= 0:
        raise pytest.UsageError(f"{LIMIT_VARIABLE}={value!r}: must be above 0")
    return limit


def pytest_configure(config: pytest.Config) -> None:
    config.stash[LIMIT] = slow_limit()  # read once: a test that sets the variable does not move it


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    report = yield
    limit = item.config.stash.get(LIMIT, None)
    if limit is None or not isinstance(report, pytest.TestReport) or item.get_closest_marker("slow"):
        return report
    if report.when == "setup":
        item.stash[SETUP_SECONDS] = report.duration
    elif report.when == "call" and report.passed:
        took = item.stash.get(SETUP_SECONDS, 0.0) + report.duration
        if took > limit:
            report.outcome = "failed"
            report.longrepr = f"took {took:.1f} s (set-up and call), over {LIMIT_VARIABLE}={limit:g}: mark it slow"
    return report


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups (its own hook, under --dist loadgroup)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if shares_a_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.split("::")[0]))


def shares_a_fixture(item: pytest.Item) -> bool:
    """Whether ``item`` uses a fixture that is set up once for several tests of its module (or class)."""
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.values() if info is not None else ()
    return any(defs and defs[-1].scope in SHARED_SCOPES for defs in definitions)


@pytest.fixture(autouse=True)
def _heap_given_back() -> Generator[None, None, None]:
    """A test that runs ``search.cli.main`` in this process declares that the process owns its heap; the next test
    must not inherit that (its campaign loops would freeze what they keep), nor the objects frozen meanwhile."""
    yield
    from search.store import heap

    if heap.heap_owned():
        import gc

        heap.freeze_after_loads(False)
        gc.unfreeze()
