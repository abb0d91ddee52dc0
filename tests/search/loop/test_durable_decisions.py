"""A pruning decision is durable before it is acted on: a controller SIGKILLed right after logging
"trial N pruned at step S" leaves that decision in the journal, and ``resume`` keeps it (the trial is told
PRUNED at that step, not run again and pruned a second time later).

A real ASHA campaign (``python -m search run``), a real SIGKILL of its process group, plain Optuna to check.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from dask_processes import wait_for
from toy_specs import toy_toml

from tests.campaign_storage import load as load_campaign
from tests.spec_files import write_spec

pytestmark = pytest.mark.slow

EPOCHS = 4

SPEC = toy_toml(
    "asha",
    4,
    EPOCHS,
    seed=8,
    pruner="asha",
    trainer={"options": {"sleep": 0.6}},
    top={"pruner": {"resource": "steps", "reduction_factor": 3}},
)


PRUNED = re.compile(r"trial (\d+) pruned at step (\d+)")


def steps(folder: Path, number: int) -> list[int]:
    path = folder / "trials" / str(number) / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


def pruned_in_log(folder: Path) -> tuple[int, int] | None:
    try:
        found = PRUNED.search((folder / "campaign.log").read_text())
    except FileNotFoundError:
        return None
    return (int(found.group(1)), int(found.group(2))) if found else None


@pytest.mark.timeout(300)
def test_a_pruning_decision_logged_before_a_controller_kill_is_in_the_journal_and_stands_after_resume(
    tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    spec = write_spec(tmp_path / "asha.toml", SPEC)
    enqueue = tmp_path / "first.json"
    enqueue.write_text(json.dumps([{"quality": 0.9}, {"quality": 0.1}]))  # trial 1 loses its first rung to trial 0
    runs = tmp_path / "runs"
    folder = runs / "asha"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "search",
            "run",
            str(spec),
            "--runs-dir",
            str(runs),
            "--enqueue",
            str(enqueue),
            "--no-progress",
        ],
        env=subprocess_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    decision: list[tuple[int, int]] = []

    def decided() -> bool:
        assert proc.poll() is None, f"the controller exited ({proc.returncode}) before any decision"
        found = pruned_in_log(folder)
        if found is not None:
            decision.append(found)
        return found is not None

    try:
        wait_for(decided, 200, "a pruning decision in campaign.log")
        os.killpg(proc.pid, signal.SIGKILL)  # at once: the trial's next report is 0.6 s away
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    number, step = decision[0]

    killed = load_campaign(folder, "asha").trials[number]
    assert killed.state == optuna.trial.TrialState.RUNNING
    assert killed.user_attrs["stop_decided"] == {"reason": "pruned", "step": step}  # durable before it was sent
    heard = steps(folder, number)

    resumed = subprocess.run(
        [sys.executable, "-m", "search", "resume", str(folder), "--no-progress"],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=240,
    )
    assert resumed.returncode == 0, resumed.stderr

    trials = load_campaign(folder, "asha").get_trials()
    assert len(trials) == 4 and all(t.state.is_finished() for t in trials)  # the budget, exactly
    pruned = trials[number]
    assert pruned.state == optuna.trial.TrialState.PRUNED and pruned.user_attrs["stop_reason"] == "pruned"
    assert steps(folder, number) == heard  # not run again: no epoch past the decision
    assert [s for s, _m in pruned.user_attrs["history"]] == heard == list(range(1, len(heard) + 1))
    assert heard[-1] in (step, step + 1)  # the decision's report, and at most the one the stop was seen at
    assert len(pruned.intermediate_values) == len(heard)
    assert "told PRUNED, not run again" in (folder / "campaign.log").read_text()
