"""Run under ``unshare -m`` (a private mount namespace): a campaign's file system turns read-only mid-run.

``python read_only_scenario.py WORKDIR``: mounts a tmpfs at ``WORKDIR/mnt``, runs a campaign there (one slot, four
trials), makes it read-only once two trials are told, as a disk that hit an error does; then, with the file system
writable again, empties the told trials' ``metrics.jsonl`` (what such a fault leaves of appends never fsynced: the
tmpfs itself keeps everything it was given), resumes, and prints one JSON object with what a test checks.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import optuna
from optuna.storages.journal import JournalFileBackend, JournalStorage

SPEC = """
[study]
name = "ro"
direction = "maximize"
metric = "score"
sampler = "random"
seed = 3
n_trials = 4

[trainer]
entry = "toy_trainers:fit"
epochs = 4
options = { sleep = 0.3 }

[space]
quality = { type = "float", low = 0.1, high = 0.9 }

[cluster]
n_workers = 1
"""

COMPLETE = 1  # TrialState.COMPLETE in the journal's set_trial_state_values entries (op_code 6)


def told(journal: Path) -> list[int]:
    """The trial ids the journal records as COMPLETE (whole lines only)."""
    ids = []
    for line in journal.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("op_code") == 6 and entry.get("state") == COMPLETE:
            ids.append(int(entry["trial_id"]))
    return ids


def main(work: Path) -> None:
    mnt = work / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mnt)], check=True)
    spec = work / "ro.toml"
    spec.write_text(SPEC)
    folder = mnt / "runs" / "ro"
    command = [sys.executable, "-m", "search"]
    run = subprocess.Popen(
        [*command, "run", str(spec), "--runs-dir", str(mnt / "runs"), "--no-progress"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=work,
    )
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and run.poll() is None:
        journal = folder / "study.journal"
        if journal.exists() and len(told(journal)) >= 2:
            break
        time.sleep(0.05)
    # read-only from here: a bind mount over it, remounted read-only (the tmpfs itself cannot turn read-only while
    # the controller holds its journal open for writing); what the controller opens next fails with EROFS
    subprocess.run(["mount", "--bind", str(mnt), str(mnt)], check=True)
    subprocess.run(["mount", "-o", "remount,ro,bind", str(mnt)], check=True)
    _out, err = run.communicate(timeout=240)
    subprocess.run(["umount", str(mnt)], check=True)  # the bind mount goes: writable again
    storage = JournalStorage(JournalFileBackend(str(folder / "study.journal")))
    before = optuna.load_study(study_name="ro", storage=storage).get_trials()
    emptied = [t.number for t in before if t.state == optuna.trial.TrialState.COMPLETE]
    for number in emptied:
        (folder / "trials" / str(number) / "metrics.jsonl").write_text("")
    resumed = subprocess.run(
        [*command, "resume", str(folder), "--no-progress"], capture_output=True, text=True, timeout=300, cwd=work
    )
    storage = JournalStorage(JournalFileBackend(str(folder / "study.journal")))
    trials = optuna.load_study(study_name="ro", storage=storage).get_trials()
    print(
        json.dumps(
            {
                "first": [run.returncode, err],
                "emptied": emptied,
                "second": [resumed.returncode, resumed.stderr],
                "trials": [[t.number, t.state.name] for t in trials],
                "history": [[s for s, _m in t.user_attrs.get("history", ())] for t in trials],
                "lines": [
                    [json.loads(line)["step"] for line in (folder / "trials" / str(t.number) / "metrics.jsonl").open()]
                    for t in trials
                ],
            }
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
