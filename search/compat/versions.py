"""The versions of hypersweep's dependencies found here, against the ones tested (``hypersweep check --versions``).

``TESTED`` holds, for each core dependency, the floor declared in ``pyproject.toml`` (CI's floor session installs
exactly it: ``.ci/floors``) and the newest version CI's main session installed and passed with (it installs the
newest of each); ``tests/test_floors.py`` keeps the floors equal to ``pyproject.toml`` and ``.ci/floors.txt``.
A version outside that range may work; it was not tested, and ``check`` says so in one line.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import importlib.util
import platform
import re
import sys

__all__ = [
    "CORE",
    "TESTED",
    "EXTRAS",
    "Found",
    "core_versions",
    "extra_versions",
    "untested",
    "untested_line",
    "install_command",
    "extra_hint",
    "missing_modules",
    "versions_text",
]

CORE = ("optuna", "torch", "dask", "distributed", "pandas", "numpy", "scipy")

#: package -> (floor: CI's floor session, newest tested: CI's main session), measured 2026-12-07 (bench/NOTES.md).
TESTED: dict[str, tuple[str, str]] = {
    "optuna": ("5.0.0", "5.1.0"),
    "torch": ("2.13.0", "2.13.0"),  # the only CPU build this registry has (bench/NOTES.md)
    "dask": ("2025.4.0", "2026.11.0"),  # 2026.11.0: CI's clean clone of 2026-12-07 (session 25)
    "distributed": ("2025.4.0", "2026.11.0"),
    "pandas": ("2.0.0", "3.1.2"),  # 3.1.2: CI's clean clone of 2026-12-07 (session 27)
    "numpy": ("1.24.0", "2.4.6"),
    "scipy": ("1.10.0", "1.17.1"),
}

#: extra -> ((module imported, distribution installed), ...): what ``pip install -e '.[extra]'`` brings.
EXTRAS: dict[str, tuple[tuple[str, str], ...]] = {
    "slurm": (("dask_jobqueue", "dask-jobqueue"),),
    "pbs": (("dask_jobqueue", "dask-jobqueue"),),
    "kubernetes": (("dask_kubernetes", "dask-kubernetes"),),
    "mlflow": (("mlflow", "mlflow-skinny"),),
    "wandb": (("wandb", "wandb"),),
    "lightning": (("lightning", "lightning"),),
    "huggingface": (("transformers", "transformers"), ("accelerate", "accelerate")),
    "mnist1d": (("mnist1d", "mnist1d"),),
}


# a module that stands for an extra's own (trainers.integrations.lightning falls back to the old package name)
_ALIASES = {"pytorch_lightning": "lightning"}


@dataclasses.dataclass(frozen=True)
class Found:
    """One dependency: its version here (None: not installed) and the range tested (None: no range kept)."""

    name: str
    version: str | None
    tested: tuple[str, str] | None = None

    @property
    def outside(self) -> bool:
        """Installed, with a range kept, and outside it (a local build tag such as ``+cpu`` aside)."""
        if self.version is None or self.tested is None:
            return False
        low, high = (_release(v) for v in self.tested)
        return not low <= _release(self.version) <= high


def _release(version: str) -> tuple[int, ...]:
    """The release numbers of a version (``2.13.0+cpu`` -> (2, 13, 0); ``2.0.0rc1`` -> (2, 0, 0))."""
    match = re.match(r"\d+(?:\.\d+)*", version)
    return tuple(int(p) for p in match.group(0).split(".")) if match else ()


def _version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def core_versions() -> list[Found]:
    return [Found(name, _version(name), TESTED.get(name)) for name in CORE]


def extra_versions() -> list[tuple[str, Found]]:
    """(extra, its distribution) for each extra's distributions, in the table's order; a distribution whose module
    cannot be imported here counts as not installed."""
    return [
        (extra, Found(dist, None if not _importable(module) else _version(dist)))
        for extra, pairs in EXTRAS.items()
        for module, dist in pairs
    ]


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def untested(found: list[Found] | None = None) -> list[Found]:
    return [f for f in (core_versions() if found is None else found) if f.outside]


def untested_line(found: list[Found] | None = None) -> str | None:
    """One warning line naming every core dependency outside its tested range; None when all are inside."""
    outside = untested(found)
    if not outside:
        return None
    named = ", ".join(f"{f.name} {f.version} (tested {f.tested[0]} .. {f.tested[1]})" for f in outside if f.tested)
    return f"warning: not tested with {named} (hypersweep check --versions lists all)"


def install_command(extra: str) -> str:
    """How to install an extra (hypersweep installs from its checkout, not from a package index)."""
    dists = " ".join(dict.fromkeys(dist for _, dist in EXTRAS[extra]))
    return f"pip install -e '.[{extra}]' in the hypersweep checkout, or pip install {dists}"


def extra_hint(missing: str | None) -> str:
    """``"; the [extra] extra brings it: <install command>"`` for a module an extra brings, else ``""``
    (what an import error of a user's trainer adds)."""
    top = (missing or "").split(".")[0]
    top = _ALIASES.get(top, top)
    for extra, pairs in EXTRAS.items():
        if any(module == top for module, _ in pairs):
            return f"; the [{extra}] extra brings it: {install_command(extra)}"
    return ""


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here (found without importing them)."""
    return [module for module, _ in EXTRAS[extra] if not _importable(module)]


def versions_text(seam_line: str) -> str:
    """What ``check --versions`` prints: python, the core dependencies against their tested ranges, the extras,
    and which path of Optuna's private API runs (``seam_line``)."""
    lines = [f"python {platform.python_version()}", "core (installed, tested floor .. newest):"]
    for f in core_versions():
        tested = f"{f.tested[0]} .. {f.tested[1]}" if f.tested else ""
        mark = "  <- not tested" if f.outside else ""
        lines.append(f"  {f.name:<12} {f.version or 'not installed':<14} {tested}{mark}")
    lines.append("optional (extra: distribution):")
    for extra, f in extra_versions():
        shown = f.version if f.version is not None else f"not installed: {install_command(extra)}"
        lines.append(f"  {extra + ':':<12} {f.name:<16} {shown}")
    lines.append(seam_line)
    return "\n".join(lines)


def print_versions(full: bool) -> bool:
    """``full``: the versions and the private API's path on stdout; else one line on stderr where a core dependency
    is outside the versions tested (none: nothing). Returns ``full``."""
    if full:
        from search.compat import optuna_private

        print(versions_text(f"optuna's private API: {optuna_private.describe()}"))
    else:
        warning = untested_line()
        if warning:
            print(f"hypersweep: {warning}", file=sys.stderr)
    return full
