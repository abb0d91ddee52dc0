"""The built-in trainer: an MLP or CNN classifier on "digits", "synthetic" or "mnist1d" (MLP only).

``fit(config, reporter)`` parses the params, builds data, model, optimizer and LR
schedule from ``config.seed``, and hands them to :func:`trainers.loop.train`.

Data parallel (``config.data_parallel = k > 1``): called as usual, ``fit`` checks
the config and launches k ranks (:func:`trainers.ddp.launch`), each running this
same ``fit``; a rank (``RANK``/``WORLD_SIZE`` set) wraps the model in
``DistributedDataParallel`` and trains its shard of every global batch of
``batch_size`` examples (``batch_size / k`` per replica; ``batch_size`` must be a
multiple of k). ``options.max_micro_batch`` caps the examples per forward/backward
pass of a replica (gradient accumulation keeps the global batch), also with k = 1.
The learning rate and its scaling rules apply to the global batch.

This module imports no torch: checking a spec against the trainer (``hypersweep check``) reads what
``fit`` declares here; the training itself is :mod:`trainers.classifier_train`, imported when a trial runs.
"""

from __future__ import annotations

from typing import Any

from trainers.api import Reporter, TrainerInfo, TrialConfig, declare
from trainers.classifier_params import (  # noqa: F401 - re-exported: the params are read from here as before
    ACCEPTED_PARAMS,
    OPTIMIZERS,
    PIECEWISE,
    ClassifierParams,
    check_data_parallel,
    parse_params,
)

__all__ = ["ClassifierParams", "ACCEPTED_PARAMS", "parse_params", "check_data_parallel", "fit"]

# Defined in trainers.classifier_train (they need torch), read from here as before.
_TRAINING = ("resolve_device", "torch_settings", "make_optimizer", "make_lr_schedule")


def fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    """Train a classifier as ``config`` says, reporting once per epoch; return the last metrics."""
    from trainers.classifier_train import run  # torch loads here, when a trial runs

    return run(config, reporter)


def __getattr__(name: str) -> Any:
    if name in _TRAINING:
        from trainers import classifier_train

        return getattr(classifier_train, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


declare(
    fit,
    TrainerInfo(
        accepted_params=ACCEPTED_PARAMS,
        reported_metrics=frozenset(
            {
                "epoch",
                "train_loss",
                "val_loss",
                "val_accuracy",
                "lr",
                "steps",
                "examples",
                "epoch_seconds",
                "n_params",
                "macs",
                "b_simple",
                "b_simple_lo",
                "b_simple_hi",
                "b_simple_limit",
                "b_simple_above_range",
            }
        ),
        supports_pbt=True,  # honours schedule_epochs and inherit_checkpoint
    ),
)
