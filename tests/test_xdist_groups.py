"""The conftest's groups reach pytest-xdist: under ``--dist loadgroup`` a test sharing a module-scoped fixture
carries its module's ``@group`` (else that fixture, often a whole campaign, is set up once per xdist worker)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def shared() -> int:
    return 1


def test_a_test_sharing_a_module_fixture_is_in_its_modules_xdist_group(
    request: pytest.FixtureRequest, shared: int
) -> None:
    if not getattr(request.config.option, "loadgroup", False):  # set on each xdist worker by --dist loadgroup
        pytest.skip("only under pytest-xdist --dist loadgroup (as .ci/run runs)")
    assert request.node.nodeid.endswith("@tests/test_xdist_groups.py"), request.node.nodeid
