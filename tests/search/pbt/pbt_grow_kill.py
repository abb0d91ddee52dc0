"""A controller process for the resume-after-a-grow test: runs the ``grow = "pbt"`` campaign of test_pbt_grow.py and
SIGKILLs itself right after the first survivor's wider segment was decided, recorded and sent
(``python -m tests.search.pbt.pbt_grow_kill RUNS_DIR``).

The moment is chosen by wrapping ``Campaign._next_segment`` in this process only; everything else is the real
campaign (LocalCluster, journal storage, the project's trainer)."""

from __future__ import annotations

import os
import signal
import sys
import tomllib
from pathlib import Path

from search.loop.campaign import Campaign
from search.loop.segments import Segment
from search.loop.trials import RunningTrial
from search.session.runner import RunOptions, run_campaign
from search.spec.campaign_spec import parse_spec
from search.vocab.terms import Transition
from tests.search.pbt.test_pbt_grow import SPEC
from trainers.api import TrialConfig


def main(runs_dir: Path) -> None:
    original = Campaign._next_segment

    def killed_after_a_grow(self: Campaign, running: RunningTrial, config: TrialConfig, segment: Segment) -> None:
        original(self, running, config, segment)
        if segment.transition is Transition.RESIZE:
            os.kill(os.getpid(), signal.SIGKILL)

    Campaign._next_segment = killed_after_a_grow  # type: ignore[method-assign]
    spec = parse_spec(tomllib.loads(SPEC), "pbt-grow.toml", SPEC)
    run_campaign(spec, RunOptions(runs_dir=runs_dir, progress=False))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
