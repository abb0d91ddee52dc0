"""A spec dict for the toy trainer (``toy_trainers:fit``, one float parameter ``quality``), for API tests."""

from __future__ import annotations

from typing import Any


def toy_spec(name: str, n_trials: int = 2, epochs: int = 2, **study: Any) -> dict[str, Any]:
    return {
        "study": {"name": name, "direction": "maximize", "metric": "score", "sampler": "random", "seed": 1,
                  "n_trials": n_trials, **study},
        "trainer": {"entry": "toy_trainers:fit", "epochs": epochs},
        "space": {"quality": {"type": "float", "low": 0.0, "high": 1.0}},
        "cluster": {"n_workers": 1},
    }  # fmt: skip
