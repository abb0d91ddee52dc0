"""The environment a campaign ran in, captured at its start and kept as ``environment.json``.

The report describes the run, not the machine that renders it: Python, platform,
torch with its CUDA/cuDNN/NCCL builds and GPU models, package versions, the Dask
cluster's shape, the hash of the trainer's source, the study seed and the command.
torch is imported lazily (``search`` must not import it at import time), and the
cluster arrives as a plain dict (``Client.scheduler_info()``), so nothing here
imports ``distributed``.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import platform
import socket
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.store.folder import write_atomic

if TYPE_CHECKING:
    from search.spec.campaign_spec import CampaignSpec

__all__ = [
    "PACKAGES",
    "capture_environment",
    "cluster_shape",
    "scheduler_info",
    "trainer_source_sha256",
    "record_environment",
    "read_environment",
]

PACKAGES = ("hypersweep", "optuna", "dask", "distributed", "pandas", "numpy", "torch", "scipy")


def capture_environment(
    client_info: Mapping[str, Any] | None = None, spec: CampaignSpec | None = None
) -> dict[str, Any]:
    """A JSON-ready record of this process, the cluster (``client_info``) and the campaign (``spec``)."""
    env: dict[str, Any] = {
        "captured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "captured_unix": time.time(),
        "command": list(sys.argv),
        "python": {"version": platform.python_version(), "implementation": platform.python_implementation(),
                   "executable": sys.executable},
        "platform": {"system": platform.system(), "release": platform.release(), "machine": platform.machine(),
                     "platform": platform.platform()},
        "hostname": socket.gethostname(),
        "packages": {name: _version(name) for name in PACKAGES},
        "torch": torch_info(),
        "cluster": cluster_shape(client_info) if client_info is not None else None,
    }
    if spec is not None:
        env["study"] = {"name": spec.study.name, "seed": spec.study.seed, "spec_sha256": spec.sha256,
                        "deterministic": spec.study.deterministic}
        env["trainer"] = {"entry": spec.trainer.entry, **trainer_source_sha256(spec.trainer.entry)}
    return env


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_info() -> dict[str, Any]:
    """torch's version, its CUDA/cuDNN/NCCL builds and the visible GPUs (empty fields when absent)."""
    if importlib.util.find_spec("torch") is None:
        return {"version": None}
    import torch  # lazily: search does not import torch at import time

    info: dict[str, Any] = {
        "version": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": None,
        "nccl": None,
        "cuda_available": torch.cuda.is_available(),
        "gpus": [],
        "threads": torch.get_num_threads(),
    }
    try:
        info["cudnn"] = torch.backends.cudnn.version()
    except Exception:  # noqa: BLE001 - a CPU build reports no cuDNN; the field stays empty
        info["cudnn"] = None
    if info["cuda_available"]:
        try:
            nccl = torch.cuda.nccl.version()
            info["nccl"] = ".".join(map(str, nccl)) if isinstance(nccl, tuple) else str(nccl)
        except Exception:  # noqa: BLE001 - a build without NCCL
            info["nccl"] = None
        info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return info


def scheduler_info(client: Any) -> dict[str, Any]:
    """``client.scheduler_info()`` with every worker (newer ``distributed`` lists 5 unless asked)."""
    try:
        return dict(client.scheduler_info(n_workers=-1))
    except TypeError:
        return dict(client.scheduler_info())


def cluster_shape(info: Mapping[str, Any]) -> dict[str, Any]:
    """Workers, threads, resources and hosts from a ``scheduler_info()`` dict."""
    workers = dict(info.get("workers") or {})
    rows = []
    totals: dict[str, float] = {}
    for address, worker in sorted(workers.items()):
        resources = {str(k): float(v) for k, v in dict(worker.get("resources") or {}).items()}
        for key, value in resources.items():
            totals[key] = totals.get(key, 0.0) + value
        rows.append({
            "address": str(address),
            "name": str(worker.get("name", "")),
            "host": str(worker.get("host", "")),
            "threads": int(worker.get("nthreads", 0) or 0),
            "memory_limit": int(worker.get("memory_limit", 0) or 0),
            "resources": resources,
        })  # fmt: skip
    return {
        "scheduler": str(info.get("address", "")),
        "workers": len(rows),
        "threads": sum(r["threads"] for r in rows),
        "resources": totals,
        "hosts": sorted({r["host"] for r in rows}),
        "worker_list": rows,
    }


def trainer_source_sha256(entry: str) -> dict[str, Any]:
    """The path and sha256 of the module that defines ``entry`` (``module:function``), found without importing it."""
    module_name = entry.partition(":")[0]
    try:
        spec = importlib.util.find_spec(module_name)
    except (ImportError, ValueError) as exc:
        return {"source": None, "source_sha256": None, "note": f"cannot locate module {module_name!r} ({exc})"}
    origin = spec.origin if spec is not None else None
    if not origin or not Path(origin).is_file():
        return {"source": origin, "source_sha256": None, "note": f"module {module_name!r} has no source file"}
    digest = hashlib.sha256(Path(origin).read_bytes()).hexdigest()
    return {"source": str(Path(origin).resolve()), "source_sha256": digest}


def record_environment(path: Path, env: Mapping[str, Any]) -> None:
    """Write ``env`` to ``path`` atomically; a resumed campaign keeps the first record and appends to ``resumes``."""
    if path.exists():
        try:
            first = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            first = None
        if isinstance(first, dict):
            first.setdefault("resumes", []).append(dict(env))
            write_atomic(path, json.dumps(first, indent=2, sort_keys=True, default=str) + "\n")
            return
    write_atomic(path, json.dumps(dict(env), indent=2, sort_keys=True, default=str) + "\n")


def read_environment(path: Path) -> dict[str, Any] | None:
    """The recorded environment, or ``None`` when the campaign has none (or it is unreadable)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return data if isinstance(data, dict) else None
