"""The machine's record: torch's CPU capability found without importing torch, and what differs named."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from search.store.machine import inherited_threads, machine_differences


def _record_without_torch(**env: str) -> dict:
    code = "import json, sys; from search.store.machine import cpu_record; r = cpu_record(); "
    code += "assert 'torch' not in sys.modules; print(json.dumps(r))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True, env={**os.environ, **env}
    )
    return json.loads(out.stdout)


@pytest.mark.slow
def test_capability_from_the_cpu_flags_is_torchs_own() -> None:
    torch = pytest.importorskip("torch")
    record = _record_without_torch()
    assert record["capability_source"] == "cpu flags"
    assert record["capability"] == torch.backends.cpu.get_cpu_capability()
    forced = _record_without_torch(ATEN_CPU_CAPABILITY="avx2")
    assert (forced["capability"], forced["capability_source"]) == ("AVX2", "ATEN_CPU_CAPABILITY")
    assert forced["env"]["ATEN_CPU_CAPABILITY"] == "avx2"


def test_differences_are_named_and_unrecorded_fields_are_not_compared() -> None:
    recorded = {
        "packages": {"torch": "2.12.0", "numpy": "2.4.6"},
        "cpu": {"capability": "AVX2", "vendor": "GenuineIntel", "env": {"MKL_CBWR": "AVX2"}},
        "trial_threads": 1,
    }
    here = {
        "packages": {"torch": "2.13.0", "numpy": "2.4.6"},
        "python": {"version": "3.11.9"},
        "cpu": {"capability": "AVX512", "vendor": "GenuineIntel", "model": "x", "env": {"MKL_CBWR": None}},
        "trial_threads": 1,
    }
    assert machine_differences(recorded, here) == [
        "torch 2.12.0 in the campaign, 2.13.0 here",
        "torch's CPU capability AVX2 in the campaign, AVX512 here (ATEN_CPU_CAPABILITY=avx2 runs torch's kernels "
        "of the campaign's where this CPU has them)",
        "MKL_CBWR=AVX2 in the campaign, unset here",
    ]
    assert machine_differences(here, here) == []
    # OMP_NUM_THREADS is the workers' (the embedded cluster sets it to 1); it matters only to a trainer that
    # inherits its thread count, not to the built-in one, which sets its own (trial_threads)
    threads_then = {"cpu": {"env": {"OMP_NUM_THREADS": "1"}}, "trial_threads": 1}
    threads_now = {"cpu": {"env": {"OMP_NUM_THREADS": None}}, "trial_threads": 1}
    assert machine_differences(threads_then, threads_now) == []
    # nor to one that inherits it where the workers' count was recorded: reproduce runs it at that count
    inherited = {**threads_then, "trial_threads": None}
    assert machine_differences(inherited, {**threads_now, "trial_threads": None}) == []
    unrecorded = {"cpu": {"env": {"OMP_NUM_THREADS": None}}, "trial_threads": None}  # a cluster joined
    assert machine_differences(unrecorded, {"cpu": {"env": {"OMP_NUM_THREADS": "4"}}, "trial_threads": None}) == [
        "OMP_NUM_THREADS unset in the campaign, 4 here"
    ]


def test_inherited_threads_are_the_workers_omp_count_for_a_trainer_that_sets_none() -> None:
    workers = {"cpu": {"env": {"OMP_NUM_THREADS": "1"}}}
    assert inherited_threads({**workers, "trial_threads": None}) == 1
    assert inherited_threads({**workers, "trial_threads": 2}) is None  # the built-in trainer sets its own
    assert inherited_threads({"cpu": {"env": {"OMP_NUM_THREADS": None}}, "trial_threads": None}) is None
    assert inherited_threads({"cpu": {"env": {"OMP_NUM_THREADS": "lots"}}, "trial_threads": None}) is None
