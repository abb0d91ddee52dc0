"""Optuna's canonical define-by-run space (``n_layers``, then ``n_units_l{i}`` per layer), written once in the
spec, in a real campaign: each trainer gets exactly the loop's parameters, wherever the sampler runs."""

from __future__ import annotations

from pathlib import Path

import pytest

import search

SPACE = {
    "n_layers": {"type": "int", "low": 1, "high": 3},
    "n_units_l{i}": {"type": "int", "low": 4, "high": 64, "log": True, "repeat": "n_layers"},
    "dropout": {"type": "float", "low": 0.0, "high": 0.5, "when": {"n_layers": {">=": 2}}},
    "kernel": {"type": "int", "low": 1, "high": "n_layers"},
}


def fit(config, reporter):  # noqa: ANN001, ANN201 - a user's plain trainer
    p = config.params
    n = p["n_layers"]
    expected = {"n_layers", "kernel", *(f"n_units_l{i}" for i in range(n)), *(["dropout"] if n >= 2 else [])}
    ok = float(set(p) == expected and 1 <= p["kernel"] <= n)
    reporter.report(1, {"ok": ok})
    return {"ok": ok}


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("sampling", ["process", "thread"])
def test_the_n_units_loop_needs_no_hand_unrolling(tmp_path: Path, sampling: str) -> None:
    spec = {
        "study": {
            "name": f"loop-{sampling}",
            "direction": "maximize",
            "metric": "ok",
            "sampler": "tpe",
            "seed": 9,
            "n_trials": 12,
            "sampling": sampling,
        },
        "trainer": {"epochs": 1},
        "space": SPACE,
        "cluster": {"n_workers": 1},
    }
    result = search.run(spec, trainer=fit, runs_dir=tmp_path, progress=False)
    trials = result.study.get_trials(deepcopy=False)
    assert len(trials) == 12 and all(t.value == 1.0 for t in trials), [t.params for t in trials]
    assert {t.params["n_layers"] for t in trials} == {1, 2, 3}
