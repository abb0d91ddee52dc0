"""The built-in classifier, with a lost worker: ``options.die_once = "<path>"``: the first branch of a branching
study to start (a run from another's checkpoint: its ``base_params`` are set) creates that file and kills its
worker process; every other run, and that one's retry, trains as ``trainers.classifier:fit``."""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

from trainers.api import Reporter, TrialConfig
from trainers.classifier import fit as classifier_fit


@functools.wraps(classifier_fit)  # its accepted parameters and reported metrics too
def fit(config: TrialConfig, reporter: Reporter) -> dict[str, float]:
    options = dict(config.options)
    marker = str(options.pop("die_once"))
    if config.base_params and not Path(marker).exists():
        Path(marker).write_text(str(config.number))
        os._exit(3)  # the worker process dies mid-task
    return classifier_fit(dataclasses.replace(config, options=options), reporter)
