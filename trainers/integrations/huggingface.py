"""Hugging Face ``transformers`` as a hypersweep trainer: :class:`HypersweepCallback` (a ``TrainerCallback``)
reports each evaluation, stops when asked, and the ``Trainer``'s own checkpoints resume the trial.

```python
from transformers import Trainer
from trainers.integrations.huggingface import HypersweepCallback, last_checkpoint, training_arguments

def fit(config, reporter):
    args = training_arguments(config, learning_rate=config.params["lr"], per_device_train_batch_size=32)
    callback = HypersweepCallback(config, reporter)
    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=val,
                      compute_metrics=accuracy, callbacks=[callback])
    trainer.train(resume_from_checkpoint=last_checkpoint(config))
    return callback.metrics           # the last evaluation's metrics: eval_loss, eval_accuracy, ..., epoch
```

Each evaluation becomes ``reporter.report(epoch, {**metrics, "epoch": epoch})``: the ``Trainer``'s own
names (``eval_loss``, ``eval_<compute_metrics key>``), at the epoch it ended (counting from 1; evaluating
every ``eval_steps`` instead reports at the global step). When the controller asks the trial to stop, the
callback sets ``control.should_training_stop``. :func:`training_arguments` puts the ``Trainer``'s output
(its ``checkpoint-<step>/`` folders) in the trial's ``checkpoint_dir``, evaluates and saves every epoch,
seeds from the trial, logs nowhere else (``report_to="none"``); :func:`last_checkpoint` finds the newest
one, so a trial run again continues from it. ``transformers`` is imported with this module.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import transformers
from transformers.trainer_utils import get_last_checkpoint

from trainers.api import Reporter, TrialConfig
from trainers.integrations._metrics import plain_metrics

__all__ = ["HypersweepCallback", "training_arguments", "last_checkpoint"]


class HypersweepCallback(transformers.TrainerCallback):
    """Evaluation metrics to ``reporter.report``; the controller's stop to ``control.should_training_stop``."""

    def __init__(self, config: TrialConfig, reporter: Reporter) -> None:
        self.config = config
        self.reporter = reporter
        self.metrics: dict[str, float] = {}
        self.stopped = False  # the controller asked this trial to stop

    def on_evaluate(
        self, args: Any, state: Any, control: Any, metrics: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        by_epoch = str(getattr(args.eval_strategy, "value", args.eval_strategy)) == "epoch"
        epoch = float(state.epoch or 0.0)
        step = int(round(epoch)) if by_epoch else int(state.global_step)
        self.metrics = {**plain_metrics(metrics or {}), "epoch": float(round(epoch) if by_epoch else epoch)}
        if state.is_world_process_zero:
            self.reporter.report(step, self.metrics)
        if self.reporter.should_stop():
            self.stopped = True
            control.should_training_stop = True


def training_arguments(config: TrialConfig, **overrides: Any) -> transformers.TrainingArguments:
    """``TrainingArguments`` for a trial: output in its ``checkpoint_dir``, ``config.epochs`` epochs, evaluate and
    save each epoch (keeping the newest two), its seed, its device, no logging integrations; ``overrides`` win."""
    output = config.checkpoint_dir or str(Path(config.log_dir or ".") / "hf-output")
    settings: dict[str, Any] = {
        "output_dir": output,
        "num_train_epochs": config.epochs,
        "eval_strategy": "epoch",
        "save_strategy": "epoch",
        "save_total_limit": 2,
        "logging_strategy": "epoch",
        "report_to": "none",
        "seed": config.seed,
        "data_seed": config.seed,
        "use_cpu": config.device == "cpu" or not config.devices,
        "disable_tqdm": True,
        "full_determinism": config.deterministic,
    }
    if config.checkpoint_dir is None:
        settings["save_strategy"] = "no"
    return transformers.TrainingArguments(**{**settings, **overrides})


def last_checkpoint(config: TrialConfig) -> str | None:
    """The trial's newest ``checkpoint-<step>/`` folder, to pass as ``trainer.train(resume_from_checkpoint=...)``."""
    folder = config.checkpoint_dir
    if folder is None or not Path(folder).is_dir():
        return None
    return get_last_checkpoint(folder)
