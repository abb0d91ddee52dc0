"""The expected end on the examples run for real (issue 52, point 5a): its error at 25%, 50% and 75% of each
campaign, as the report reads it.

    python -m bench.eta_examples [--examples digits digits-evolution mnist1d-scaling] [--reps 3] [--workers 2]
                                 [--timeout 900] [--code DIR] [--keep DIR]

Each example (``examples/NAME.toml``) runs ``--reps`` times as a user runs it, through the real CLI in a process
of its own (``hypersweep run``; a spec with ``[scaling]``: ``hypersweep scaling``) on ``--workers`` embedded
workers, ``--no-progress``, in a fresh runs folder (``--keep``: under that folder, else a temporary one, removed).
Then its ``eta.jsonl`` and trials are read with the report's own code (:func:`search.reports.eta_section.campaign_ends`,
:func:`~search.reports.eta_section.end_errors`: the "Cost and expected end" table): per run the error
``|expected left - actual left| / actual left`` at 25/50/75% of the campaign's time (first trial start to last trial
end), and the median over the runs of each example (goal <= 15% from 25% on). The machine's load average (1 min)
before and after each run is printed beside it: the trials' times follow it. ``--code``: the product the CLI runs
(its ``PYTHONPATH``; default this checkout), to measure another commit's expected end with the same reading. A run
past ``--timeout`` seconds is killed (its process group) and counted as missing.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path

from search.reports.data import load_campaign
from search.reports.eta_section import FRACTIONS, campaign_ends, end_errors

ROOT = Path(__file__).resolve().parent.parent
POINTS = tuple(f"{f:.0%}" for f in FRACTIONS)  # "25%", "50%", "75%": end_errors' labels


@dataclasses.dataclass(frozen=True)
class Ran:
    """One run of an example: its campaign's length (first trial start to last end; None: no campaign read), its
    error at each point (missing: no expected end recorded from then on), the load before and after, the exit code."""

    example: str
    rep: int
    wall: float
    campaign: float | None
    errors: dict[str, float]
    load: tuple[float, float]
    rc: int


def command(spec: Path, workers: int, runs_dir: Path) -> list[str]:
    """The CLI call a user makes for ``spec``: ``scaling`` where it has a ``[scaling]`` table, else ``run``."""
    verb = "scaling" if "scaling" in tomllib.loads(spec.read_text()) else "run"
    return [sys.executable, "-m", "search", verb, str(spec), "--workers", str(workers), "--no-progress"] + [
        "--runs-dir",
        str(runs_dir),
    ]


def campaign_folder(runs_dir: Path) -> Path | None:
    """The campaign folder a run made under ``runs_dir`` (the one holding a ``spec.toml``)."""
    found = sorted(p.parent for p in runs_dir.glob("*/spec.toml"))
    return found[0] if found else None


def read_errors(folder: Path) -> tuple[float | None, dict[str, float]]:
    """The campaign's length and its expected end's error at each point, as the report's table has them."""
    found = campaign_ends(load_campaign(folder))
    if found is None:
        return None, {}
    runs, start, end = found
    return end - start, {when: error for when, _run, _left, _actual, error in end_errors(runs, start, end)}


def medians(rans: Sequence[Ran]) -> dict[str, float | None]:
    """The median error at each point over the runs that have it (None: none has)."""
    out: dict[str, float | None] = {}
    for point in POINTS:
        seen = [r.errors[point] for r in rans if point in r.errors]
        out[point] = statistics.median(seen) if seen else None
    return out


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def row(r: Ran) -> str:
    """A run's line: its errors at 25/50/75%, its campaign's length, the load around it."""
    errors = " / ".join(percent(r.errors.get(p)) for p in POINTS)
    campaign = "-" if r.campaign is None else f"{r.campaign:.0f} s"
    failed = f" (exit {r.rc})" if r.rc else ""
    return (
        f"{r.example} #{r.rep}: {errors}  campaign {campaign}, command {r.wall:.0f} s, "
        f"load {r.load[0]:.1f} -> {r.load[1]:.1f}{failed}"
    )


def summary(example: str, rans: Sequence[Ran]) -> str:
    """An example's median line over its runs."""
    m = medians(rans)
    campaigns = [r.campaign for r in rans if r.campaign is not None]
    span = f"{min(campaigns):.0f}-{max(campaigns):.0f} s" if campaigns else "-"
    return f"{example}: median {' / '.join(percent(m[p]) for p in POINTS)} over {len(rans)} runs (campaigns {span})"


def run_once(example: str, rep: int, workers: int, timeout: float, code: Path, runs_dir: Path) -> Ran:
    """One run of ``examples/<example>.toml`` in ``runs_dir``, then its errors read."""
    env = dict(os.environ, PYTHONPATH=str(code))
    load = os.getloadavg()[0]
    began = time.monotonic()
    proc = subprocess.Popen(
        command(ROOT / "examples" / f"{example}.toml", workers, runs_dir),
        env=env,
        cwd=runs_dir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,  # its workers in its process group: a timeout ends them all
    )
    try:
        _out, err = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        _stop(proc)
        err, rc = b"timed out", 124
    wall = time.monotonic() - began
    if rc:
        print(f"{example} #{rep}: exit {rc}: {err.decode(errors='replace').strip()[-500:]}", file=sys.stderr)
    folder = campaign_folder(runs_dir)
    campaign, errors = read_errors(folder) if folder is not None and rc == 0 else (None, {})
    return Ran(example, rep, wall, campaign, errors, (load, os.getloadavg()[0]), rc)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    """End a run's process group: SIGTERM, then SIGKILL after 30 s."""
    for sig, wait in ((signal.SIGTERM, 30.0), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.communicate(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.eta_examples", description=__doc__.splitlines()[0])
    p.add_argument("--examples", nargs="+", default=["digits", "digits-evolution", "mnist1d-scaling"])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds per run, at most")
    p.add_argument("--code", type=Path, default=ROOT, help="the checkout the CLI runs (its PYTHONPATH)")
    p.add_argument("--keep", type=Path, default=None, help="keep the runs' folders under this folder")
    args = p.parse_args(argv)
    for example in args.examples:
        if not (ROOT / "examples" / f"{example}.toml").is_file():
            p.error(f"--examples: no examples/{example}.toml")
    print(f"code {args.code.resolve()}, {args.workers} workers, {args.reps} runs each")
    for example in args.examples:
        rans = []
        for rep in range(args.reps):
            if args.keep is not None:
                runs_dir = args.keep / f"{example}-{rep}"
                runs_dir.mkdir(parents=True, exist_ok=False)
                rans.append(run_once(example, rep, args.workers, args.timeout, args.code, runs_dir))
            else:
                with tempfile.TemporaryDirectory(prefix="hypersweep-eta-") as tmp:
                    rans.append(run_once(example, rep, args.workers, args.timeout, args.code, Path(tmp)))
            print(row(rans[-1]), flush=True)
        print(summary(example, rans), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
