"""A controller process for the resume-mid-resize test: runs the resize campaign and SIGKILLs itself right after
its first resize was decided, recorded and sent (``python -m tests.search.loop.resize_kill RUNS_DIR [elastic]``:
a test policy's resize, or the ``[elastic]`` policy's on 2 workers x 1 slot).

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
from tests.search.toy_specs import digits_toml

SPEC = digits_toml("resize-kill")


ELASTIC = digits_toml(
    "elastic-kill",
    pruner="asha",
    cluster={"n_workers": 2, "slots_per_worker": 1},
    top={"pruner": {"min_resource": 1, "reduction_factor": 2}, "elastic": {"widths": [1, 2], "reserve": 0}},
)


def hooks() -> CampaignHooks:
    return CampaignHooks(policies=[ResizeAtRung(rung=1, width=2)])


def main(runs_dir: Path, elastic: bool = False) -> None:
    original = Campaign._next_segment

    def killed_after(self: Campaign, *args: Any) -> None:
        original(self, *args)
        os.kill(os.getpid(), signal.SIGKILL)

    Campaign._next_segment = killed_after  # type: ignore[method-assign]
    text = ELASTIC if elastic else SPEC
    spec = parse_spec(tomllib.loads(text), "resize-kill.toml", text)
    run_campaign(spec, RunOptions(runs_dir=runs_dir, progress=False, hooks=None if elastic else hooks()))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:] == ["elastic"])
