"""What a trial's floating point depends on beyond its seed and params: the machine, recorded and compared.

Measured on torch 2.13 (CPU build, MKL): the same trial, same seed, same data, 1 process thread, gives other
losses from the first epoch on with torch's kernels set to another CPU capability (``ATEN_CPU_CAPABILITY``
``avx2`` against ``avx512``: vectorised reductions of another width) and with MKL on another code path
(``MKL_CBWR``; MKL also picks its path by the CPU's vendor), and with 2 intra-op threads instead of 1.
A retry from a checkpoint changes nothing (tests/trainers/test_trainer_resume.py). So ``environment.json``
keeps the CPU (torch's capability, vendor, model, cores), the environment variables that steer those
kernels, and the thread count the trials train with, and ``reproduce`` names each that differs here.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from search.spec.campaign_spec import TrainerSpec

__all__ = ["cpu_record", "trial_threads", "inherited_threads", "machine_differences", "KERNEL_ENV"]

#: The environment variables that choose torch's and MKL's CPU kernels, then those that set their threads.
KERNEL_CHOICE = ("ATEN_CPU_CAPABILITY", "MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "DNNL_MAX_CPU_ISA")
KERNEL_ENV = (*KERNEL_CHOICE, "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_AVX512 = frozenset({"avx512f", "avx512bw", "avx512vl", "avx512dq", "fma"})  # what ATen asks for AVX512
_AVX2 = frozenset({"avx2", "fma"})
_BUILT_IN_DEFAULT_THREADS = 1  # trainers.classifier's options.torch_threads default


def cpu_record() -> dict[str, Any]:
    """This machine's CPU as torch's kernels see it: capability, vendor, model, cores, the kernel variables."""
    info = _cpuinfo()
    capability, source = _capability(info.get("flags", ""))
    return {
        "capability": capability,
        "capability_source": source,
        "vendor": info.get("vendor_id") or platform.processor() or None,
        "model": info.get("model name") or None,
        "cores": os.cpu_count(),
        "machine": platform.machine(),
        "env": {name: os.environ.get(name) for name in KERNEL_ENV},
    }


def trial_threads(trainer: TrainerSpec) -> int | None:
    """The intra-op thread count the built-in trainer sets for each trial (None: a trainer of the user's own,
    which inherits its worker's)."""
    if not trainer.entry.startswith("trainers."):
        return None
    threads = dict(trainer.options).get("torch_threads", _BUILT_IN_DEFAULT_THREADS)
    return threads if isinstance(threads, int) and not isinstance(threads, bool) else None


def inherited_threads(recorded: Mapping[str, Any]) -> int | None:
    """The intra-op thread count a trial of a trainer that sets none (``trial_threads`` null) inherited on the
    campaign's workers: their ``OMP_NUM_THREADS`` as recorded (the embedded cluster's workers get 1, as do
    ``hypersweep worker``'s and Dask's nannies'); None for the built-in trainer, or where none was recorded."""
    if "trial_threads" in recorded and recorded["trial_threads"] is not None:
        return None
    value = _get(recorded, ("cpu", "env", "OMP_NUM_THREADS"))
    try:
        threads = int(str(value).strip())
    except ValueError:
        return None
    return threads if threads >= 1 else None


def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        key, _, value = line.partition(":")
        fields[key.strip()] = value.strip()
    return fields


def _capability(flags: str) -> tuple[str, str]:
    """(torch's CPU capability, where it came from): torch's own answer where torch is loaded, else ATen's rule
    (``ATEN_CPU_CAPABILITY``, then the CPU's flags) applied here, so a controller does not import torch."""
    if "torch" in sys.modules:
        import torch

        return str(torch.backends.cpu.get_cpu_capability()), "torch"
    forced = os.environ.get("ATEN_CPU_CAPABILITY", "").strip().lower()
    if forced in ("default", "avx2", "avx512"):
        return forced.upper(), "ATEN_CPU_CAPABILITY"
    have = set(flags.split())
    if _AVX512 <= have:
        return "AVX512", "cpu flags"
    if _AVX2 <= have:
        return "AVX2", "cpu flags"
    return "DEFAULT", "cpu flags"


def machine_differences(recorded: Mapping[str, Any], here: Mapping[str, Any]) -> list[str]:
    """One line per thing that differs between the campaign's record and this machine's (same layout as
    ``environment.json``): package versions, Python, torch's CPU capability, CPU vendor and model, the
    kernel variables (their thread variables only for a trainer that inherits its thread count), the trials'
    thread count. Fields the record lacks are not compared."""
    lines = []
    for name, then in sorted(dict(recorded.get("packages") or {}).items()):
        now = dict(here.get("packages") or {}).get(name)
        if then != now:
            lines.append(f"{name} {then} in the campaign, {now} here")
    pairs = [
        ("Python", ("python", "version")),
        ("torch's CPU capability", ("cpu", "capability")),
        ("CPU vendor", ("cpu", "vendor")),
        ("CPU model", ("cpu", "model")),
        ("intra-op threads per trial", ("trial_threads",)),
    ]
    for label, path in pairs:
        then, now = _get(recorded, path), _get(here, path)
        if then is not None and then != now:
            lines.append(f"{label} {then} in the campaign, {now} here" + _hint(path, then))
    # the thread variables matter only to a trainer that inherits its count where reproduce cannot give it the
    # workers' count (the built-in one sets its own; reproduce runs one that inherits at the recorded count)
    inherits = recorded.get("trial_threads") is None and inherited_threads(recorded) is None
    compared = KERNEL_ENV if inherits else KERNEL_CHOICE
    for name, then in sorted(dict(_get(recorded, ("cpu", "env")) or {}).items()):
        now = dict(_get(here, ("cpu", "env")) or {}).get(name)
        if name in compared and then != now:
            lines.append(f"{name}{' unset' if then is None else f'={then}'} in the campaign, {_shown(now)} here")
    return lines


def _shown(value: Any) -> str:
    return "unset" if value is None else str(value)


def _get(record: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = record
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def _hint(path: tuple[str, ...], then: Any) -> str:
    if path == ("cpu", "capability") and str(then).lower() in ("default", "avx2", "avx512"):
        return (
            f" (ATEN_CPU_CAPABILITY={str(then).lower()} runs torch's kernels of the campaign's where this CPU has them)"
        )
    return ""
