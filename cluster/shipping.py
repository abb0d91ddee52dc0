"""How a trainer travels to the workers: by value or by name (see :class:`cluster.executor_api.TrialRequest`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainers.api import entry_of, load_trainer, registered_trainer, trainer_folders

from .entrypoint import TrainerShipment

__all__ = ["ship_trainer", "Shipments"]


def ship_trainer(trainer: str | Callable[..., Any]) -> TrainerShipment:
    """``trainer`` (an entry or a function) as it travels to a worker: by value or by name
    (see :class:`~cluster.executor_api.TrialRequest`)."""
    if callable(trainer):
        entry = entry_of(trainer)
        return TrainerShipment.by_value(entry, trainer, trainer_folders(entry))
    fn = registered_trainer(trainer)
    if fn is None and trainer.partition(":")[0] == "__main__":
        fn = load_trainer(trainer)  # the controller's own __main__: no worker has it
    if fn is not None:
        return TrainerShipment.by_value(trainer, fn, trainer_folders(trainer))
    return TrainerShipment(trainer, trainer_folders(trainer))


class Shipments:
    """An executor's trainers as they travel: each made once (and so pickled once), then reused."""

    def __init__(self) -> None:
        self._made: dict[Any, TrainerShipment] = {}

    def __call__(self, trainer: str | Callable[..., Any]) -> TrainerShipment:
        shipment = self._made.get(trainer)
        if shipment is None:
            shipment = self._made[trainer] = ship_trainer(trainer)
        return shipment
