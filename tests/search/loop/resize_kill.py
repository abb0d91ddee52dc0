"""A controller process for the resume-mid-resize test: runs the resize campaign and SIGKILLs itself right after
its first resize was decided, recorded and sent (``python -m tests.search.loop.resize_kill RUNS_DIR``).

The moment is chosen by wrapping ``Campaign._next_segment`` in this process only; everything else is the real
campaign (LocalCluster, journal storage, the project's trainer)."""

from __future__ import annotations

import os
import signal
import sys
import tomllib
from pathlib import Path
from typing import Any

from search.loop.campaign import Campaign
from search.loop.hooks import CampaignHooks
from search.session.runner import RunOptions, run_campaign
from search.spec.campaign_spec import parse_spec
from tests.search.loop.test_segments import ResizeAtRung

SPEC = """
[study]
name = "resize-kill"
direction = "maximize"
metric = "val_accuracy"
sampler = "random"
seed = 3
n_trials = 1
max_retries = 0

[trainer]
entry = "trainers.classifier:fit"
dataset = "digits"
epochs = 3
device = "cpu"

[space]
optimizer = "adam"
lr = { type = "float", low = 1e-3, high = 1e-2, log = true }
batch_size = 32

[cluster]
n_workers = 1
slots_per_worker = 2
"""


def hooks() -> CampaignHooks:
    return CampaignHooks(policies=[ResizeAtRung(rung=1, width=2)])


def main(runs_dir: Path) -> None:
    original = Campaign._next_segment

    def killed_after(self: Campaign, *args: Any) -> None:
        original(self, *args)
        os.kill(os.getpid(), signal.SIGKILL)

    Campaign._next_segment = killed_after  # type: ignore[method-assign]
    spec = parse_spec(tomllib.loads(SPEC), "resize-kill.toml", SPEC)
    run_campaign(spec, RunOptions(runs_dir=runs_dir, progress=False, hooks=hooks()))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
