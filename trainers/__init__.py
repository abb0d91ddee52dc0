"""PyTorch trainers: plain ``fit(config, reporter) -> metrics`` functions.

Importing this package stays cheap (no torch); the built-in trainer is
``trainers.classifier:fit``.
"""

from trainers.api import PrintReporter, RecordingReporter, Reporter, TrainerImportError, TrialConfig, load_trainer

__all__ = ["TrialConfig", "Reporter", "RecordingReporter", "PrintReporter", "load_trainer", "TrainerImportError"]
