"""``hypersweep check --versions``: the versions found against the tested ones, the extras, the seam's path; and
``check``'s one warning line for a version outside the tested ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from search import cli
from search.compat import versions
from search.compat.versions import Found, untested_line
from tests.search.toy_specs import toy_toml


def test_a_local_build_tag_is_inside_and_a_release_outside_is_not() -> None:
    assert not Found("torch", "2.13.0+cpu", ("2.13.0", "2.13.0")).outside
    assert Found("torch", "2.14.0", ("2.13.0", "2.13.0")).outside
    assert Found("pandas", "1.5.3", ("2.0.0", "3.1.1")).outside
    assert not Found("pandas", "2.2.0", ("2.0.0", "3.1.1")).outside
    assert not Found("mnist1d", None, ("0.0.1", "0.0.2")).outside  # not installed: nothing to warn about


def test_one_line_names_every_version_outside() -> None:
    found = [Found("numpy", "3.0.0", ("1.24.0", "2.4.6")), Found("scipy", "1.12.0", ("1.10.0", "1.17.1"))]
    assert untested_line(found) == (
        "warning: not tested with numpy 3.0.0 (tested 1.24.0 .. 2.4.6) (hypersweep check --versions lists all)"
    )
    assert untested_line(found[1:]) is None


def test_check_versions_prints_core_extras_and_the_seams_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["check", "--versions"]) == 0
    out = capsys.readouterr().out.splitlines()
    for name in versions.CORE:
        (line,) = [line for line in out if line.startswith(f"  {name} ")]
        low, high = versions.TESTED[name]
        assert f"{low} .. {high}" in line
    for extra in versions.EXTRAS:
        assert any(line.startswith(f"  {extra}:") for line in out)
    assert out[-1].startswith("optuna's private API: optuna ") and "private fast paths" in out[-1]


def test_check_warns_in_one_line_for_a_version_outside_the_tested_ones(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = tmp_path / "s.toml"
    spec.write_text(toy_toml("versions"))
    monkeypatch.chdir(tmp_path)
    assert cli.main(["check", str(spec)]) == 0
    assert capsys.readouterr().err == ""
    monkeypatch.setitem(versions.TESTED, "numpy", ("0.1.0", "0.2.0"))
    assert cli.main(["check", str(spec)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("hypersweep: warning: not tested with numpy ")
    assert "(tested 0.1.0 .. 0.2.0)" in err[0]
