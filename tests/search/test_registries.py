"""One registry per extension point: each name written once, read by spec validation, its messages and the docs."""

from __future__ import annotations

import tomllib

import pytest
from toy_specs import toy_toml

from cluster.backends import REGISTRY as BACKEND_CLASSES
from search.loop import policies
from search.reports.report import SECTION_IDS, SECTION_REGISTRY, build_sections
from search.sampling.pruning import PRUNER_REGISTRY, PRUNERS, pruner_info
from search.sampling.samplers import SAMPLER_REGISTRY, SAMPLERS, SamplerInfo, sampler_info
from search.spec.campaign_spec import SpecError, parse_spec
from search.spec.cluster import BACKENDS
from search.spec.schedulers import POLICY_REGISTRY, SCHEDULERS
from search.vocab.registry import Registry, UnknownName, backends
from spaces.errors import InputError

ALL = {
    "sampler": SAMPLER_REGISTRY,
    "pruner": PRUNER_REGISTRY,
    "scheduler": POLICY_REGISTRY,
    "backend": backends(),
    "report section": SECTION_REGISTRY,
}

SPEC = toy_toml(name="reg", sampler="SAMPLER")  # SAMPLER: each test puts the name it checks there


def parse(text: str):  # noqa: ANN201
    return parse_spec(tomllib.loads(text), "reg.toml", check_trainer=False)


@pytest.mark.parametrize("kind", sorted(ALL))
def test_every_registry_has_names_entries_and_one_line_each(kind: str) -> None:
    registry = ALL[kind]
    assert registry.kind == kind and registry.names() and len(set(registry.names())) == len(registry.names())
    for entry in registry.entries():
        assert registry.get(entry.name) is entry.value
        line = registry.description(entry.name)
        assert line.strip() and "\n" not in line and "{" not in line, (kind, entry.name, line)


def test_the_names_the_spec_accepts_are_the_registries() -> None:
    assert (
        SAMPLERS
        == SAMPLER_REGISTRY.names()
        == (
            "tpe",
            "random",
            "cmaes",
            "gp",
            "qmc",
            "grid",
            "nsga2",
            "evolution",
            "cost_tpe",
        )
    )
    assert PRUNERS == PRUNER_REGISTRY.names() == ("none", "median", "percentile", "asha", "hyperband")
    assert SCHEDULERS == POLICY_REGISTRY.names() == ("none", "pbt")
    assert (
        BACKENDS == backends().names() == tuple(BACKEND_CLASSES) == ("local", "address", "slurm", "pbs", "kubernetes")
    )
    assert SECTION_IDS == SECTION_REGISTRY.names()
    assert backends().description("pbs").startswith("workers as pbs batch jobs")


def test_an_unknown_name_lists_the_registered_ones_as_before() -> None:
    with pytest.raises(
        UnknownName, match=r"^sampler 'tpee' is not one of tpe, random, .*, evolution, cost_tpe, nor a "
    ):
        sampler_info("tpee")
    with pytest.raises(InputError, match=r"^pruner 'ashaa' is not one of none, median, percentile, asha, hyperband"):
        pruner_info("ashaa")
    with pytest.raises(InputError, match=r"^backend='nope': must be one of local, address, slurm, pbs, kubernetes$"):
        backends().get("nope")
    with pytest.raises(SpecError, match="study.sampler: 'tpee' is not one of tpe, random"):
        parse(SPEC.replace("SAMPLER", "tpee"))


def test_spec_validation_reads_the_registry_when_it_checks(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sampler added to the registry is a name the spec accepts, with no other list to edit."""
    fresh: Registry[SamplerInfo] = Registry("sampler")
    for entry in SAMPLER_REGISTRY.entries():
        fresh.add(entry.name, entry.value, entry.description)
    rs = SamplerInfo("rs", SAMPLER_REGISTRY.get("random").build, description="random, by another name")
    fresh.add("rs", rs, rs.description)
    with pytest.raises(SpecError):
        parse(SPEC.replace("SAMPLER", "rs"))
    monkeypatch.setattr("search.sampling.samplers.SAMPLER_REGISTRY", fresh)
    monkeypatch.setattr("search.spec.campaign_spec.SAMPLER_REGISTRY", fresh)
    assert parse(SPEC.replace("SAMPLER", "rs")).study.sampler == "rs"


def test_a_registry_refuses_a_name_twice_and_a_description_that_is_not_one_line() -> None:
    registry: Registry[int] = Registry("thing")
    registry.add("a", 1, "the first")
    with pytest.raises(ValueError, match="thing 'a' is registered already"):
        registry.add("a", 2, "again")
    with pytest.raises(ValueError, match="one non-empty line"):
        registry.add("b", 2, "two\nlines")
    with pytest.raises(UnknownName, match="^thing 'c' is not one of a$"):
        registry.get("c")
    assert list(registry) == ["a"] and "a" in registry and registry["a"] == 1 and len(registry) == 1


def test_each_report_section_gets_the_id_it_is_registered_with_and_no_other(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """An id is written once, in the registry: the builders name none, and a builder registered under a new name
    renders under that name."""
    import optuna

    from search.reports.data import CampaignData
    from search.reports.markup import Section
    from search.store.folder import CampaignFolder

    text = SPEC.replace("SAMPLER", "random")
    folder = CampaignFolder(tmp_path / "reg")
    folder.create(text)
    data = CampaignData(folder, parse(text), optuna.create_study(direction="maximize"), (), None, None)
    assert [section.id for section in build_sections(data)] == list(SECTION_REGISTRY.names())
    assert {section.id for _, build in SECTION_REGISTRY.items() if (section := build(data))} == {""}
    import search.reports.report as report

    extra: Registry = Registry("report section")
    extra.add("extra", lambda _data: Section("Extra", "<p>x</p>", "x"), "a user's section")
    monkeypatch.setattr(report, "SECTION_REGISTRY", extra)
    assert [section.id for section in report.build_sections(data)] == ["extra"]


def test_the_policy_seam_still_knows_target_reached() -> None:
    assert policies.TARGET_REACHED == "target reached"
