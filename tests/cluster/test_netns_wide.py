"""A trial wider than a host: 2 gloo ranks on two `hypersweep worker` hosts (network namespaces), over TLS.

The hosts are tests/cluster/netns_hosts.py's (a scheduler host with a bridge, two worker hosts of
one slot each): every trial of ``data_parallel = 2`` spans both. The first test runs a campaign
and checks each rank's host, seed, rendezvous address, log and timings; the second cuts worker
host 2's link in the middle of a trial and checks that rank 0, on host 1, ends with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from netns_hosts import ROLES, W1_IP, W2_IP, campaign_on_three_hosts, ip, logs_tail, namespaces_unavailable, wait_for

from tests.campaign_storage import load


def epochs(config, reporter):  # imported by name by each rank ("test_netns_wide:epochs")
    """Each epoch: ``sleep`` s of work, then one all-reduce over the hosts; a mark per rank with its host and pid."""
    import torch
    import torch.distributed as dist

    from trainers.ddp import launch
    from trainers.ddp_rank import current_rank, process_group

    info = current_rank()
    if info is None:
        return launch(f"{__name__}:epochs", config, reporter)
    host = os.environ.get("HS_TEST_HOST", "unknown")
    (Path(config.options["marks"]) / f"{host}-rank{info.rank}-{os.getpid()}").touch()
    score = 0.0
    with process_group(torch.device("cpu")):
        for epoch in range(1, config.epochs + 1):
            time.sleep(float(config.options["sleep"]))
            total = torch.tensor([float(info.rank + 1)])
            dist.all_reduce(total)
            score = float(config.params["quality"]) * epoch / config.epochs
            print(f"epoch {epoch} on {host}: sum {total.item():g}", flush=True)
            reporter.report(epoch, {"score": score, "rank_sum": float(total.item())})
            if reporter.should_stop():
                break
    return {"score": score}


epochs.accepted_params = frozenset({"quality"})  # type: ignore[attr-defined]
epochs.reported_metrics = frozenset({"score", "rank_sum"})  # type: ignore[attr-defined]

SPEC = """
[study]
name = "wide"
direction = "maximize"
metric = "score"
sampler = "random"
seed = 3
n_trials = {n}
max_retries = 0

[trainer]
entry = "test_netns_wide:epochs"
epochs = {epochs}
data_parallel = 2
device = "cpu"
options = {{ sleep = {sleep}, marks = "{marks}" }}

[space]
quality = {{ type = "float", low = 0.0, high = 1.0 }}
"""


@contextlib.contextmanager
def wide_campaign(tmp_path: Path, n: int, epochs_: int, sleep: float):
    """Two worker hosts and a controller running the spec; yields (namespaces, controller, marks, runs, logs)."""
    unavailable = namespaces_unavailable()
    if unavailable:
        pytest.skip(unavailable)
    marks = tmp_path / "marks"
    marks.mkdir()
    spec = tmp_path / "wide.toml"
    spec.write_text(textwrap.dedent(SPEC.format(n=n, epochs=epochs_, sleep=sleep, marks=marks)))
    runs = tmp_path / "runs"
    logs = {role: tmp_path / f"{role}.log" for role in ROLES}
    with campaign_on_three_hosts(tmp_path, spec, runs, logs) as (ns, controller):
        yield ns, controller, marks, runs, logs


def _finish(controller: subprocess.Popen, logs: dict[str, Path], timeout: float) -> None:
    try:
        controller.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"the campaign did not finish within {timeout}s\n{logs_tail(logs)}") from None


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split()[2] != "Z"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_two_rank_trial_spans_two_hosts_with_the_rendezvous_on_rank0s(tmp_path: Path) -> None:
    import optuna

    with wide_campaign(tmp_path, n=2, epochs_=3, sleep=0.3) as (_ns, controller, _marks, runs, logs):
        _finish(controller, logs, 400)
        assert controller.returncode == 0, f"the campaign exited {controller.returncode}\n{logs_tail(logs)}"
    why = logs_tail(logs)
    trials = load(runs / "wide", "wide").get_trials()
    assert [t.state for t in trials] == [optuna.trial.TrialState.COMPLETE] * 2, why
    timings = {}
    for trial in trials:
        ranks = trial.user_attrs["ranks"]
        hosts = [r["worker"].split("//")[1].rsplit(":", 1)[0] for r in ranks]
        assert sorted(hosts) == [W1_IP, W2_IP], f"one rank on each host: {ranks}\n{why}"
        assert {r["master"] for r in ranks} == {hosts[0]}, "the rendezvous is on rank 0's host"
        assert {r["seed"] for r in ranks} == {trial.user_attrs["seed"]}
        assert [m["rank_sum"] for _s, m in trial.user_attrs["history"]] == [3.0] * 3, "the all-reduce saw both"
        for r in ranks:
            assert len(r["epoch_seconds"]) == 3
            log = runs / "wide" / "trials" / str(trial.number) / f"rank{r['rank']}.log"
            assert "epoch 3 on" in log.read_text(), f"rank {r['rank']}'s own log\n{why}"
        timings[trial.number] = [{k: r[k] for k in ("rank", "worker", "epoch_seconds", "total_seconds")} for r in ranks]
    print("per-rank timings:", json.dumps(timings, indent=1))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_lost_host_ends_the_ranks_on_the_other(tmp_path: Path) -> None:
    import optuna

    with wide_campaign(tmp_path, n=1, epochs_=100, sleep=0.3) as (ns, controller, marks, runs, logs):
        wait_for(lambda: len(list(marks.glob("*-rank*"))) == 2, 300, "both ranks running", [controller], logs)
        time.sleep(1.0)
        ip("-n", ns["w2"], "link", "set", "eth0", "down")  # worker host 2 (one rank) drops off mid-trial
        cut_at = time.monotonic()
        _finish(controller, logs, 300)
        ended_after = time.monotonic() - cut_at
        w1_ranks = [int(p.name.rsplit("-", 1)[1]) for p in marks.glob("w1-rank*")]
        deadline = time.monotonic() + 15
        while any(_alive(pid) for pid in w1_ranks) and time.monotonic() < deadline:
            time.sleep(0.2)
        alive = [pid for pid in w1_ranks if _alive(pid)]
    why = logs_tail(logs)
    (trial,) = load(runs / "wide", "wide").get_trials()
    assert trial.state == optuna.trial.TrialState.FAIL, f"{trial.user_attrs}\n{why}"
    assert "left the cluster" in trial.user_attrs.get("fail_reason", ""), f"{trial.user_attrs}\n{why}"
    assert ended_after < 60, why
    assert w1_ranks and not alive, f"rank(s) {alive} on host 1 outlived the trial\n{why}"
