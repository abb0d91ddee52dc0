"""``[trainer] objective = true``: an empty space, the sampler on the controller's loop, and what cannot hold an
objective refused in one line naming the key."""

from __future__ import annotations

from typing import Any

import pytest

from search.spec.campaign_spec import parse_spec
from search.spec.table import SpecError


def spec(**tables: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "study": {"name": "o", "direction": "minimize", "metric": "value"},
        "trainer": {"entry": "mod:objective", "objective": True},
    }
    for name, table in tables.items():
        data[name] = {**data.get(name, {}), **table}
    return data


def test_an_objective_campaign_has_an_empty_space_and_samples_inline() -> None:
    parsed = parse_spec(spec(), check_trainer=False)
    assert parsed.trainer.objective and len(parsed.space) == 0 and parsed.study.sampling == "inline"
    assert len(parse_spec(spec(space={}), check_trainer=False).space) == 0


@pytest.mark.parametrize(
    ("tables", "key", "words"),
    [
        ({"space": {"lr": {"low": 0.1, "high": 1.0}}}, "space", "the objective suggests its own parameters"),
        ({"study": {"deterministic": True}}, "study.deterministic", "sampled while it runs"),
        ({"study": {"sampling": "process"}}, "study.sampling", 'must be "inline"'),
        ({"trainer": {"data_parallel": 2}}, "trainer.data_parallel", "must be 1"),
        ({"pbt": {"interval": 1}}, "pbt", "population-based training"),
    ],
)
def test_what_cannot_hold_an_objective_is_refused(tables: dict[str, Any], key: str, words: str) -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec(spec(**tables), check_trainer=False)
    assert caught.value.key == key and words in str(caught.value)


def test_without_the_key_an_empty_space_is_still_refused() -> None:
    data = spec()
    del data["trainer"]["objective"]
    with pytest.raises(SpecError, match="at least one parameter"):
        parse_spec(data, check_trainer=False)


def test_an_importable_objective_named_by_a_spec_runs_wrapped() -> None:
    """``hypersweep run`` of a spec naming ``module:objective``: the campaign ships, keeps and re-runs the wrapper."""
    from search.objective.trainer import ObjectiveTrainer
    from trainers.api import registered_trainer

    parse_spec(spec(trainer={"entry": "objectives:tutorial"}))
    wrapped = registered_trainer("objectives:tutorial")
    assert isinstance(wrapped, ObjectiveTrainer) and wrapped.metrics == ("value",)
