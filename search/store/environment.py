"""The environment a campaign ran in, captured at its start and kept as ``environment.json``.

The report describes the run, not the machine that renders it: Python, platform,
torch with its CUDA/cuDNN/NCCL builds and GPU models, package versions, the Dask
cluster's shape, the trainer (every file of its top-level package, or of the modules
it imported from its own folder, each with its sha256, and one digest over them all;
the folders it was looked for in), the study seed and the command, and what a trial's floating point
depends on beyond its seed (:mod:`search.store.machine`: torch's CPU capability, the CPU, the kernel
variables, the thread count each trial trains with).
torch is imported lazily (``search`` must not import it at import time), and the
cluster arrives as a plain dict (the scheduler's identity, :func:`scheduler_info`), so nothing here
imports ``distributed``.

A trainer that went to the workers by value (a function defined in a script or a
notebook, ``search.run(spec, trainer=fit)``) is also kept, pickled, as
``trainer.pkl``: ``reproduce`` and ``resume`` use it when its entry
(``__main__:fit``) cannot be imported.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib.machinery
import importlib.metadata
import importlib.util
import inspect
import json
import platform
import socket
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from search.spec.kept_trainer import (  # re-exported: the environment record's readers
    TRAINER_PICKLE,
    read_environment,
    recorded_trainer_paths,
    stored_trainer,
)
from search.store.folder import write_atomic, write_atomic_bytes
from search.store.machine import cpu_record, trial_threads

if TYPE_CHECKING:
    from search.spec.campaign_spec import CampaignSpec, TrainerSpec

__all__ = [
    "PACKAGES",
    "capture_environment",
    "machine_now",
    "cluster_shape",
    "scheduler_info",
    "trainer_source_sha256",
    "trainer_record",
    "changed_trainer_files",
    "recorded_trainer_paths",
    "stored_trainer",
    "record_environment",
    "read_environment",
    "TRAINER_PICKLE",
]

PACKAGES = ("hypersweep", "optuna", "dask", "distributed", "pandas", "numpy", "torch", "scipy")
OWN_PACKAGES = frozenset({"search", "spaces", "trainers", "cluster"})  # hypersweep's: recorded by its version
MAX_FILES = 2000  # files hashed for one trainer


def capture_environment(
    client_info: Mapping[str, Any] | None = None, spec: CampaignSpec | None = None
) -> dict[str, Any]:
    """A JSON-ready record of this process, the cluster (``client_info``) and the campaign (``spec``)."""
    env: dict[str, Any] = {
        "captured": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "captured_unix": time.time(),
        "command": list(sys.argv),
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
            "executable": sys.executable,
        },
        "platform": {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "platform": platform.platform(),
        },
        "hostname": socket.gethostname(),
        "packages": {name: _version(name) for name in PACKAGES},
        "torch": torch_info(),
        "cpu": cpu_record(),
        "cluster": cluster_shape(client_info) if client_info is not None else None,
    }
    if spec is not None:
        env["trial_threads"] = trial_threads(spec.trainer)
        env["study"] = {
            "name": spec.study.name,
            "seed": spec.study.seed,
            "spec_sha256": spec.sha256,
            "deterministic": spec.study.deterministic,
        }
        env["trainer"] = trainer_record(spec.trainer.entry, spec.source)
    return env


def machine_now(trainer: TrainerSpec) -> dict[str, Any]:
    """What this process would record of the machine for ``trainer`` (``reproduce`` compares it with the record)."""
    return {
        "packages": {name: _version(name) for name in PACKAGES},
        "python": {"version": platform.python_version()},
        "cpu": cpu_record(),
        "trial_threads": trial_threads(trainer),
    }


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def torch_info() -> dict[str, Any]:
    """torch's version, its CUDA/cuDNN/NCCL builds and the visible GPUs (empty fields when absent).

    A CPU-only build that this process has not loaded is described from its ``torch/version.py`` alone (no CUDA,
    so no cuDNN, NCCL nor GPU; ``threads`` unknown): importing torch would cost every controller start seconds.
    """
    spec = importlib.util.find_spec("torch")
    if spec is None:
        return {"version": None}
    build = None if "torch" in sys.modules else _unloaded_build(spec)
    if build is not None and not build.get("cuda") and not build.get("hip"):
        fields: dict[str, Any] = {
            "cuda": None,
            "cudnn": None,
            "nccl": None,
            "cuda_available": False,
            "gpus": [],
            "threads": None,
        }
        return {"version": build["__version__"], **fields}
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


def _unloaded_build(spec: importlib.machinery.ModuleSpec) -> dict[str, Any] | None:
    """The literal assignments of the installed torch's ``version.py`` (``__version__``, ``cuda``, ``hip``), read
    without importing torch; None when that file is not there or not as expected."""
    folder = next(iter(spec.submodule_search_locations or ()), None)
    try:
        tree = ast.parse((Path(folder) / "version.py").read_text()) if folder else None
    except (OSError, SyntaxError, ValueError):
        return None
    found: dict[str, Any] = {}
    for node in tree.body if tree is not None else ():
        target = (
            node.targets[0]
            if isinstance(node, ast.Assign) and len(node.targets) == 1
            else getattr(node, "target", None)
        )
        if isinstance(target, ast.Name) and isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            with contextlib.suppress(ValueError):
                found[target.id] = ast.literal_eval(node.value)
    return found if isinstance(found.get("__version__"), str) and {"cuda", "hip"} <= found.keys() else None


def scheduler_info(client: Any) -> dict[str, Any]:
    """The scheduler's identity with every worker, fetched from it now (:func:`cluster.connect.scheduler_identity`).

    Not the client's cached ``Client.scheduler_info()``: the client's own refresh empties its workers, so a campaign
    under load recorded a cluster of no worker. The cache only where the scheduler does not answer."""
    from cluster.connect import scheduler_identity

    try:
        return scheduler_identity(client)
    except OSError:
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
        rows.append(
            {
                "address": str(address),
                "name": str(worker.get("name", "")),
                "host": str(worker.get("host", "")),
                "threads": int(worker.get("nthreads", 0) or 0),
                "memory_limit": int(worker.get("memory_limit", 0) or 0),
                "resources": resources,
            }
        )
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


def trainer_record(entry: str, source: str) -> dict[str, Any]:
    """The trainer ``entry`` of the spec read from ``source`` as ``environment.json`` keeps it (call it once the
    trainer is loaded).

    ``source``/``source_sha256``: the file defining the entry. ``files``: every ``.py`` file of the
    entry's top-level package, or, for a single module or a script, that file and the modules it
    imported from its own folder (hypersweep's packages and the Python installation left out), each
    with its sha256, relative to ``root``; ``files_sha256``: one digest over them all. ``paths``: the
    folders the trainer was looked for in after ``sys.path`` (the spec's folder, the current directory),
    which its workers got too, and where ``resume`` and ``reproduce`` look again. ``shipped``: ``by value``
    (pickled, also kept as ``trainer.pkl``) or ``by name``.
    """
    from search.spec.trainer_check import trainer_paths

    fn = _by_value(entry)
    record: dict[str, Any] = {"entry": entry, "shipped": "by value" if fn is not None else "by name"}
    record.update(trainer_source_sha256(entry) if fn is None else _function_source(fn))
    try:
        root, files, note = _trainer_files(entry, fn, record.get("source"))
    except OSError as exc:  # an unreadable file: the record says so, the campaign goes on
        root, files, note = None, {}, f"the trainer's files could not be hashed ({exc})"
    record["root"] = str(root) if root else None
    record["files"] = files
    record["files_sha256"] = _digest(files) if files else record.get("source_sha256")
    if note:
        record["files_note"] = note
    record["paths"] = list(trainer_paths(source))
    if fn is not None:
        record["pickle"] = TRAINER_PICKLE
    return record


def _by_value(entry: str) -> Callable[..., Any] | None:
    """The function this process hands its workers by value for ``entry`` (registered, or in ``__main__``), if any."""
    from trainers.api import registered_trainer

    fn = registered_trainer(entry)
    if fn is None and entry.partition(":")[0] == "__main__":
        fn = _main_attr(entry.partition(":")[2])
    return fn


def _main_attr(name: str) -> Callable[..., Any] | None:
    obj: Any = sys.modules.get("__main__")
    for part in name.split("."):
        obj = getattr(obj, part, None)
    return obj if callable(obj) else None


def _function_source(fn: Callable[..., Any]) -> dict[str, Any]:
    """The file defining ``fn`` and its sha256; for a notebook's or an interactive function, the sha256 of its code."""
    code = getattr(fn, "__code__", None)
    filename = getattr(code, "co_filename", None)
    if filename and Path(filename).is_file():
        return {"source": str(Path(filename).resolve()), "source_sha256": _sha256(Path(filename))}
    try:
        text = inspect.getsource(fn).encode()
        how = "its source"
    except (OSError, TypeError):
        text = code.co_code if code is not None else repr(fn).encode()
        how = "its bytecode (no source available)"
    return {
        "source": None,
        "source_sha256": hashlib.sha256(text).hexdigest(),
        "note": f"defined in {filename or 'an interactive session'} (a notebook or interactive session): "
        f"the sha256 is of {how}",
    }


def _trainer_files(
    entry: str, fn: Callable[..., Any] | None, source: str | None
) -> tuple[Path | None, dict[str, str], str]:
    """(root, {path relative to root: sha256}, note) of the trainer's whole package, or of the modules it imported."""
    module_name = getattr(fn, "__module__", None) or entry.partition(":")[0]
    top = module_name.split(".")[0]
    package = None if top == "__main__" else _package_dir(top)
    if package is not None:
        files = sorted(p for p in package.rglob("*.py") if not _hidden(p.relative_to(package)))
        root = package.parent
    elif source:
        root = Path(source).parent
        files = sorted({Path(source), *_imported_from(root)})
    else:
        return None, {}, ""
    note = f"only the first {MAX_FILES} of {len(files)} files are hashed" if len(files) > MAX_FILES else ""
    return root, {str(p.relative_to(root)): _sha256(p) for p in files[:MAX_FILES]}, note


def _package_dir(top: str) -> Path | None:
    """The folder of the top-level package ``top`` (None for a single module or an unknown one)."""
    module = sys.modules.get(top)
    locations = list(getattr(module, "__path__", None) or ())
    if not locations:
        try:
            spec = importlib.util.find_spec(top)
        except (ImportError, ValueError):
            return None
        locations = list(spec.submodule_search_locations or ()) if spec is not None else []
    return Path(locations[0]).resolve() if locations else None


def _imported_from(folder: Path) -> list[Path]:
    """The source files of the modules loaded from ``folder`` (and below it), not hypersweep's nor the installation's."""
    installed = [Path(p).resolve() for p in {sys.prefix, sys.base_prefix, sys.exec_prefix}]
    found = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if not file or not file.endswith(".py") or name.split(".")[0] in OWN_PACKAGES:
            continue
        path = Path(file).resolve()
        if folder in path.parents and not any(p in path.parents for p in installed) and path.is_file():
            if not _hidden(path.relative_to(folder)):
                found.append(path)
    return found


def _hidden(relative: Path) -> bool:
    return any(part.startswith(".") or part == "__pycache__" for part in relative.parts[:-1])


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _digest(files: Mapping[str, str]) -> str:
    return hashlib.sha256("".join(f"{name}\0{digest}\n" for name, digest in sorted(files.items())).encode()).hexdigest()


def changed_trainer_files(recorded: Mapping[str, Any]) -> list[str]:
    """The files of a recorded trainer (``trainer_record``) that differ now: changed, or gone."""
    root, files = recorded.get("root"), recorded.get("files") or {}
    if not root:
        return []
    changed = []
    for name, digest in sorted(files.items()):
        path = Path(root) / name
        if not path.is_file():
            changed.append(f"{name} (gone)")
        elif _sha256(path) != digest:
            changed.append(name)
    return changed


def _store_trainer(folder: Path, entry: str) -> None:
    fn = _by_value(entry)
    if fn is not None:
        from cluster.entrypoint import pack_trainer  # as its workers got it

        write_atomic_bytes(folder / TRAINER_PICKLE, pack_trainer(fn))


def record_environment(path: Path, env: Mapping[str, Any]) -> None:
    """Write ``env`` to ``path`` atomically; a resumed campaign keeps the first record and appends to ``resumes``.

    A trainer shipped by value is written beside it, pickled (``trainer.pkl``, the newest run's).
    """
    trainer = env.get("trainer")
    if isinstance(trainer, Mapping) and trainer.get("pickle"):
        _store_trainer(path.parent, str(trainer.get("entry")))
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
