"""Where the controller's reports go besides the study and ``metrics.jsonl``: TensorBoard, MLflow.

The controller records every report a trial makes (for any trainer, remote or not) and tells
each finished trial; :class:`ReportSinks` passes both on to the sinks the spec's ``[logging]``
asks for. :class:`TensorBoardSink` writes event files in ``trials/<n>/`` (one scalar per
reported metric per step; ``tensorboard --logdir runs/<study>/trials`` shows a run per trial).
:class:`MLflowSink` makes an MLflow run per trial: its metrics per step, its params and final
state when told. :class:`WandbSink` makes a Weights & Biases run per trial (``[logging] wandb = true``),
its files in the campaign folder's ``wandb/`` (``WANDB_MODE=offline`` keeps them there, for ``wandb sync``
later). A sink that fails (a full disk, an MLflow server gone) is reported once in the
log and dropped: logging never stops a campaign. :meth:`ReportSinks.close` closes every file.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from search.spec.logs import LoggingSpec
from search.store.folder import CampaignFolder
from search.store.tfevents import EventFileWriter

__all__ = ["ReportSink", "ReportSinks", "TensorBoardSink", "MLflowSink", "WandbSink", "MLFLOW_RUN_ID", "WANDB_RUN_ID"]

log = logging.getLogger(__name__)

MLFLOW_RUN_ID = "mlflow_run_id"  # trials/<n>/mlflow_run_id: the trial's run, found again after resume
_MLFLOW_STATUS = {"COMPLETE": "FINISHED", "PRUNED": "KILLED", "FAIL": "FAILED"}
WANDB_RUN_ID = "wandb_run_id"  # trials/<n>/wandb_run_id: the trial's W&B run, continued after resume


class ReportSink(Protocol):
    """Something that keeps reports: a trial's steps as they come, then how it ended."""

    def record(self, number: int, step: int, metrics: Mapping[str, float], at: float) -> None: ...

    def finish(self, number: int, state: str, values: Sequence[float] | None, params: Mapping[str, Any]) -> None: ...

    def close(self) -> None: ...


class ReportSinks:
    """The campaign's sinks, called from the controller's thread; a failing sink is dropped, once, with a warning."""

    def __init__(self, sinks: Sequence[ReportSink] = ()) -> None:
        self._sinks = list(sinks)

    @classmethod
    def for_campaign(cls, spec: LoggingSpec, folder: CampaignFolder, study: str) -> ReportSinks:
        sinks: list[ReportSink] = []
        if spec.tensorboard:
            sinks.append(TensorBoardSink(folder))
        if spec.mlflow:
            try:
                sinks.append(MLflowSink.open(spec, folder, study))
            except Exception as exc:  # noqa: BLE001 - an unreachable tracking server must not stop the campaign
                log.warning("MLflow tracking is off for this run: %s: %s", type(exc).__name__, exc)
        if spec.wandb:
            sinks.append(WandbSink(folder, spec.wandb_project or study, study))
        return cls(sinks)

    def add(self, sink: ReportSink) -> None:
        """One more sink (e.g. the user's hooks, :mod:`search.loop.hooks`)."""
        self._sinks.append(sink)

    def record(self, number: int, step: int, metrics: Mapping[str, float], at: float) -> None:
        self._each("record", number, step, metrics, at)

    def finish(self, number: int, state: str, values: Sequence[float] | None, params: Mapping[str, Any]) -> None:
        """The trial was told ``state`` (``COMPLETE``, ``PRUNED``, ``FAIL``) with ``values``."""
        self._each("finish", number, state, values, params)

    def close(self) -> None:
        self._each("close")
        self._sinks.clear()

    def _each(self, method: str, *args: Any) -> None:
        for sink in list(self._sinks):
            try:
                getattr(sink, method)(*args)
            except Exception as exc:  # noqa: BLE001 - a logging sink must never stop the campaign
                log.warning("%s stopped: %s: %s", type(sink).__name__, type(exc).__name__, exc)
                self._sinks.remove(sink)
                if method != "close":
                    _close_quietly(sink)


def _close_quietly(sink: ReportSink) -> None:
    try:
        sink.close()
    except Exception as exc:  # noqa: BLE001 - already failing; the warning said so
        log.debug("closing %s: %s", type(sink).__name__, exc)


class TensorBoardSink:
    """An event file per trial in ``trials/<n>/``, made at its first report, written until it is told (the file
    is not held open between writes: see :class:`~search.store.tfevents.EventFileWriter`)."""

    def __init__(self, folder: CampaignFolder) -> None:
        self._folder = folder
        self._writers: dict[int, EventFileWriter] = {}

    def record(self, number: int, step: int, metrics: Mapping[str, float], at: float) -> None:
        writer = self._writers.get(number)
        if writer is None:
            writer = self._writers[number] = EventFileWriter(self._folder.trial(number), f".{number}")
        writer.add_scalars(step, metrics, at)

    def finish(self, number: int, state: str, values: Sequence[float] | None, params: Mapping[str, Any]) -> None:
        writer = self._writers.pop(number, None)
        if writer is not None:
            writer.close()

    def close(self) -> None:
        while self._writers:
            self._writers.popitem()[1].close()


class MLflowSink:
    """A run per trial in an MLflow experiment, through ``MlflowClient`` (no global active run)."""

    def __init__(self, client: Any, experiment_id: str, folder: CampaignFolder) -> None:
        self._client = client
        self._experiment_id = experiment_id
        self._folder = folder
        self._runs: dict[int, str] = {}

    @classmethod
    def open(cls, spec: LoggingSpec, folder: CampaignFolder, study: str) -> MLflowSink:
        """The tracking URI: the spec's, else ``$MLFLOW_TRACKING_URI``, else ``mlflow.db`` (SQLite) in the campaign
        folder (MLflow 3 refuses a new file store, ``mlruns/``, unless told to allow it)."""
        from mlflow.tracking import MlflowClient  # optional; the spec checked it is installed

        uri = spec.mlflow_tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or default_tracking_uri(folder)
        logging.getLogger("mlflow").setLevel(logging.WARNING)  # no INFO lines (database set-up) on the terminal
        client = MlflowClient(tracking_uri=uri)
        name = spec.mlflow_experiment or study
        experiment = client.get_experiment_by_name(name)
        experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(name)
        return cls(client, experiment_id, folder)

    def _run(self, number: int) -> str:
        """The trial's run: known, recorded in its folder (an earlier controller's), or new."""
        run_id = self._runs.get(number)
        if run_id is not None:
            return run_id
        marker = self._folder.trial(number) / MLFLOW_RUN_ID
        run_id = marker.read_text().strip() if marker.exists() else ""
        if not run_id:
            tags = {"hypersweep.trial": str(number), "hypersweep.campaign": str(self._folder.root)}
            run_id = self._client.create_run(self._experiment_id, run_name=f"trial-{number}", tags=tags).info.run_id
            _write_marker(marker, run_id)
        self._runs[number] = run_id
        return run_id

    def record(self, number: int, step: int, metrics: Mapping[str, float], at: float) -> None:
        from mlflow.entities import Metric

        stamp = int(at * 1000)
        batch = [Metric(str(k), float(v), stamp, int(step)) for k, v in metrics.items()]
        self._client.log_batch(self._run(number), metrics=batch)

    def finish(self, number: int, state: str, values: Sequence[float] | None, params: Mapping[str, Any]) -> None:
        from mlflow.entities import Param

        run_id = self._run(number)
        self._client.log_batch(run_id, params=[Param(str(k), str(v)) for k, v in params.items()])
        self._client.set_tag(run_id, "hypersweep.state", state)
        for i, value in enumerate(values or ()):
            self._client.log_metric(run_id, "objective" if len(values or ()) == 1 else f"objective_{i}", value)
        self._client.set_terminated(run_id, _MLFLOW_STATUS.get(state, "FINISHED"))
        del self._runs[number]

    def close(self) -> None:
        self._runs.clear()


def default_tracking_uri(folder: CampaignFolder) -> str:
    """``sqlite:///<campaign folder>/mlflow.db``."""
    return f"sqlite:///{folder.root.resolve() / 'mlflow.db'}"


def _write_marker(path: Path, run_id: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(run_id + "\n")


class WandbSink:
    """A Weights & Biases run per trial (``wandb.init(reinit="create_new")``, several at once), grouped by study.

    Its steps are the reports' steps; when told, its parameters go to the run's config and its state and
    objective values to the summary. Runs live in ``<campaign folder>/wandb/``.
    """

    def __init__(self, folder: CampaignFolder, project: str, group: str) -> None:
        import wandb  # optional; the spec checked it is installed

        self._wandb = wandb
        self._folder = folder
        self._project = project
        self._group = group
        self._runs: dict[int, Any] = {}

    def _run(self, number: int) -> Any:
        run = self._runs.get(number)
        if run is None:
            marker = self._folder.trial(number) / WANDB_RUN_ID
            run_id = marker.read_text().strip() if marker.exists() else ""
            run = self._wandb.init(
                project=self._project,
                group=self._group,
                name=f"trial-{number}",
                id=run_id or None,
                resume="allow" if run_id else None,
                dir=str(self._folder.root),
                reinit="create_new",
                config={"hypersweep.trial": number},
                settings=self._wandb.Settings(silent=True),
            )
            if not run_id:
                _write_marker(marker, run.id)
            self._runs[number] = run
        return run

    def record(self, number: int, step: int, metrics: Mapping[str, float], at: float) -> None:
        self._run(number).log({str(k): float(v) for k, v in metrics.items()}, step=int(step))

    def finish(self, number: int, state: str, values: Sequence[float] | None, params: Mapping[str, Any]) -> None:
        run = self._run(number)
        run.config.update({str(k): v for k, v in params.items()}, allow_val_change=True)
        run.summary["hypersweep.state"] = state
        for i, value in enumerate(values or ()):
            run.summary["objective" if len(values or ()) == 1 else f"objective_{i}"] = value
        run.finish(exit_code=1 if state == "FAIL" else 0)
        del self._runs[number]

    def close(self) -> None:
        while self._runs:
            self._runs.popitem()[1].finish(exit_code=0)
