"""Three hosts on one machine: Linux network namespaces, a campaign over TLS, and a worker host losing its link.

The hosts (all inside namespaces the test makes; the root namespace is not touched) are
tests/cluster/netns_hosts.py's: a TLS scheduler host and two worker hosts of one slot each.

While worker host 1 runs a trial, its link goes down. The scheduler drops it after the
(short) worker TTL and the trial runs again on host 2; every trial ends COMPLETE once.
"""

from __future__ import annotations

import os
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from netns_hosts import ROLES, W1_IP, W2_IP, campaign_on_three_hosts, ip, logs_tail, namespaces_unavailable, wait_for

from tests.campaign_storage import load

N_TRIALS = 4


def fit(config, reporter):  # the trainer, imported by name on the workers ("test_netns_multihost:fit")
    """Like the toy trainer, and it leaves a mark per host and trial so the test knows who runs what."""
    marks = Path(config.options["marks"])
    host = os.environ.get("HS_TEST_HOST", "unknown")
    (marks / f"{host}-{config.number}-start").touch()
    metrics: dict[str, float] = {}
    for epoch in range(1, config.epochs + 1):
        time.sleep(float(config.options["sleep"]))
        metrics = {"score": float(config.params["quality"]) * epoch / config.epochs}
        reporter.report(epoch, metrics)
    (marks / f"{host}-{config.number}-end").touch()
    return metrics


fit.accepted_params = frozenset({"quality"})  # type: ignore[attr-defined]
fit.reported_metrics = frozenset({"score"})  # type: ignore[attr-defined]

SPEC = """
[study]
name = "netns"
direction = "maximize"
metric = "score"
sampler = "random"
n_trials = {n}

[trainer]
entry = "test_netns_multihost:fit"
epochs = 4
options = {{ sleep = 0.75, marks = "{marks}" }}

[space]
quality = {{ type = "float", low = 0.0, high = 1.0 }}
"""


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_a_campaign_across_three_hosts_survives_a_cut_link(tmp_path: Path) -> None:
    import optuna

    unavailable = namespaces_unavailable()
    if unavailable:
        pytest.skip(unavailable)
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = tmp_path / "netns.toml"
    spec.write_text(textwrap.dedent(SPEC.format(n=N_TRIALS, marks=marks)))
    runs = tmp_path / "runs"
    # Every process writes its stdout and stderr to a log here; a failure message ends with their tails.
    logs = {role: tmp_path / f"{role}.log" for role in ROLES}
    with campaign_on_three_hosts(tmp_path, spec, runs, logs) as (ns, controller):

        def w1_busy() -> list[str]:
            started = {p.name.split("-")[1] for p in marks.glob("w1-*-start")}
            ended = {p.name.split("-")[1] for p in marks.glob("w1-*-end")}
            return sorted(started - ended)

        wait_for(lambda: bool(w1_busy()), 60, "a trial running on worker host 1", [controller], logs)
        cut = w1_busy()
        ip("-n", ns["w1"], "link", "set", "eth0", "down")  # worker host 1 drops off the network mid-trial
        cut_at = time.time()

        try:
            controller.wait(timeout=90)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the campaign did not finish within 90s\n{logs_tail(logs)}") from None
        assert controller.returncode == 0, f"the campaign exited {controller.returncode}\n{logs_tail(logs)}"

    study = load(runs / "netns", "netns")
    trials = study.get_trials()
    why = logs_tail(logs)  # the processes' own account, should an assertion below fail
    assert sorted(t.number for t in trials) == list(range(N_TRIALS)), why  # nothing counted twice, nothing lost
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials), f"{[t.state for t in trials]}\n{why}"
    by_number = {t.number: t for t in trials}
    for number in map(int, cut):
        # The trial host 1 was running when its link went down finished on host 2, after the cut.
        assert by_number[number].user_attrs["worker"].startswith(f"tls://{W2_IP}:"), (
            f"{by_number[number].user_attrs}\n{why}"
        )
        assert (marks / f"w2-{number}-end").exists(), why
        assert by_number[number].datetime_complete.timestamp() > cut_at, why
    # Nothing reported from host 1 reached the controller after the cut.
    late = [
        t.number
        for t in trials
        if t.user_attrs["worker"].startswith(f"tls://{W1_IP}:") and t.datetime_complete.timestamp() > cut_at
    ]
    assert late == [], why
