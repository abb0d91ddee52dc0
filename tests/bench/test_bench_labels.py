"""The bench harness measures what its labels say (issue 17, item 4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from bench import overhead
from bench.simulate import SimResult, median_rows, simulate, storage_setting
from search.store.journal import GroupCommitJournal


def test_storage_labels_map_to_the_specs_storage_settings() -> None:
    assert storage_setting("journal") == ""  # the default: the group-commit journal file
    assert storage_setting("sqlite") == "sqlite"
    assert storage_setting("memory") == ""  # never opened: open_study makes an in-memory study
    with pytest.raises(ValueError):
        storage_setting("postgres")


@pytest.mark.slow
@pytest.mark.parametrize("label", ["memory", "journal", "sqlite"])
def test_simulated_rows_use_the_storage_they_are_labelled_with(label: str, tmp_path: Path) -> None:
    result, _ex, study = simulate(4, "random", 8, storage=label, controller_time_scale=0.0, workdir=tmp_path)
    assert result.storage == label and result.trials == 8
    storage = study._storage
    backend = getattr(storage, "_backend", None)
    if label == "memory":
        assert isinstance(storage, optuna.storages.InMemoryStorage)
    elif label == "journal":
        assert isinstance(backend, GroupCommitJournal)
    else:
        assert isinstance(getattr(storage, "_backend", storage), optuna.storages.RDBStorage)
        assert str(storage._backend.engine.url).endswith(".db")


def _row(**kw: Any) -> SimResult:
    base = dict(
        bench="nb201",
        workers=16,
        sampler="random",
        storage="journal",
        trials=64,
        failure_rate=0.0,
        real_s=1.0,
        ctrl_ms_per_trial=1.0,
        ctrl_trials_per_s=1000.0,
        needed_trials_per_s=0.3,
        util=1.0,
        util_all=0.9,
        makespan_s=300.0,
        lost=0,
        best=80.0,
        regret=4.0,
        t_best=100.0,
        t_regret1=200.0,
    )
    return SimResult(**(base | kw))


def test_simulate_reports_the_median_of_each_configuration() -> None:
    rows = [_row(ctrl_ms_per_trial=v, util=u) for v, u in ((3.0, 0.99), (1.0, 0.97), (2.0, 0.98))]
    rows.append(_row(storage="sqlite", ctrl_ms_per_trial=9.0))
    table = median_rows(rows)
    assert [(r.storage, n) for r, n in table] == [("journal", 3), ("sqlite", 1)]
    assert table[0][0].ctrl_ms_per_trial == 2.0 and table[0][0].util == 0.98


def _fake_peer(calls: list[tuple[int, float, str]]):  # type: ignore[no-untyped-def]
    def run(ctx: Any, n: int, sleep: float, sampler: str, **kw: Any) -> dict[str, Any]:
        calls.append((n, sleep, sampler))
        spans = [(101.0 + i * 0.01, 101.0 + i * 0.01 + sleep) for i in range(n)]
        return {"wall": 3.0, "started_at": 100.0, "spans": spans, "done": n, "sampler_busy": 0.5}

    return run


SIZES = {"n100ms": 20, "n1s": 8, "ntrivial": 50, "nslow": 0}


@pytest.mark.parametrize("peer", ["ray", "daskstorage-250", "naive-mem"])
def test_every_peer_runs_every_measure_at_the_same_size(peer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, float, str]] = []
    monkeypatch.setitem(overhead.PEERS, peer, _fake_peer(calls))
    rec = overhead.Recorder()
    overhead.measure_peer(rec, overhead.Ctx(None, Path("."), 0), peer, 0, SIZES, ["random"])
    assert calls == [(20, 0.1, "random"), (8, 1.0, "random"), (50, 0.0, "random")]  # Ray too: 50 trivial trials
    got = {r["measure"]: r["value"] for r in rec.rows}
    assert set(got) >= {"util_100ms", "util_1s", "trials_per_s", "startup_s", "trials_per_s_ex_start"}
    assert got["startup_s"] == pytest.approx(1.0)  # call start 100.0, first trial 101.0
    assert got["trials_per_s"] == pytest.approx(50 / 3.0)
    assert got["trials_per_s_ex_start"] == pytest.approx(50 / 2.0)


def test_measures_select_what_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[int, float, str]] = []
    monkeypatch.setitem(overhead.PEERS, "ray", _fake_peer(calls))
    rec = overhead.Recorder()
    overhead.measure_peer(rec, overhead.Ctx(None, Path("."), 0), "ray", 0, SIZES, ["random", "tpe"], ["trivial"])
    assert calls == [(50, 0.0, "random"), (50, 0.0, "tpe")]


def test_the_hypersweep_trivial_row_carries_the_paired_serial_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(overhead.PEERS, "hypersweep", _fake_peer([]))
    monkeypatch.setattr(overhead, "sampler_bound", lambda n, sampler, seed: 50.0)
    rec = overhead.Recorder()
    overhead.measure_peer(rec, overhead.Ctx(None, Path("."), 0), "hypersweep", 0, SIZES, ["tpe"], ["trivial"])
    got = {(r["measure"], r["peer"]): r["value"] for r in rec.rows}
    assert got[("trials_per_s", "tpe-bound")] == 50.0
    assert got[("share_of_bound", "hypersweep")] == pytest.approx((50 / 3.0) / 50.0)
