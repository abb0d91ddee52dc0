"""Chaos for population-based training: SIGKILL the controller of a real PBT campaign at the moments
that used to corrupt it, resume each time, then check the study with plain Optuna.

    python -m bench.chaos --pbt [--reps 4] [--seed 0] [--keep DIR]

The campaign (``python -m search run``, its own process group, an embedded LocalCluster
of 2 workers) is the built-in classifier on the digits (an MLP, ``epochs`` epochs in
segments of ``interval``), a population of ``members``. Kill ``i`` lands at a moment of
:data:`MOMENTS`, in turn:

- ``mid-segment``: as soon as any member reports the first epoch of a segment after the
  first (its checkpoint is past the rung, its segment is under way);
- ``after-decision``: as soon as a new rung's decisions are in ``pbt.jsonl`` (the copies
  and the next segments are under way).

Then, from the study (``JournalStorage``) and the campaign folder:

- **runs / lost / failed**: every member finished (none RUNNING), none FAIL;
- **missing / repeated**: every COMPLETE member has each epoch 1..epochs exactly once in its
  ``history``, its ``metrics.jsonl`` and its intermediate values (one per reported resource);
- **lineage**: the member's ``pbt_lineage`` is what ``pbt.jsonl`` decided;
- **schedule**: the ``lr`` of every reported epoch is the member's parameter for that segment
  (the sampled one until its first exploit, then each explored one), and ``pbt_schedule``
  follows the same rates;
- **resume exit 0**: the last resume ended the campaign with status 0.
"""

from __future__ import annotations

import dataclasses
import json
import math
import textwrap
import time
from pathlib import Path
from typing import Any

from bench.chaos_processes import group_alive, kill_all, start_campaign, stop_campaign
from bench.chaos_study import count_trials, metrics_steps, open_study

__all__ = ["PBTChaosResult", "chaos_pbt", "check_pbt_study", "MOMENTS", "PBT_STUDY"]

PBT_STUDY = "chaos-pbt"
MOMENTS = ("mid-segment", "after-decision")

PBT_SPEC = """
[study]
name = "{name}"
direction = "maximize"
metric = "val_accuracy"
sampler = "random"
seed = {seed}
n_trials = {members}
scheduler = "pbt"

[pbt]
interval = {interval}
quantile = 0.25
hyperparams = ["lr"]

[trainer]
entry = "trainers.classifier:fit"
dataset = "digits"
epochs = {epochs}

[space]
model = "mlp"
optimizer = "sgd"
momentum = 0.9
schedule = "constant"
lr = {{ type = "float", low = 1e-3, high = 0.3, log = true }}

[cluster]
n_workers = 2
"""


@dataclasses.dataclass
class PBTChaosResult:
    members: int
    epochs: int
    interval: int
    kills: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    final_returncode: int | None = None
    final_log: str = ""
    runs: int = 0  # controller runs: the kills plus the last resume
    states: dict[str, int] = dataclasses.field(default_factory=dict)
    lost: list[int] = dataclasses.field(default_factory=list)
    failed: dict[int, str] = dataclasses.field(default_factory=dict)
    missing: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    repeated: dict[int, list[int]] = dataclasses.field(default_factory=dict)
    lineage_wrong: dict[int, str] = dataclasses.field(default_factory=dict)
    lr_wrong: dict[int, list[int]] = dataclasses.field(default_factory=dict)  # member -> epochs at another lr
    exploits: int = 0
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return (
            self.final_returncode == 0
            and not self.lost
            and not self.failed
            and not self.missing
            and not self.repeated
            and not self.lineage_wrong
            and not self.lr_wrong
            and sum(self.states.values()) == self.members
        )

    def lines(self) -> list[str]:
        out = [
            f"PBT: {self.members} members, {self.epochs} epochs in segments of {self.interval}; "
            f"{len(self.kills)} kill -9 of the controller, {self.runs} controller run(s)"
        ]
        for i, kill in enumerate(self.kills, 1):
            out.append(f"  kill {i} ({kill['moment']}): {kill['what']}")

        def verdict(bad: object) -> str:
            return "FAIL" if bad else "OK"

        out += [
            f"final resume exit status: {self.final_returncode}  {verdict(self.final_returncode != 0)}",
            f"states:    {', '.join(f'{n} {s}' for s, n in sorted(self.states.items()))}",
            f"lost:      {len(self.lost)} {self.lost or ''}  {verdict(self.lost)}",
            f"failed:    {len(self.failed)} {self.failed or ''}  {verdict(self.failed)}",
            f"missing:   {sum(map(len, self.missing.values()))} step(s) {self.missing or ''}  {verdict(self.missing)}",
            f"repeated:  {sum(map(len, self.repeated.values()))} step(s) {self.repeated or ''}  "
            f"{verdict(self.repeated)}",
            f"lineage:   {len(self.lineage_wrong)} member(s) disagree with pbt.jsonl {self.lineage_wrong or ''}  "
            f"{verdict(self.lineage_wrong)}",
            f"lr:        {len(self.lr_wrong)} member(s) trained at another rate than decided {self.lr_wrong or ''}  "
            f"{verdict(self.lr_wrong)}",
            f"exploits:  {self.exploits} in pbt.jsonl",
            f"wall time: {self.seconds:.1f} s",
            "RESULT: " + ("PASS" if self.ok else "FAIL"),
        ]
        if self.final_returncode not in (0, None) and self.final_log:
            out.append("last resume's log (tail):\n" + self.final_log[-2000:])
        return out


def chaos_pbt(
    root: Path,
    reps: int = 2,
    seed: int = 0,
    members: int = 4,
    epochs: int = 6,
    interval: int = 2,
    timeout: float = 900.0,
    say: Any = print,
) -> PBTChaosResult:
    """Run the PBT campaign in ``root``, kill its controller ``reps`` times (at :data:`MOMENTS` in turn), resume
    each time, and check the study."""
    started = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    spec = root / "chaos-pbt.toml"
    spec.write_text(
        textwrap.dedent(PBT_SPEC.format(name=PBT_STUDY, seed=seed, members=members, epochs=epochs, interval=interval))
    )
    folder = root / "runs" / PBT_STUDY
    log = root / "controller.log"
    result = PBTChaosResult(members, epochs, interval)
    deadline = started + timeout
    command = ["run", str(spec), "--runs-dir", str(root / "runs")]
    seen: set[tuple[str, int]] = set()  # (trial, epoch) a mid-segment kill already landed at
    for i in range(reps):
        moment = MOMENTS[i % len(MOMENTS)]
        proc = start_campaign(command, log)
        command = ["resume", str(folder)]
        result.runs += 1
        try:
            what = _wait_for(moment, folder, proc, interval, deadline, seen)
            if proc.poll() is not None or not what:
                result.final_returncode = proc.returncode
                say(f"the campaign ended (or timed out) before kill {i + 1} ({moment})")
                break
            stop_campaign(proc, "KILL")
        finally:
            if proc.poll() is None or group_alive(proc.pid):
                kill_all(proc)
        result.kills.append({"moment": moment, "what": what, "trials": _count_trials_pbt(folder)})
        say(f"kill {i + 1} ({moment}): {what}")
    else:
        proc = start_campaign(command, log)
        result.runs += 1
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            if proc.poll() is None or group_alive(proc.pid):
                kill_all(proc)
        result.final_returncode = proc.returncode
    result.final_log = log.read_text(errors="replace")[-4000:] if log.exists() else ""
    check_pbt_study(folder, result)
    result.seconds = time.monotonic() - started
    return result


def _count_trials_pbt(folder: Path) -> int:
    try:
        return len(open_study(folder, PBT_STUDY).get_trials(deepcopy=False))
    except Exception:  # noqa: BLE001 - not created yet
        return count_trials(folder)


def _wait_for(moment: str, folder: Path, proc: Any, interval: int, deadline: float, seen: set[tuple[str, int]]) -> str:
    """Poll until ``moment`` happens in ``folder``; what was seen ("" if the controller ended first)."""
    rungs_before = _rung_lines(folder)
    while proc.poll() is None and time.monotonic() < deadline:
        if moment == "after-decision":
            if _rung_lines(folder) > rungs_before:
                return f"the rung at epoch {(_journal(folder) or [{'rung': '?'}])[-1]['rung']} decided in pbt.jsonl"
        else:
            for trials in sorted(folder.glob("trials/*")):
                steps = metrics_steps(trials / "metrics.jsonl")
                past = [s for s in steps if s > interval and (s - 1) % interval == 0]
                if past and (trials.name, max(past)) not in seen:
                    seen.add((trials.name, max(past)))  # a later kill waits for another member or segment
                    return f"trial {trials.name} reported epoch {max(past)}"
        time.sleep(0.005)
    return ""


def _rung_lines(folder: Path) -> int:
    try:
        return sum(1 for line in (folder / "pbt.jsonl").read_text().splitlines() if '"rung"' in line)
    except FileNotFoundError:
        return 0


def _journal(folder: Path) -> list[dict[str, Any]]:
    try:
        return [json.loads(line) for line in (folder / "pbt.jsonl").read_text().splitlines() if '"rung"' in line]
    except (FileNotFoundError, ValueError):
        return []


def check_pbt_study(folder: Path, result: PBTChaosResult) -> PBTChaosResult:
    """Fill ``result`` from the study (plain Optuna) and ``pbt.jsonl``."""
    import collections

    from optuna.trial import TrialState

    trials = open_study(folder, PBT_STUDY).get_trials(deepcopy=False)
    rungs = _journal(folder)
    result.exploits = sum(1 for r in rungs for d in r["decisions"].values() if d["action"] == "exploit")
    result.states = dict(collections.Counter(t.state.name for t in trials))
    result.lost = [t.number for t in trials if not t.state.is_finished()]
    result.failed = {
        t.number: str(t.user_attrs.get("fail_reason") or "?") for t in trials if t.state == TrialState.FAIL
    }
    every = list(range(1, result.epochs + 1))
    for t in trials:
        if t.state != TrialState.COMPLETE:
            continue
        history = [(int(s), m) for s, m in t.user_attrs.get("history") or ()]
        lines = metrics_steps(folder / "trials" / str(t.number) / "metrics.jsonl")
        steps = [s for s, _m in history]
        missing = sorted(set(every) - set(steps) | set(every) - set(lines))
        if len(t.intermediate_values) != len(set(steps)):
            missing = missing or [-1]  # an epoch without (or with two) intermediate values
        if missing:
            result.missing[t.number] = missing
        repeated = sorted({s for seq in (steps, lines) for s in seq if seq.count(s) > 1})
        if repeated:
            result.repeated[t.number] = repeated
        _check_lineage(t, rungs, result)
        _check_lr(t, history, rungs, result)
    return result


def _decided_lineage(number: int, rungs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"epoch": r["rung"], "source": d["source"], "params": d["params"]}
        for r in rungs
        if (d := r["decisions"].get(str(number))) and d["action"] == "exploit"
    ]


def _check_lineage(t: Any, rungs: list[dict[str, Any]], result: PBTChaosResult) -> None:
    recorded = t.user_attrs.get("pbt_lineage") or []
    decided = _decided_lineage(t.number, rungs)
    if recorded != decided:
        result.lineage_wrong[t.number] = (
            f"recorded {[(x['epoch'], x['source']) for x in recorded]}, "
            f"decided {[(x['epoch'], x['source']) for x in decided]}"
        )


def _check_lr(
    t: Any, history: list[tuple[int, dict[str, Any]]], rungs: list[dict[str, Any]], result: PBTChaosResult
) -> None:
    """Epoch ``s`` trains at the lr decided at the last rung before it (the sampled one before any)."""
    wrong = []
    for step, metrics in history:
        lr = float(t.params["lr"])
        for r in rungs:
            d = r["decisions"].get(str(t.number))
            if d and r["rung"] < step:
                lr = float(d["params"]["lr"])
        if not math.isclose(float(metrics.get("lr", math.nan)), lr, rel_tol=1e-9):
            wrong.append(step)
    schedule = [float(lr) for _step, lr in t.user_attrs.get("pbt_schedule") or ()]
    rates = [float(m["lr"]) for _s, m in history]
    merged = [r for i, r in enumerate(rates) if i == 0 or rates[i - 1] != r]
    if schedule != merged:
        wrong.append(0)  # pbt_schedule disagrees with the reported rates
    if wrong:
        result.lr_wrong[t.number] = wrong
