"""Trainers users already have, as hypersweep trainers: a PyTorch Lightning callback
(:mod:`trainers.integrations.lightning`) and a Hugging Face ``transformers`` ``TrainerCallback``
(:mod:`trainers.integrations.huggingface`).

Each turns the framework's validation metrics into ``reporter.report``, stops training when the
controller asks (``reporter.should_stop()``), and saves and restores through the framework's own
checkpoints in the trial's ``checkpoint_dir``. Importing this package imports no framework; each
module imports its own when it is imported (``pip install -e '.[lightning]'`` / ``'.[huggingface]'``).
"""

from __future__ import annotations

__all__: list[str] = []
