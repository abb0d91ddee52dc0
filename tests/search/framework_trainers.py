"""Trainers written the way Lightning and Hugging Face users write them, through hypersweep's integrations.

A 2-layer MLP on 256 synthetic examples (8 features, 2 classes, a linear rule), CPU only.
``options.sleep``: seconds per training batch (so a stop request reaches a trial before it ends);
``options.die_after_epoch = [epoch, "<marker path>"]``: the first trial to get there exits its worker
process once (a lost worker), after that epoch's checkpoint.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import torch
from torch import nn

from trainers.api import Reporter, TrialConfig

N, FEATURES = 256, 8


def synthetic(seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(N, FEATURES, generator=gen)
    y = (x[:, :2].sum(dim=1) > 0).long()
    return x, y


def mlp(hidden: int) -> nn.Module:
    return nn.Sequential(nn.Linear(FEATURES, hidden), nn.ReLU(), nn.Linear(hidden, 2))


def _epoch_done(config: TrialConfig, epoch: int) -> None:
    """Note each epoch trained in ``trials/<n>/epochs.log`` (a resumed trial does not train its epochs again);
    then, with ``die_after_epoch``, the worker may die."""
    if config.checkpoint_dir:
        with open(Path(config.checkpoint_dir) / "epochs.log", "a") as log:
            log.write(f"{epoch}\n")
    when = config.options.get("die_after_epoch")
    if when and epoch == int(when[0]) and not Path(when[1]).exists():
        Path(when[1]).write_text(str(config.number))
        os._exit(3)


# --- PyTorch Lightning --------------------------------------------------------------------------------


def lightning_fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    import lightning as L
    from torch.utils.data import DataLoader, TensorDataset

    from trainers.integrations.lightning import HypersweepCallback

    class Classifier(L.LightningModule):
        def __init__(self, lr: float, hidden: int) -> None:
            super().__init__()
            self.lr, self.net = lr, mlp(hidden)

        def training_step(self, batch, _index):  # noqa: ANN001, ANN202 - Lightning's hook
            time.sleep(float(config.options.get("sleep", 0.0)))
            x, y = batch
            return nn.functional.cross_entropy(self.net(x), y)

        def validation_step(self, batch, _index):  # noqa: ANN001, ANN202
            x, y = batch
            logits = self.net(x)
            self.log("val_loss", nn.functional.cross_entropy(logits, y))
            self.log("val_accuracy", (logits.argmax(dim=1) == y).float().mean())

        def configure_optimizers(self):  # noqa: ANN202
            return torch.optim.SGD(self.parameters(), lr=self.lr)

    class EpochDone(L.Callback):
        def on_train_epoch_end(self, trainer, pl_module):  # noqa: ANN001, ANN202 - after the checkpoint
            _epoch_done(config, trainer.current_epoch + 1)

    x, y = synthetic()
    train = DataLoader(
        TensorDataset(x[:192], y[:192]),
        batch_size=32,
        shuffle=True,
        generator=torch.Generator().manual_seed(config.seed),
    )
    val = DataLoader(TensorDataset(x[192:], y[192:]), batch_size=64)
    callback = HypersweepCallback(config, reporter)
    trainer = L.Trainer(max_epochs=config.epochs, callbacks=[callback, EpochDone()], **callback.trainer_defaults())
    model = Classifier(float(config.params["lr"]), int(config.params.get("hidden", 16)))
    trainer.fit(model, train, val, ckpt_path=callback.ckpt_path)
    return callback.metrics


# --- Hugging Face transformers ------------------------------------------------------------------------


class _HFClassifier(nn.Module):
    """A plain module the ``Trainer`` can train: ``forward(x, labels)`` returns the loss and the logits."""

    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.net = mlp(hidden)

    def forward(self, x: torch.Tensor, labels: torch.Tensor | None = None) -> dict[str, torch.Tensor]:
        logits = self.net(x)
        out = {"logits": logits}
        if labels is not None:
            out["loss"] = nn.functional.cross_entropy(logits, labels)
        return out


def _accuracy(prediction) -> dict[str, float]:  # noqa: ANN001 - transformers' EvalPrediction
    return {"accuracy": float((prediction.predictions.argmax(-1) == prediction.label_ids).mean())}


def hf_fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    import transformers

    from trainers.integrations.huggingface import HypersweepCallback, last_checkpoint, training_arguments

    class EpochDone(transformers.TrainerCallback):
        def on_save(self, args, state, control, **kwargs):  # noqa: ANN001, ANN003, ANN201 - after the checkpoint
            _epoch_done(config, int(round(state.epoch or 0)))

    class Slow(transformers.TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):  # noqa: ANN001, ANN003, ANN201
            time.sleep(float(config.options.get("sleep", 0.0)))

    x, y = synthetic()
    train = [{"x": x[i], "labels": y[i]} for i in range(192)]
    val = [{"x": x[i], "labels": y[i]} for i in range(192, N)]
    args = training_arguments(
        config,
        learning_rate=float(config.params["lr"]),
        per_device_train_batch_size=32,
        per_device_eval_batch_size=64,
        remove_unused_columns=False,
    )
    callback = HypersweepCallback(config, reporter)
    trainer = transformers.Trainer(
        model=_HFClassifier(int(config.params.get("hidden", 16))),
        args=args,
        train_dataset=train,
        eval_dataset=val,
        compute_metrics=_accuracy,
        callbacks=[callback, EpochDone(), Slow()],
    )
    trainer.train(resume_from_checkpoint=last_checkpoint(config))
    return callback.metrics
