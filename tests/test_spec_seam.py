"""The spec seam kept narrow (issue 50, point 4): a function takes the sections of the spec it reads, not the
whole ``CampaignSpec``; one function builds the pruner; the session builds its sampler without the loop's supply;
the supply tells the ledger nothing (the campaign alone moves trials to it).

``python -m tests.test_spec_seam`` lists the functions that still take the whole spec.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("search", "spaces", "trainers", "cluster")
# Functions with a parameter annotated ``CampaignSpec``: 64 in 24 modules before the seam was narrowed, 39 in 20
# after (those left read several sections, or are the loop's parts another change rewrites: Ledger, Dispatcher,
# policies_for, population_of, pbt/replay.py, scaling/outcomes.py's goal_of). 42 once the scaling sweep's lr rounds
# came (lr_rounds.py's next_round and round_budget return the spec with its budget raised) and the trial model's
# cost status took [study] and [trainer] alone. 46 with the branching study (session/branching.py): it derives its
# own campaign's spec from the sweep's (branching_spec), runs rounds of a Campaign (CampaignSubmit), and is the
# session's entry to it (run_branching_study, runner._branch). 47: reproduce's _replay (a PBT member replays with
# the whole spec).
MAX_WHOLE_SPEC_FUNCTIONS = 47


def whole_spec_functions(root: Path = ROOT, packages: tuple[str, ...] = PACKAGES) -> list[str]:
    """``module.py:line name`` of every function or method with a parameter annotated ``CampaignSpec``
    (``CampaignSpec | None`` and the quoted annotation count too)."""
    found = []
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                params = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
                if any(p.annotation is not None and "CampaignSpec" in ast.unparse(p.annotation) for p in params):
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name}")
    return found


def test_few_functions_take_the_whole_spec() -> None:
    found = whole_spec_functions()
    assert len(found) <= MAX_WHOLE_SPEC_FUNCTIONS, "\n".join(found)


def test_the_count_sees_every_way_of_annotating_the_spec(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "m.py").write_text(
        "def a(spec: CampaignSpec) -> None: ...\n"
        "def b(x: int, *, spec: 'CampaignSpec | None' = None) -> None: ...\n"
        "class C:\n    def __init__(self, spec: CampaignSpec) -> None: ...\n"
        "def d(study: StudySpec, spec) -> None: ...\n"
    )
    assert whole_spec_functions(tmp_path, ("pkg",)) == ["pkg/m.py:1 a", "pkg/m.py:2 b", "pkg/m.py:4 __init__"]


def _calls(path: Path) -> set[str]:
    """The names ``path`` calls (``f(...)`` and ``x.f(...)``: ``f``)."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def test_one_place_builds_the_pruner() -> None:
    """``install_pruner`` gives a study its pruner (the runner's study, the campaign's at start and at the first
    report); besides it, only the spec's check of a pruner class builds one, and nothing else picks a NopPruner."""
    building = {
        str(path.relative_to(ROOT))
        for path in (ROOT / "search").rglob("*.py")
        if {"make_pruner", "NopPruner"} & _calls(path)
    }
    assert building == {"search/sampling/pruning.py", "search/spec/component_check.py"}


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (``from a.b import c``: ``a.b`` and ``a.b.c``), at any depth."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_the_session_builds_its_sampler_without_the_supply() -> None:
    reaching = [str(p.relative_to(ROOT)) for p in (ROOT / "search" / "session").rglob("*.py")]
    reaching = [name for name in reaching if "search.loop.supply" in _imports(ROOT / name)]
    assert reaching == []


def test_the_supply_tells_the_ledger_nothing_and_takes_the_dispatchers_count_once() -> None:
    for name in ("supply.py", "trial_maker.py"):  # the supply and what its askers call
        assert "search.loop.ledger" not in _imports(ROOT / "search" / "loop" / name), name
    tree = ast.parse((ROOT / "search" / "loop" / "supply.py").read_text())
    supply = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TrialSupply")
    threaded = [
        f.name
        for f in supply.body
        if isinstance(f, ast.FunctionDef) and any(a.arg == "launched" for a in f.args.args + f.args.kwonlyargs)
    ]
    assert threaded == []


if __name__ == "__main__":
    lines = whole_spec_functions()
    print("\n".join(lines))
    print(f"{len(lines)} functions in {len({line.split(':')[0] for line in lines})} modules take the whole spec")
