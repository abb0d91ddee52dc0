"""A closed sampler process answers for its state at once: the campaign's final save must not wait for it."""

from __future__ import annotations

import pickle

import optuna
from optuna.distributions import FloatDistribution

from search.sampling.process import ProcessAsker

DISTS = {"x": FloatDistribution(0.0, 1.0)}


def test_a_closed_process_asker_returns_its_final_state_without_asking_the_gone_child() -> None:
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=3))
    asker = ProcessAsker(study, DISTS, lambda saw: (study.ask(fixed_distributions=DISTS), saw), lambda: None)
    asker.close(timeout=30.0)
    asked_before = asker._state_asked  # noqa: SLF001 - how many state requests went to the child
    state = asker.sampler_state(wait=30.0)
    assert asker._state_asked == asked_before  # noqa: SLF001 - none sent: the child is gone
    assert state is not None and isinstance(pickle.loads(state), optuna.samplers.TPESampler)
    assert isinstance(study.sampler, optuna.samplers.TPESampler)  # the study has its sampler back
