"""The spec's ``[logging]`` section: where reports go besides the study (TensorBoard, MLflow).

```toml
[logging]
tensorboard = true          # event files in trials/<n>/ (default: true)
mlflow = false              # a run per trial (needs `pip install mlflow`; default: false)
mlflow_tracking_uri = ""    # default: $MLFLOW_TRACKING_URI, else mlflow.db (SQLite) in the campaign folder
mlflow_experiment = ""      # default: the study's name
```

The writers are :mod:`search.store.sinks`. The trainer's own output always goes to
``trials/<n>/stdout.log``.
"""

from __future__ import annotations

import dataclasses
import importlib.util

from search.spec.table import SpecTable

__all__ = ["LoggingSpec", "LOGGING_KEYS", "parse_logging"]

LOGGING_KEYS = ("tensorboard", "mlflow", "mlflow_tracking_uri", "mlflow_experiment")


@dataclasses.dataclass(frozen=True)
class LoggingSpec:
    tensorboard: bool = True
    mlflow: bool = False
    mlflow_tracking_uri: str = ""  # "": $MLFLOW_TRACKING_URI, else the campaign folder's mlflow.db
    mlflow_experiment: str = ""  # "": the study's name


def parse_logging(t: SpecTable, check_installed: bool = True) -> LoggingSpec:
    """``check_installed``: refuse ``mlflow = true`` when mlflow cannot be imported here."""
    spec = LoggingSpec(
        tensorboard=t.bool("tensorboard", True),
        mlflow=t.bool("mlflow", False),
        mlflow_tracking_uri=t.str("mlflow_tracking_uri", ""),
        mlflow_experiment=t.str("mlflow_experiment", ""),
    )
    if check_installed and spec.mlflow and importlib.util.find_spec("mlflow") is None:
        raise t.error("mlflow", "mlflow is not installed here; pip install mlflow (or set mlflow = false)")
    return spec
