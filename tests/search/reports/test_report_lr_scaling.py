"""The report's learning-rate section when the built-in trainer scales the searched lr to the batch size."""

from __future__ import annotations

import html
import math
from pathlib import Path

import optuna
import pytest

from search.reports import sections
from search.reports.data import CampaignData
from search.spec.campaign_spec import load_spec
from search.store.folder import CampaignFolder
from search.store.records import Attr, encode_history
from tests.spec_files import write_spec

SPEC = """
[study]
name = "scaled"
metric = "val_accuracy"
direction = "maximize"

[space]
lr_scaling = "{rule}"
base_batch_size = 1024
batch_size = 256
lr = {{ type = "float", low = 0.1, high = 1.0, log = true }}
"""


def _campaign(tmp_path: Path, rule: str) -> tuple[CampaignData, dict[int, float]]:
    spec = load_spec(write_spec(tmp_path / f"{rule}.toml", SPEC.format(rule=rule)), check_trainer=False)
    study = optuna.create_study(direction="maximize")
    dist = {"lr": optuna.distributions.FloatDistribution(0.1, 1.0, log=True)}
    factor = {"none": 1.0, "sqrt": math.sqrt(256 / 1024), "linear": 256 / 1024}[rule]
    searched = {0: 0.2, 1: 0.4, 2: 0.8}
    for number, lr in searched.items():
        history = [[step, {"lr": lr * factor, "val_accuracy": 0.5 + 0.1 * number + 0.01 * step}] for step in (1, 2, 3)]
        config = {"params": {"lr": lr, "lr_scaling": rule, "base_batch_size": 1024, "batch_size": 256}}
        study.add_trial(
            optuna.trial.create_trial(
                params={"lr": lr},
                distributions=dist,
                value=history[-1][1]["val_accuracy"],
                user_attrs={Attr.HISTORY: encode_history(history), Attr.CONFIG: config},
            )
        )
    folder = CampaignFolder(tmp_path / rule)
    trials = tuple(study.get_trials())
    return CampaignData(folder, spec, study, trials, None, None), {n: lr * factor for n, lr in searched.items()}


@pytest.mark.parametrize("rule, formula", [("sqrt", "lr × sqrt(B / 1,024)"), ("linear", "lr × B / 1,024")])
def test_the_searched_lr_is_shown_beside_the_trained_one_with_the_rule(tmp_path: Path, rule: str, formula: str) -> None:
    data, trained = _campaign(tmp_path, rule)
    section = sections.lr(data)
    assert section.shown, section.omitted
    header, _rule_line, *rows = [line for line in section.md.splitlines() if line.startswith("|")]
    assert [c.strip() for c in header.strip("|").split("|")][-2:] == ["searched lr", "batch size"]
    seen = {}
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        number, first, searched, batch = int(cells[0]), float(cells[3]), float(cells[-2]), int(cells[-1])
        assert first == pytest.approx(trained[number], rel=1e-3) and batch == 256
        seen[number] = searched
    assert seen == pytest.approx({0: 0.2, 1: 0.4, 2: 0.8}, rel=1e-3)
    assert f"{formula} (lr_scaling = {rule!r}, base_batch_size = 1,024)" in section.md
    assert "best-trials table and the 'searched lr' column, the searched lr" in html.unescape(section.html)


def test_without_a_scaling_rule_the_section_is_as_before(tmp_path: Path) -> None:
    data, _trained = _campaign(tmp_path, "none")
    section = sections.lr(data)
    assert section.shown and "searched lr" not in section.md and "scaled" not in section.md
