"""What changed between the spec a campaign started with and the one it is resumed with.

The study records the text of its frozen spec (:data:`SPEC_TEXT`); ``resume`` compares it with the
campaign folder's ``spec.toml`` (or ``--spec FILE``), key by key (``study.n_trials: 20 -> 40``), and
refuses a changed spec unless changes are allowed. ``--n-trials N`` is a change of its own, always allowed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import tomllib
from collections.abc import Mapping
from typing import Any

from search.spec.toml_text import to_toml
from spaces.errors import InputError

__all__ = ["SPEC_TEXT", "SPEC_CHANGES", "SpecChangedError", "spec_changes", "with_n_trials", "resume_text"]

SPEC_TEXT = "spec_text"  # study user attribute: the text of the spec the campaign runs under
SPEC_CHANGES = "spec_changes"  # study user attribute: list of {"time", "changes"}, each change allowed on resume
FIXED_KEYS = ("study.name", "study.storage")  # the study itself: no resume can change them
_MISSING = object()


class SpecChangedError(InputError):
    """A resumed campaign's spec differs from the one it started with (exit status 2)."""


def spec_changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> list[str]:
    """One line per dotted key whose value differs: ``study.n_trials: 20 -> 40`` (``(unset)`` for a missing key)."""
    before, after = _flat(old), _flat(new)
    keys = list(dict.fromkeys([*before, *after]))
    return [
        f"{key}: {_shown(before.get(key, _MISSING))} -> {_shown(after.get(key, _MISSING))}"
        for key in keys
        if before.get(key, _MISSING) != after.get(key, _MISSING)
    ]


def _flat(data: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_flat(value, f"{name}."))
        else:
            out[name] = value
    return out


def _shown(value: Any) -> str:
    return "(unset)" if value is _MISSING else json.dumps(value, ensure_ascii=False, default=str)


def with_n_trials(text: str, n_trials: int) -> str:
    """``text`` with ``[study] n_trials = n_trials``: the one line edited (comments kept) where that is safe."""
    want = copy.deepcopy(tomllib.loads(text))
    want.setdefault("study", {})["n_trials"] = n_trials
    edited = _edit_n_trials(text, n_trials)
    if edited is not None and _loads(edited) == want:
        return edited
    # a spec the line edit cannot reach (an inline [study] table): rewritten
    return to_toml(want, header=f"# n_trials set to {n_trials} by hypersweep resume")


def _edit_n_trials(text: str, n_trials: int) -> str | None:
    lines = text.splitlines(keepends=True)
    in_study = False
    for i, line in enumerate(lines):
        if re.match(r"\s*\[", line):
            if in_study:
                lines.insert(i, f"n_trials = {n_trials}\n")
                return "".join(lines)
            in_study = re.match(r"\s*\[\s*study\s*\]\s*(#.*)?$", line) is not None
        elif in_study and re.match(r"\s*n_trials\s*=", line):
            comment = re.search(r"#.*$", line)
            lines[i] = f"n_trials = {n_trials}" + (f"  {comment.group(0)}" if comment else "") + "\n"
            return "".join(lines)
    if in_study:
        return "".join(lines) + ("" if text.endswith("\n") or not text else "\n") + f"n_trials = {n_trials}\n"
    return None


def _loads(text: str) -> dict[str, Any] | None:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return None


def resume_text(
    where: str, recorded: str | None, recorded_sha: str | None, current: str, n_trials: int | None, allow: bool
) -> tuple[str, list[str]]:
    """The spec text a resume runs under, and its changes from ``recorded`` (the text the campaign ran under).

    ``current``: the campaign folder's ``spec.toml`` or the spec given; ``n_trials``: ``--n-trials``.
    A change other than ``n_trials`` needs ``allow``; the study's name and storage never change.
    """
    text = with_n_trials(current, n_trials) if n_trials is not None else current
    if recorded is None and recorded_sha in (None, hashlib.sha256(current.encode()).hexdigest()):
        recorded = current  # a campaign that kept only its spec's hash (or nothing), and the spec still matches it
    if recorded is None:
        if not allow:
            raise SpecChangedError(
                f"{where}: the spec differs from the one the campaign started with (it kept only "
                "its hash, so the changes cannot be listed); resume with --allow-changes to run "
                "the rest under it"
            )
        return text, ["spec: changed (the campaign kept only the earlier spec's hash)"]
    changes = spec_changes(tomllib.loads(recorded), tomllib.loads(text))
    fixed = [line for line in changes if line.split(":", 1)[0] in FIXED_KEYS]
    if fixed:
        raise SpecChangedError(f"{where}: a resumed campaign keeps its study; cannot change {'; '.join(fixed)}")
    others = [line for line in changes if n_trials is None or not line.startswith("study.n_trials:")]
    if others and not allow:
        listed = "".join(f"\n  {line}" for line in others)
        raise SpecChangedError(
            f"{where}: the spec differs from the one the campaign started with:{listed}\n"
            "resume with --allow-changes to run the rest under the new spec, "
            "or undo the change"
        )
    return text, changes
