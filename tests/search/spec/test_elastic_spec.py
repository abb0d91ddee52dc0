"""The [elastic] table: its defaults, and each mistake one line naming the key and the rule."""

from __future__ import annotations

from pathlib import Path

import pytest

from search.spec.campaign_spec import SpecError, load_spec
from search.spec.elastic import ElasticSpec
from tests.spec_files import write_spec

BASE = """
[study]
name = "toy"
direction = "maximize"
metric = "score"
sampler = "random"
seed = 1
n_trials = 3
pruner = "asha"

[trainer]
entry = "toy_trainers:fit"
epochs = 4

[space]
batch_size = 64
quality = { type = "float", low = 0.0, high = 1.0 }
"""


def load(tmp_path: Path, elastic: str, base: str = BASE) -> ElasticSpec | None:
    path = write_spec(tmp_path / "spec.toml", base + "\n[elastic]\n" + elastic)
    return load_spec(path, check_trainer=False).elastic


def test_an_elastic_table_loads_with_its_defaults(tmp_path: Path) -> None:
    spec = load(tmp_path, "widths = [1, 2, 4]\n")
    assert spec == ElasticSpec((1, 2, 4), "promotion", "fixed", None, 1, None)
    assert (spec.start_width, spec.most_slots) == (1, 4)
    grown = load(tmp_path, 'widths = [1, 2]\nbatch = "grow"\nreserve = 0\nmax_slots = 3\n')
    assert (grown.batch, grown.lr_rule, grown.reserve, grown.most_slots) == ("grow", "sqrt", 0, 3)
    assert not spec.shrink and load(tmp_path, "widths = [1, 2]\nshrink = true\n").shrink


def test_no_elastic_table_means_none(tmp_path: Path) -> None:
    assert load_spec(write_spec(tmp_path / "spec.toml", BASE), check_trainer=False).elastic is None


@pytest.mark.parametrize(
    ("body", "key", "fragment"),
    [
        ("grow = 'goodput'\n", "elastic.widths", "is required"),
        ("widths = [2]\n", "elastic.widths", "at least two widths"),
        ("widths = [1, 4, 2]\n", "elastic.widths", "strictly increasing"),
        ("widths = [0, 1]\n", "elastic.widths", "integer >= 1"),
        ("widths = [1, 2]\ngrow = 'always'\n", "elastic.grow", "'always' is not one of promotion, pbt, goodput"),
        ("widths = [1, 2]\ngrow = 'pbt'\n", "elastic.grow", "scheduler = 'pbt'"),
        ("widths = [1, 2]\ngrow = 'pbt'\n", "elastic.grow", "needs [study] scheduler = 'pbt'"),
        ("widths = [1, 2]\nbatch = 'double'\n", "elastic.batch", "not one of fixed, grow"),
        ("widths = [1, 2]\nlr_rule = 'linear'\n", "elastic.lr_rule", "only with batch = 'grow'"),
        ("widths = [1, 2]\nbatch = 'grow'\nlr_rule = 'cube'\n", "elastic.lr_rule", "not one of linear, sqrt"),
        ("widths = [1, 2]\nbatch = 'grow'\nlr_rule = 'adascale'\n", "elastic.lr_rule", "noise_scale_every"),
        ("widths = [1, 2]\nreserve = -1\n", "elastic.reserve", "must be >= 0"),
        ("widths = [1, 2, 4]\nmax_slots = 2\n", "elastic.max_slots", ">= the largest width (4)"),
        ("widths = [1, 2, 3]\n", "elastic.widths", "global batch 64 is not divisible by width 3"),
        ("widths = [1, 2]\nspeed = 1\n", "elastic.speed", "unknown key"),
        ("widths = [1, 2]\nshrink = 'yes'\n", "elastic.shrink", "'yes'"),
        ("widths = [1, 2]\nmin_gain = 2\n", "elastic.min_gain", "between -1 and 1"),
        ("widths = [1, 2]\nmin_gain = 'some'\n", "elastic.min_gain", "finite number"),
    ],
)
def test_elastic_mistakes_name_the_key_and_the_rule(tmp_path: Path, body: str, key: str, fragment: str) -> None:
    with pytest.raises(SpecError) as caught:
        load(tmp_path, body)
    assert key in str(caught.value) and fragment in str(caught.value), str(caught.value)
    assert "\n" not in str(caught.value)


def test_elastic_cross_checks_with_the_rest_of_the_spec(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="study.pruner|elastic.grow.*'promotion' needs"):
        load(tmp_path, "widths = [1, 2]\n", BASE.replace('pruner = "asha"', 'pruner = "median"'))
    with pytest.raises(SpecError, match="space.data_parallel.*remove it"):
        load(tmp_path, "widths = [1, 2]\n", BASE + "data_parallel = { type = 'categorical', choices = [1, 2] }\n")
    with pytest.raises(SpecError, match="trainer.data_parallel.*widths\\[0\\] = 2"):
        load(tmp_path, "widths = [2, 4]\n", BASE.replace("epochs = 4", "epochs = 4\ndata_parallel = 4"))
    with pytest.raises(SpecError, match="trainer.data_parallel.*widths\\[0\\] = 2"):
        load(tmp_path, "widths = [2, 4]\n")  # the default 1 is not where it starts
    assert load(tmp_path, "widths = [2, 4]\n", BASE.replace("epochs = 4", "epochs = 4\ndata_parallel = 2"))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"widths": (1,)}, "widths=\\[1\\]: need at least two"),
        ({"widths": (1, 2), "lr_rule": "sqrt"}, "lr_rule='sqrt': the global batch is fixed"),
        ({"widths": (1, 2), "batch": "grow"}, "lr_rule=None: must be one of"),
        ({"widths": (1, 2), "grow": "pbt", "batch": "grow", "lr_rule": "sqrt"}, "batch='grow': must be 'fixed' with"),
    ],
)
def test_the_dataclass_checks_itself_at_construction(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ElasticSpec(**kwargs)  # type: ignore[arg-type]


PBT = BASE.replace('pruner = "asha"', 'pruner = "none"\nscheduler = "pbt"')
PBT += 'lr = { type = "float", low = 1e-3, high = 1e-1, log = true }\n\n[pbt]\ninterval = 2\n'


def test_growing_pbt_survivors_needs_the_pbt_scheduler_and_a_fixed_global_batch(tmp_path: Path) -> None:
    spec = load(tmp_path, "widths = [1, 2]\ngrow = 'pbt'\n", PBT)
    assert spec is not None and (spec.grow, spec.batch, spec.lr_rule) == ("pbt", "fixed", None)
    with pytest.raises(SpecError) as caught:
        load(tmp_path, "widths = [1, 2]\ngrow = 'pbt'\nbatch = 'grow'\n", PBT)
    message = str(caught.value)
    assert "elastic.batch: must be 'fixed' with grow = 'pbt'" in message and "\n" not in message, message
