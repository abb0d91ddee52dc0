"""What a run of a campaign is given besides its spec: the command line's (or ``search.run``'s) overrides,
and the cluster options they and the spec's ``[cluster]`` table make (:func:`cluster_options`)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from cluster import ClusterOptions, TLSFiles
from search.loop.hooks import CampaignHooks
from search.spec.campaign_spec import CampaignSpec
from search.spec.gpu import gpu_packing

__all__ = ["RunOptions", "cluster_options"]


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """Command-line overrides of the spec and display settings."""

    runs_dir: Path = Path("runs")
    scheduler: str | None = None
    n_workers: int | None = None
    progress: bool = True
    insecure: bool = False
    tls: tuple[str, str, str] | None = None  # (ca, cert, key) from the command line
    enqueue: tuple[dict[str, Any], ...] = ()  # configurations to run first (checked against the spec's space)
    enqueue_source: str = "enqueue"  # where they came from (a file, search.run), recorded on their trials
    warm_start: str | None = None  # a warm-start source replacing [study] warm_start
    n_trials: int | None = None  # resume: the new trial budget
    allow_changes: bool = False  # resume: run under a spec that differs from the recorded one
    spec_file: Path | None = None  # resume: the spec to run the rest under (default: the folder's spec.toml)
    hooks: CampaignHooks | None = None  # search.run(callbacks=..., on_report=...)
    overwrite: bool = False  # run: a folder holding this campaign is deleted and the campaign started anew
    retry_failed: bool = False  # resume: each failed trial runs again (its params enqueued), out of the budget


def cluster_options(spec: CampaignSpec, options: RunOptions) -> ClusterOptions:
    """The cluster a run joins or starts: the spec's [cluster] table with the command line's overrides."""
    from cluster.backends import backend_named
    from search.spec.table import SpecError

    c = spec.cluster
    files = options.tls or ((c.tls_ca_file, c.tls_cert_file, c.tls_key_file) if c.tls else None)
    address = options.scheduler if options.scheduler is not None else c.scheduler
    # A scheduler address joins that scheduler: --scheduler whatever the spec's backend, and the spec's own
    # scheduler unless its backend has deploy settings (the spec refuses a scheduler for those).
    joined = bool(options.scheduler) or bool(address and c.deploy is None)
    backend = backend_named("address") if joined else backend_named(c.backend, c.deploy)
    if backend.joins_scheduler and not address:
        raise SpecError(
            spec.source,
            "cluster.scheduler",
            f"backend {backend.kind!r} needs a scheduler address "
            "(tcp://host:port, tls://host:port or a scheduler file), or pass --scheduler",
        )
    backend.require()  # a missing optional extra fails here, before anything is created
    return ClusterOptions(
        address=address,
        backend=backend,
        n_workers=options.n_workers or c.n_workers or None,
        slots_per_worker=c.slots_per_worker,
        host=c.listen,
        dashboard=c.dashboard,
        connect_timeout=c.connect_timeout,
        worker_timeout=c.worker_timeout,
        tls=TLSFiles(*files) if files else None,
        insecure=options.insecure,
        trials_per_gpu=gpu_packing(spec).trials_per_gpu,
    )
