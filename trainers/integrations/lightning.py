"""PyTorch Lightning as a hypersweep trainer: :class:`HypersweepCallback` reports each validation, stops
when asked and checkpoints through Lightning's own ``save_checkpoint`` / ``fit(ckpt_path=...)``.

```python
import lightning as L
from trainers.integrations.lightning import HypersweepCallback

def fit(config, reporter):
    model = MyModule(lr=config.params["lr"])
    callback = HypersweepCallback(config, reporter)
    trainer = L.Trainer(max_epochs=config.epochs, callbacks=[callback], **callback.trainer_defaults())
    trainer.fit(model, train_loader, val_loader, ckpt_path=callback.ckpt_path)
    return callback.metrics          # the last validation's metrics (what the study is told)
```

Each validation epoch becomes ``reporter.report(epoch, {**trainer.callback_metrics, "epoch": epoch})``
(epochs count from 1; the sanity check reports nothing). After a report the callback asks
``reporter.should_stop()`` and, when the controller asks it to stop (pruned, time limit), sets
``trainer.should_stop``. Every ``config.checkpoint_every`` epochs it writes ``lightning.ckpt`` in the
trial's ``checkpoint_dir`` (atomically: a file beside it, then a rename); :attr:`ckpt_path` is that
file when it exists, so a trial run again (a lost worker, ``resume``) continues where it stopped.
Lightning is imported with this module (``lightning``, else ``pytorch_lightning``).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

try:
    import lightning.pytorch as pl
except ImportError:  # the older distribution name
    import pytorch_lightning as pl  # type: ignore[no-redef]

from trainers.api import Reporter, TrialConfig
from trainers.integrations._metrics import plain_metrics

__all__ = ["HypersweepCallback", "CHECKPOINT_FILE"]

CHECKPOINT_FILE = "lightning.ckpt"


class HypersweepCallback(pl.Callback):
    """Validation metrics to ``reporter.report``, the controller's stop to ``trainer.should_stop``, and
    Lightning checkpoints in the trial's folder."""

    def __init__(self, config: TrialConfig, reporter: Reporter) -> None:
        super().__init__()
        self.config = config
        self.reporter = reporter
        self.metrics: dict[str, float] = {}
        self.stopped = False  # the controller asked this trial to stop

    @property
    def checkpoint_file(self) -> Path | None:
        """``<checkpoint_dir>/lightning.ckpt`` (None: the trial keeps no checkpoints)."""
        folder = self.config.checkpoint_dir
        return None if folder is None else Path(folder) / CHECKPOINT_FILE

    @property
    def ckpt_path(self) -> str | None:
        """What to pass as ``trainer.fit(..., ckpt_path=...)``: the trial's checkpoint if it has one."""
        path = self.checkpoint_file
        return str(path) if path is not None and path.is_file() else None

    def trainer_defaults(self) -> dict[str, Any]:
        """``Trainer`` settings a trial wants: its devices, no logger or checkpointing of Lightning's own
        (this callback checkpoints), no progress bar in the trial's log, deterministic if the study is."""
        cuda = self.config.device != "cpu" and bool(self.config.devices)
        return {
            "accelerator": "gpu" if cuda else "cpu",
            "devices": len(self.config.devices) if cuda else 1,
            "logger": False,
            "enable_checkpointing": False,
            "enable_progress_bar": False,
            "enable_model_summary": False,
            "deterministic": self.config.deterministic,
        }

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        pl.seed_everything(self.config.seed, workers=True, verbose=False)

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        if trainer.sanity_checking:
            return
        epoch = int(trainer.current_epoch) + 1
        self.metrics = {**plain_metrics(trainer.callback_metrics), "epoch": float(epoch)}
        if trainer.is_global_zero:
            self.reporter.report(epoch, self.metrics)
        if self.reporter.should_stop():
            self.stopped = True
            trainer.should_stop = True

    def on_train_epoch_end(self, trainer: Any, pl_module: Any) -> None:
        path = self.checkpoint_file
        epoch = int(trainer.current_epoch) + 1
        if path is None or (epoch % self.config.checkpoint_every and epoch != trainer.max_epochs):
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        trainer.save_checkpoint(partial)
        if trainer.is_global_zero:
            os.replace(partial, path)

    def state_dict(self) -> dict[str, Any]:
        return {"metrics": dict(self.metrics)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.metrics = dict(state_dict.get("metrics", {}))
