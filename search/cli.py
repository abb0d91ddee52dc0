"""The ``hypersweep`` command line.

Exit status: 0 done, 1 an unexpected error, 2 bad input (spec, arguments,
folder), 3 the cluster could not be reached, 4 every trial of the campaign
failed, or its first trials all failed one way and it stopped early (``[study] fail_fast``; both a
:class:`~search.store.failures.TrialsFailedError`, which ``search.run`` raises too), 130 interrupted (Ctrl-C). Any :class:`spaces.errors.HypersweepError`
(and ``cluster``'s own user errors) becomes its one-line message on stderr and
its ``exit_code``; anything else is a bug and shows its traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import logging
import os
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from search.store.failures import AllTrialsFailedError, EarlyFailuresError, TrialsFailedError
from spaces.errors import EXIT_ERROR, EXIT_INTERRUPTED, HypersweepError, InputError

if TYPE_CHECKING:
    import optuna

    from search.session.runner import RunOptions
    from search.spec.campaign_spec import CampaignSpec
    from search.store.folder import CampaignFolder

__all__ = ["main", "AllTrialsFailedError", "EarlyFailuresError", "TrialsFailedError", "failure_summary"]

EXIT_OK = 0
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: what a shell reports for git, cat or head cut off by a closed pipe


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hypersweep", description="Distributed hyperparameter search on Dask.")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="start a campaign from a spec file")
    run.add_argument("spec", type=Path, help="study spec (TOML)")
    _cluster_flags(run)
    run.add_argument("--runs-dir", type=Path, default=Path("runs"), help="parent of campaign folders (default: runs)")
    run.add_argument(
        "--enqueue",
        type=Path,
        default=None,
        metavar="PARAMS.json",
        help="known-good configurations to run first (a JSON object or list of objects of parameter "
        "values); they count in the trial budget",
    )
    run.add_argument(
        "--warm-start",
        default=None,
        metavar="SOURCE",
        help="feed the sampler the finished trials of an earlier campaign folder or an Optuna study "
        "(sqlite:///old.db#study); they do not count in this campaign (overrides [study] warm_start)",
    )
    _overwrite_flag(run)

    scaling = sub.add_parser("scaling", help="run a batch-size scaling sweep (a spec with a [scaling] section)")
    scaling.add_argument("spec", type=Path, help="study spec (TOML) with a [scaling] section")
    _cluster_flags(scaling)
    scaling.add_argument(
        "--runs-dir", type=Path, default=Path("runs"), help="parent of campaign folders (default: runs)"
    )
    _overwrite_flag(scaling)

    resume = sub.add_parser("resume", help="continue a campaign from its folder")
    resume.add_argument("folder", type=Path)
    _cluster_flags(resume)
    resume.add_argument(
        "--n-trials",
        type=int,
        default=None,
        metavar="N",
        help="the new trial budget (total, at least the trials already finished); kept for later resumes",
    )
    resume.add_argument(
        "--spec",
        type=Path,
        default=None,
        help="run the rest under this spec (needs --allow-changes if it differs from the campaign's)",
    )
    resume.add_argument(
        "--allow-changes",
        action="store_true",
        help="resume although the spec changed since the campaign started (the changes are recorded)",
    )
    resume.add_argument(
        "--retry-failed",
        action="store_true",
        help="run each failed trial again with its parameters (as new trials, first); the failed ones then "
        "leave the trial budget",
    )

    status = sub.add_parser("status", help="trials so far, best value, running trials")
    status.add_argument("folder", type=Path)

    check = sub.add_parser("check", help="validate a spec (and its cluster settings, as run would) and exit")
    check.add_argument("spec", type=Path, nargs="?", help="study spec (TOML); optional with --versions")
    check.add_argument(
        "--versions",
        action="store_true",
        help="print the versions found of the core dependencies (against the tested ones) and the optional extras, "
        "and which path of Optuna's private API runs",
    )
    check.add_argument("--scheduler", default=None, help="as for run: the Dask scheduler the campaign will join")
    check.add_argument("--insecure", action="store_true", help="as for run: plain TCP on a non-loopback address")
    check.add_argument(
        "--tls", nargs=3, metavar=("CA", "CERT", "KEY"), default=None, help="as for run: PEM files for mutual TLS"
    )

    report = sub.add_parser("report", help="write report/index.html, report.md, trials.csv and trials.parquet")
    report.add_argument("folder", type=Path)

    reproduce = sub.add_parser("reproduce", help="re-run one trial alone and compare it with its record")
    reproduce.add_argument("folder", type=Path)
    reproduce.add_argument("trial", type=int, help="trial number")
    reproduce.add_argument(
        "--tolerance",
        type=float,
        default=None,
        help="relative tolerance when the trial is not deterministic on CPU (default 1e-6)",
    )

    worker = sub.add_parser("worker", help="start a Dask worker for campaigns on this machine (GPU=n or CPU slots)")
    worker.add_argument("scheduler", help="scheduler address (tcp://host:port, tls://host:port) or scheduler file")
    shape = worker.add_mutually_exclusive_group()
    shape.add_argument("--gpus", type=int, default=None, help="GPUs this worker owns (default: all it can see)")
    shape.add_argument("--slots", type=int, default=None, help="CPU slots when there are no GPUs (default: cores)")
    worker.add_argument(
        "--trials-per-gpu",
        type=int,
        default=None,
        help="at most this many trials on one GPU at once (default: as many as the trials ask for, "
        "[trainer] gpus = 1/k: k)",
    )
    worker.add_argument("--tls", nargs=3, metavar=("CA", "CERT", "KEY"), default=None, help="PEM files for mutual TLS")
    worker.add_argument("--host", default="", help="address the worker listens on (default: chosen by Dask)")
    worker.add_argument("--name", default="", help="worker name (default: chosen by Dask)")
    worker.add_argument("--insecure", action="store_true", help="allow plain TCP to a non-loopback scheduler")
    worker.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the scheduler to answer")
    worker.add_argument("--print", action="store_true", help="print the dask worker command and exit")

    script = sub.add_parser(
        "cluster-script", help="print what the spec's slurm/pbs/kubernetes backend would submit; submit nothing"
    )
    script.add_argument("spec", type=Path)
    script.add_argument("--insecure", action="store_true", help="as for run: plain TCP on a non-loopback address")
    script.add_argument(
        "--tls",
        nargs=3,
        metavar=("CA", "CERT", "KEY"),
        default=None,
        help="PEM files for mutual TLS (overrides the spec's tls_* keys)",
    )
    return parser


def _overwrite_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--overwrite",
        action="store_true",
        help="delete the campaign folder of the same study, if there is one, and start anew (after every check "
        "passed; never while its controller runs)",
    )


def _cluster_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--scheduler",
        default=None,
        help="join this Dask scheduler (tls://host:port, tcp://host:port or a scheduler file; plain tcp:// "
        "to a non-loopback host needs --insecure)",
    )
    p.add_argument(
        "--workers", type=int, default=None, help="local worker processes (default: spec, else per core/GPU)"
    )
    p.add_argument("--no-progress", action="store_true", help="no progress display")
    p.add_argument(
        "--insecure",
        action="store_true",
        help="allow plain TCP on a non-loopback listen address or to a non-loopback --scheduler "
        "(anyone reaching it can run code); prints a warning",
    )
    p.add_argument(
        "--tls",
        nargs=3,
        metavar=("CA", "CERT", "KEY"),
        default=None,
        help="PEM files for mutual TLS (overrides the spec's tls_* keys)",
    )


def _warn_insecure(exposure: str) -> None:
    """``--insecure`` was given: say on stderr, in one line, what it lets through (``exposure``) or that it does
    nothing."""
    if exposure:
        print(
            f"hypersweep: warning: --insecure: {exposure}: anyone who can reach it can run code as this user "
            "and read the traffic",
            file=sys.stderr,
        )
    else:
        print("hypersweep: warning: --insecure: has no effect here (everything is on loopback or TLS)", file=sys.stderr)


def _warn_insecure_cluster(spec: CampaignSpec, options: RunOptions) -> None:
    """The cluster settings checked (as ``run``/``resume`` would), then the warnings: what ``--insecure`` lets
    through, that a plain-TCP scheduler, on loopback too, runs anyone's code, and more local workers than cores
    (each in one line)."""
    from search.session.preflight import cluster_for, oversubscribed

    cluster = cluster_for(spec, options)  # every cluster setting checked first: a bad one is the spec's one line
    _warn_plain_tcp(cluster.plain_tcp_warning(), cluster.insecure_exposure() if options.insecure else "")
    crowded = oversubscribed(cluster)
    if crowded:
        print(f"hypersweep: warning: {crowded}", file=sys.stderr)
    if options.insecure:
        _warn_insecure(cluster.insecure_exposure())


def _warn_plain_tcp(warning: str, insecure_exposure: str) -> None:
    """Joining a plain ``tcp://`` scheduler: one line on stderr, unless ``--insecure``'s warning says it already."""
    if warning and not insecure_exposure:
        print(f"hypersweep: warning: {warning}", file=sys.stderr)


def _options(args: argparse.Namespace):
    from search.session.preflight import check_workers_flag
    from search.session.runner import RunOptions

    check_workers_flag(args.workers)
    if getattr(args, "n_trials", None) is not None and args.n_trials < 1:
        raise InputError(f"--n-trials={args.n_trials}: must be >= 1")
    return RunOptions(
        runs_dir=getattr(args, "runs_dir", Path("runs")),
        scheduler=args.scheduler,
        n_workers=args.workers,
        progress=not args.no_progress,
        insecure=args.insecure,
        tls=tuple(args.tls) if args.tls else None,
        warm_start=getattr(args, "warm_start", None),
        n_trials=getattr(args, "n_trials", None),
        allow_changes=getattr(args, "allow_changes", False),
        spec_file=getattr(args, "spec", None) if args.command == "resume" else None,
        overwrite=getattr(args, "overwrite", False),
        retry_failed=getattr(args, "retry_failed", False),
    )


def _cmd_run(args: argparse.Namespace) -> int:
    import dataclasses

    from search.session.runner import run_campaign
    from search.spec.campaign_spec import load_spec
    from search.spec.enqueue import load_enqueue_file

    spec = load_spec(args.spec)  # checks the spec against its trainer, before anything starts
    options = _options(args)
    if getattr(args, "enqueue", None) is not None:
        enqueue = load_enqueue_file(args.enqueue, spec.space, spec.study.n_trials)
        options = dataclasses.replace(options, enqueue=enqueue, enqueue_source=str(args.enqueue))
    _warn_insecure_cluster(spec, options)
    folder = run_campaign(spec, options)
    return _finished(spec, folder)


def _finished(spec: CampaignSpec, folder: CampaignFolder) -> int:
    """Print the final table; every trial failed: raise that, summarised, for exit status 4."""
    from search.reports.status import read_study
    from search.session.runner import summary_text
    from search.store.storage import storage_url

    study = read_study(folder, spec.study.name, storage_url(spec.study.storage, folder))  # no sampler: only read
    print(summary_text(spec, folder, study))
    raise_if_all_failed(study, folder.root, spec.source)
    return EXIT_OK


def raise_if_all_failed(study: optuna.Study, root: Path, spec_source: str = "") -> None:
    """:class:`AllTrialsFailedError` (one line: the reasons, where to look, how to recover) when every one of the
    campaign's trials failed."""
    from search.store.failures import all_failed_error

    error = all_failed_error(study.get_trials(deepcopy=False), root, spec_source)
    if error is not None:
        raise error


def failure_summary(study: optuna.Study, kinds: int = 3) -> str:
    """One line when the study has trials and every one failed (``all 12 trials failed: 12x ValueError: ...``,
    the commonest kinds first, one example message each), else the empty string."""
    from search.store.failures import all_failed_line

    return all_failed_line(study.get_trials(deepcopy=False), kinds)


def _cmd_scaling(args: argparse.Namespace) -> int:
    from search.spec.campaign_spec import SpecError, load_spec

    spec = load_spec(args.spec)
    if spec.scaling is None:
        raise SpecError(str(args.spec), "scaling", "section [scaling] is required by 'hypersweep scaling'")
    return _cmd_run(args)


def _cmd_resume(args: argparse.Namespace) -> int:
    from search.session.runner import resume_campaign
    from search.spec.campaign_spec import load_spec
    from search.store.folder import CampaignFolder

    options = _options(args)
    frozen = CampaignFolder(Path(args.folder).resolve()).spec
    if frozen.exists():
        _warn_insecure_cluster(load_spec(frozen, check_trainer=False), options)
    folder = resume_campaign(args.folder, options)  # checks the frozen spec against its trainer
    return _finished(load_spec(folder.spec, check_trainer=False), folder)


def _cmd_status(args: argparse.Namespace) -> int:
    from search.reports.status import status_text

    print(status_text(args.folder))
    return EXIT_OK


def _cmd_check(args: argparse.Namespace) -> int:
    from search.compat.versions import print_versions
    from search.session.lifecycle import check_new
    from search.session.preflight import cluster_for
    from search.session.runner import RunOptions
    from search.spec.campaign_spec import load_spec
    from search.spec.trainer_check import unchecked_metrics_note

    if print_versions(args.versions) and args.spec is None:
        return EXIT_OK
    if args.spec is None:
        raise InputError("check: a spec file is needed (or --versions alone)")
    spec = load_spec(args.spec)  # and imports the trainer, to check the spec against it
    tls = tuple(args.tls) if args.tls else None
    options = RunOptions(scheduler=args.scheduler, insecure=args.insecure, tls=tls)
    cluster_for(spec, options)  # as run would: the cluster settings,
    check_new(spec, options)  # the warm-start source and the enqueued configurations
    searched = "parameters the objective suggests" if spec.trainer.objective else "searched parameters"
    count = "" if spec.trainer.objective else f"{len(spec.space.distributions())} "
    print(f"{args.spec}: ok ({count}{searched}, {spec.study.n_trials} trials)")
    note = unchecked_metrics_note(spec)
    if note:
        print(note)
    return EXIT_OK


def _cmd_report(args: argparse.Namespace) -> int:
    from search.reports.report import write_report

    files = write_report(args.folder)
    print(f"report: {files.index}\nalso: {files.markdown}, {files.csv}, {files.parquet}")
    return EXIT_OK


def _cmd_reproduce(args: argparse.Namespace) -> int:
    from search.reports.reproduce import DEFAULT_TOLERANCE, comparison_text, reproduce_trial

    tolerance = DEFAULT_TOLERANCE if args.tolerance is None else args.tolerance
    result = reproduce_trial(args.folder, args.trial, tolerance)
    print(comparison_text(result))
    return EXIT_OK if result.matched else EXIT_ERROR


def _cmd_worker(args: argparse.Namespace) -> int:
    import shlex

    from cluster import TLSFiles
    from cluster.worker_cli import WorkerOptions, start_worker, worker_command

    options = WorkerOptions(
        scheduler=args.scheduler,
        gpus=args.gpus,
        slots=args.slots,
        tls=TLSFiles(*args.tls) if args.tls else None,
        host=args.host,
        name=args.name,
        insecure=args.insecure,
        connect_timeout=args.timeout,
        trials_per_gpu=args.trials_per_gpu,
    )
    _warn_plain_tcp(options.plain_tcp_warning(), options.insecure_exposure())
    if options.insecure:
        _warn_insecure(options.insecure_exposure())
    if args.print:
        print(shlex.join(worker_command(options)))
        return EXIT_OK
    start_worker(options)  # becomes `dask worker`; returns only by raising
    return EXIT_ERROR


def _cmd_cluster_script(args: argparse.Namespace) -> int:
    from cluster.backends import submission_text
    from search.session.options import RunOptions, cluster_options
    from search.spec.campaign_spec import load_spec

    spec = load_spec(args.spec, check_trainer=False)  # a job script needs no trainer
    options = cluster_options(spec, RunOptions(insecure=args.insecure, tls=tuple(args.tls) if args.tls else None))
    if options.insecure:
        _warn_insecure(options.insecure_exposure())
    print(submission_text(options), end="")
    return EXIT_OK


def _interrupted(folder: Path | str | None) -> str:
    """The one line for Ctrl-C: what is kept, and the command that continues it."""
    if folder is None:
        return "interrupted before any trial ran; nothing was kept"
    if folder == "?":  # interrupted outside a campaign (while checking, connecting)
        return "interrupted"
    from search.store.failures import kept_line

    return kept_line(Path(folder))


def _closed_pipe() -> int:
    """The reader of stdout went away (``hypersweep report F | head -1``): exit quietly, as git does (141, its
    status when SIGPIPE ends it), with stdout pointed at /dev/null so that the interpreter's last flush is quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_BROKEN_PIPE


def _fail(code: int, message: str) -> int:
    print(f"hypersweep: {message}", file=sys.stderr)
    return code


def _exit_code(exc: BaseException) -> int | None:
    """The exit status for ``exc`` (None: not an error meant for the user, a bug: let it show its traceback).

    Only our own errors are one line: every :class:`HypersweepError`, and ``cluster``'s
    (``cluster.errors.USER_ERRORS``: that package must not import ``spaces``, which loads optuna), each with its
    ``exit_code``. An ``OSError`` (a full disk, a permission) outside a campaign is the machine's, not a bug: its
    one line and status 1. A plain ``ValueError`` is a bug: its traceback shows.
    """
    from cluster.errors import USER_ERRORS

    if isinstance(exc, HypersweepError):
        return int(exc.exit_code)
    if isinstance(exc, USER_ERRORS):
        return int(getattr(exc, "exit_code", EXIT_ERROR))
    if isinstance(exc, OSError):
        return EXIT_ERROR
    return None


def _interrupt_on_sigterm() -> None:
    """SIGTERM (a batch system's cancel, `kill`) stops the campaign like Ctrl-C: cleanly, resumable."""
    from search.interrupts import interrupt

    signal.signal(signal.SIGTERM, interrupt)


def _stacks_on_sigusr1() -> None:
    """``kill -USR1 <pid>``: every thread's stack on the process's stderr, so a hung controller says where it waits
    (its workers' data-parallel ranks do the same)."""
    stream = sys.__stderr__
    if stream is not None and hasattr(signal, "SIGUSR1"):
        with contextlib.suppress(OSError, ValueError):  # a stderr without a file descriptor: nothing to write to
            faulthandler.register(signal.SIGUSR1, file=stream, all_threads=True)


def main(argv: Sequence[str] | None = None) -> int:
    from search.spawned import spawn_as_module

    spawn_as_module(main)
    args = _parser().parse_args(argv)
    # Importing the trainer to check a spec leaves no __pycache__ beside it: a refused command writes nothing.
    # (Worker processes start with their own interpreter settings.)
    sys.dont_write_bytecode = True
    _interrupt_on_sigterm()
    _stacks_on_sigusr1()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.raiseExceptions = False  # a log file on a full disk must not print a traceback per record
    # Worker processes read their log levels from the environment at start: keep them quiet too.
    os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "error")
    from cluster import quiet_dask_logs
    from cluster.quiet_workers import end_spawned_children, quiet_dask_finalizers

    quiet_dask_logs()
    quiet_dask_finalizers()
    import optuna

    from search.store.heap import freeze_after_loads

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    freeze_after_loads()  # this process owns its heap: a loaded study is left out of later collections

    commands = {
        "run": _cmd_run,
        "scaling": _cmd_scaling,
        "resume": _cmd_resume,
        "status": _cmd_status,
        "check": _cmd_check,
        "report": _cmd_report,
        "reproduce": _cmd_reproduce,
        "worker": _cmd_worker,
        "cluster-script": _cmd_cluster_script,
    }
    from search.interrupts import forget_unhandled, interrupt, release

    try:
        release(interrupt)  # from here Ctrl-C is a KeyboardInterrupt, turned into the line below
        return commands[args.command](args)
    except BrokenPipeError:
        return _closed_pipe()
    except KeyboardInterrupt as exc:
        logging.disable(logging.CRITICAL)  # what Dask logs as its cluster goes down after a Ctrl-C is noise
        forget_unhandled()
        end_spawned_children()  # before the exit unlinks the semaphores a worker still starting reads
        return _fail(EXIT_INTERRUPTED, _interrupted(getattr(exc, "folder", "?")))
    except Exception as exc:
        code = _exit_code(exc)
        if code is None:
            raise
        return _fail(code, str(exc))


if __name__ == "__main__":
    sys.exit(main())
