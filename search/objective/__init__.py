"""An Optuna objective, ``objective(trial)``, run unchanged on the cluster's workers (define-by-run).

:class:`~search.objective.trainer.ObjectiveTrainer` turns the objective into a trainer, ``fit(config, reporter)``;
the ``trial`` it hands the objective (:class:`~search.objective.trial.ObjectiveTrial`) asks the controller for each
suggestion, through the reporter's ``query`` (:mod:`search.objective.messages`: what a question and its answer
hold). The controller's answers are :mod:`search.loop.queries`; the front door is :func:`search.optimize`.
"""

from __future__ import annotations

__all__: list[str] = []
