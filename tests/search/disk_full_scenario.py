"""Run under ``unshare -m`` (a private mount namespace): a campaign on a small tmpfs fills it mid-run.

``python disk_full_scenario.py WORKDIR``: mounts a tmpfs at ``WORKDIR/mnt``, runs a campaign there whose
trial 1 fills the disk before its second checkpoint, frees the space, resumes, and prints one JSON
object with what a test checks (the tmpfs disappears with the namespace, so the checks happen here).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import optuna
from optuna.storages.journal import JournalFileBackend, JournalStorage

SPEC = """
[study]
name = "full"
direction = "maximize"
metric = "score"
sampler = "random"
seed = 2
n_trials = 4

[trainer]
entry = "toy_trainers:checkpointing"
epochs = 3
options = {{ fill = ["{mnt}", "{marker}"] }}

[space]
quality = {{ type = "float", low = 0.1, high = 0.9 }}

[cluster]
n_workers = 1
"""


def main(work: Path) -> None:
    mnt = work / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], check=True)
    spec = work / "full.toml"
    spec.write_text(SPEC.format(mnt=mnt, marker=work / "filled"))
    runs = mnt / "runs"
    command = [sys.executable, "-m", "search"]
    first = subprocess.run(
        [*command, "run", str(spec), "--runs-dir", str(runs), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=work,
    )
    leftovers = sorted(str(p.relative_to(mnt)) for p in mnt.rglob("*") if ".tmp" in p.name)
    (mnt / "filler").unlink()
    second = subprocess.run(
        [*command, "resume", str(runs / "full"), "--no-progress"], capture_output=True, text=True, timeout=300, cwd=work
    )
    storage = JournalStorage(JournalFileBackend(str(runs / "full" / "study.journal")))
    trials = optuna.load_study(study_name="full", storage=storage).get_trials()
    print(
        json.dumps(
            {
                "first": [first.returncode, first.stderr],
                "leftovers": leftovers,
                "second": [second.returncode, second.stderr],
                "trials": [[t.number, t.state.name, len(t.intermediate_values)] for t in trials],
                "history": [[s for s, _m in t.user_attrs.get("history", ())] for t in trials],
                "lines": [
                    [
                        json.loads(line)["step"]
                        for line in (runs / "full" / "trials" / str(t.number) / "metrics.jsonl")
                        .read_text()
                        .splitlines()
                    ]
                    for t in trials
                ],
            }
        )
    )


if __name__ == "__main__":
    main(Path(sys.argv[1]))
