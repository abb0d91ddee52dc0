"""What ``run``, ``resume`` and ``check`` verify about the cluster before anything is created or started.

Each refusal is one line naming the spec file and key (or the command-line flag): a non-loopback
``listen`` without TLS, TLS files that are not there, more local workers than any machine holds,
and a data-parallel width the workers of a known cluster (the embedded one) cannot give a trial together.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from cluster import ClusterOptions
from cluster.connect import is_loopback
from cluster.options import check_scheduler_target
from search.session.options import cluster_options
from search.spec.campaign_spec import DATA_PARALLEL, CampaignSpec
from search.spec.cluster import MAX_WORKERS, ClusterSpec
from search.spec.extras import check_extras
from search.spec.table import SpecError
from spaces.errors import InputError

if TYPE_CHECKING:
    from search.session.options import RunOptions
    from spaces.params import SearchSpace

__all__ = ["cluster_for", "check_workers_flag", "oversubscribed"]

_TLS_FLAG = ("CA", "CERT", "KEY")
#: The advice to listen on loopback follows the rule (search.spec.cluster): SLURM jobs may run on this host,
#: PBS jobs are taken to run elsewhere.
_LOOPBACK_ADVICE = {"slurm": "listen on 127.0.0.1 (where the SLURM jobs run on this host), ", "pbs": ""}


def check_workers_flag(n_workers: int | None) -> None:
    """``--workers N``: from 1 to :data:`~search.spec.cluster.MAX_WORKERS`."""
    if n_workers is not None and not 1 <= n_workers <= MAX_WORKERS:
        raise InputError(f"--workers {n_workers}: must be from 1 to {MAX_WORKERS}")


def cluster_for(spec: CampaignSpec, options: RunOptions) -> ClusterOptions:
    """The cluster options a run of ``spec`` uses, every setting checked (see the module's docstring)."""
    check_extras(spec)  # an optional package the spec needs: named with its install command, before any trial
    check_workers_flag(options.n_workers)
    _check_tls_flag(options.tls)
    _check_scheduler_flag(options.scheduler)
    _check_listen(spec.cluster, spec.source, options)
    try:
        cluster = cluster_options(spec, options)
    except SpecError:
        raise
    except ValueError as exc:  # ClusterOptions' own rule, not tied to one key
        raise SpecError(spec.source, "cluster", str(exc)) from None
    _check_widths(max(spec.widths()), spec.space, spec.source, cluster)
    return cluster


def _check_scheduler_flag(scheduler: str | None) -> None:
    """``--scheduler ADDRESS``: a scheduler address with a host and a port, or an existing scheduler file."""
    if scheduler:
        try:
            check_scheduler_target(scheduler)
        except ValueError as exc:
            raise InputError(f"--{exc}") from None


def _check_tls_flag(files: tuple[str, str, str] | None) -> None:
    for name, path in zip(_TLS_FLAG, files or ()):
        if not os.path.isfile(path):
            raise InputError(f"--tls {name} {path!r}: no such file (a PEM file is needed here)")


def _check_listen(c: ClusterSpec, source: str, options: RunOptions) -> None:
    """A cluster started here listens off loopback only with TLS files or ``--insecure`` (``source``: the spec's)."""
    starts_own = not (options.scheduler or c.scheduler)
    if starts_own and not is_loopback(c.listen) and not (c.tls or options.tls) and not options.insecure:
        raise SpecError(
            source,
            "cluster.listen",
            f"{c.listen!r} without TLS is refused: anyone who reaches it "
            f"could run code on the workers; give tls_ca_file, tls_cert_file and tls_key_file, "
            f"{_LOOPBACK_ADVICE.get(c.backend, 'listen on 127.0.0.1, ')}or pass --insecure to accept the risk",
        )


def _check_widths(width: int, space: SearchSpace, source: str, cluster: ClusterOptions) -> None:
    """On the embedded cluster, whose workers are known now, the widest trial (``width``) fits on all of them
    together (a trial wider than one worker spans several)."""
    from cluster.backends import local_shape

    if cluster.backend is None or cluster.backend.kind != "local":
        return
    n_workers, resources = local_shape(cluster)
    resource, per_worker = next(iter(resources.items()))
    if width > per_worker * n_workers:
        key = f"space.{DATA_PARALLEL}" if DATA_PARALLEL in space else "trainer.data_parallel"
        fix = "[cluster] n_workers or slots_per_worker" if resource == "CPU" else "the GPUs ([cluster] n_workers)"
        raise SpecError(
            source,
            key,
            f"a trial may take {width} {resource} slots, but the embedded cluster's "
            f"{n_workers} worker(s) have {per_worker * n_workers:g} in all ({per_worker:g} each); "
            f"lower it or raise {fix}",
        )


def oversubscribed(cluster: ClusterOptions) -> str:
    """One warning line when the embedded cluster runs more CPU trials at once than this machine has cores
    (they share the cores, so each runs slower and the campaign gains nothing); "" otherwise."""
    from cluster.backends import local_shape

    if cluster.backend is None or cluster.backend.kind != "local":
        return ""
    n_workers, resources = local_shape(cluster)
    cores = os.cpu_count() or 1
    slots = int(n_workers * resources.get("CPU", 0))
    if slots <= cores:
        return ""
    return (
        f"{n_workers} worker(s) with {slots} CPU slot(s) on {cores} core(s): trials share the cores and each runs "
        f"slower; --workers {cores} (one per core) is usually faster"
    )
