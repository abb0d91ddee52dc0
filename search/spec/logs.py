"""The spec's ``[logging]`` section: where reports go besides the study (TensorBoard, MLflow).

```toml
[logging]
tensorboard = true          # event files in trials/<n>/ (default: true)
mlflow = false              # a run per trial (needs `pip install mlflow`; default: false)
mlflow_tracking_uri = ""    # default: $MLFLOW_TRACKING_URI, else mlflow.db (SQLite) in the campaign folder
mlflow_experiment = ""      # default: the study's name
wandb = false               # a Weights & Biases run per trial, in the campaign folder's wandb/ (pip install wandb)
wandb_project = ""          # default: the study's name (WANDB_MODE=offline: no server, `wandb sync` later)
```

The writers are :mod:`search.store.sinks`. The trainer's own output always goes to
``trials/<n>/stdout.log``.
"""

from __future__ import annotations

import dataclasses
import importlib.util

from search.compat.versions import install_command
from search.spec.table import SpecTable

__all__ = ["LoggingSpec", "LOGGING_KEYS", "parse_logging"]

LOGGING_KEYS = ("tensorboard", "mlflow", "mlflow_tracking_uri", "mlflow_experiment", "wandb", "wandb_project")


@dataclasses.dataclass(frozen=True)
class LoggingSpec:
    tensorboard: bool = True
    """A TensorBoard event file per trial in `trials/<n>/`: one scalar per reported metric per step."""
    mlflow: bool = False
    """An MLflow run per trial (params, metrics per step, final state); needs `pip install mlflow` (or `pip install -e
    '.[mlflow]'`, the client only: mlflow-skinny)."""
    mlflow_tracking_uri: str = ""  # "": $MLFLOW_TRACKING_URI, else the campaign folder's mlflow.db
    """Empty: `$MLFLOW_TRACKING_URI`, else `mlflow.db` (SQLite) in the campaign folder: `mlflow ui --backend-store-uri
    sqlite:///runs/<study>/mlflow.db`."""
    mlflow_experiment: str = ""  # "": the study's name
    """Empty: the study's name."""
    wandb: bool = False
    """A Weights & Biases run per trial (its reports per step, its params in the config, state and objective in the
    summary), grouped by study, files in the campaign folder's `wandb/`; needs `pip install wandb` (or `pip install -e
    '.[wandb]'`). `WANDB_MODE=offline` keeps the runs there (`wandb sync runs/<study>/wandb/offline-run-*` uploads them
    later)."""
    wandb_project: str = ""  # "": the study's name
    """Empty: the study's name."""


def parse_logging(t: SpecTable, check_installed: bool = True) -> LoggingSpec:
    """``check_installed``: refuse ``mlflow = true`` when mlflow cannot be imported here."""
    spec = LoggingSpec(
        tensorboard=t.bool("tensorboard", True),
        mlflow=t.bool("mlflow", False),
        mlflow_tracking_uri=t.str("mlflow_tracking_uri", ""),
        mlflow_experiment=t.str("mlflow_experiment", ""),
        wandb=t.bool("wandb", False),
        wandb_project=t.str("wandb_project", ""),
    )
    for key, wanted in (("wandb", spec.wandb), ("mlflow", spec.mlflow)):
        if check_installed and wanted and importlib.util.find_spec(key) is None:
            raise t.error(
                key, f"needs the [{key}] extra ({key} not installed): {install_command(key)} (or set {key} = false)"
            )
    return spec
