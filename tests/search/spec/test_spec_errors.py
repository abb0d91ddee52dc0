"""Every spec mistake is one line naming the file, the key and the rule; exit 2; nothing on disk."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from search.spec.campaign_spec import SpecError, load_spec
from tests.spec_files import write_spec

GOOD = """
[study]
name = "toy"
direction = "maximize"
metric = "score"
sampler = "random"
seed = 1
n_trials = 3

[trainer]
entry = "toy_trainers:fit"
epochs = 2

[space]
quality = { type = "float", low = 0.0, high = 1.0 }
"""


def spec_with(tmp_path: Path, old: str, new: str) -> Path:
    assert old in GOOD, old
    return write_spec(tmp_path / "spec.toml", GOOD.replace(old, new))


def test_good_spec_loads(tmp_path: Path) -> None:
    spec = load_spec(write_spec(tmp_path / "spec.toml", GOOD))
    assert spec.study.name == "toy" and spec.study.directions == ("maximize",)
    assert spec.space.names == ("quality",)
    assert len(spec.sha256) == 64


@pytest.mark.parametrize(
    ("old", "new", "key", "fragment"),
    [
        ('sampler = "random"', 'sampeler = "random"', "study.sampeler", "did you mean 'sampler'"),
        ('sampler = "random"', 'sampler = "tpee"', "study.sampler", "did you mean 'tpe'"),
        ("seed = 1", 'seed = "one"', "study.seed", "must be an integer"),
        ("n_trials = 3", "n_trials = 0", "study.n_trials", "must be >= 1"),
        ("low = 0.0, high = 1.0", "low = 2.0, high = 1.0", "space.quality.low", "high"),
        ('entry = "toy_trainers:fit"', 'entry = "no_such_module:fit"', "trainer.entry", "cannot import"),
        ('entry = "toy_trainers:fit"', 'entry = "toy_trainers:nothing"', "trainer.entry", "no attribute"),
        ('entry = "toy_trainers:fit"', 'entry = "toy_trainers"', "trainer.entry", "module:function"),
        ('metric = "score"', 'metric = "accuracy"', "study.metric", "never reports"),
        ('name = "toy"', 'name = "../escape"', "study.name", "letters, digits"),
        ('direction = "maximize"', 'direction = "maximise"', "study.direction", "did you mean 'maximize'"),
        ("epochs = 2", "epochs = 2\nepoks = 3", "trainer.epoks", "did you mean 'epochs'"),
        ("quality = {", "qualty = {", "space.qualty", "does not accept"),
    ],
)
def test_spec_error_names_key_and_rule(tmp_path: Path, old: str, new: str, key: str, fragment: str) -> None:
    path = spec_with(tmp_path, old, new)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    message = str(info.value)
    assert info.value.key == key, message
    assert message.startswith(f"{path}: {key}: "), message
    assert fragment in message, message
    assert "\n" not in message


def test_unknown_section_and_bad_toml(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"clustr: unknown key \(did you mean 'cluster'"):
        load_spec(write_spec(tmp_path / "a.toml", GOOD + "\n[clustr]\nn_workers = 1\n"))
    with pytest.raises(SpecError, match="not valid TOML"):
        load_spec(write_spec(tmp_path / "b.toml", GOOD + "\n[study\n"))
    with pytest.raises(SpecError, match="cannot read"):
        load_spec(tmp_path / "missing.toml")


def test_metrics_must_match_directions(tmp_path: Path) -> None:
    path = spec_with(tmp_path, 'direction = "maximize"', 'directions = ["maximize", "minimize"]')
    with pytest.raises(SpecError, match="1 metric\\(s\\) for 2 direction\\(s\\)"):
        load_spec(path)


@pytest.mark.slow
def test_cli_exit_2_one_line_and_nothing_created(tmp_path: Path, subprocess_env: dict[str, str]) -> None:
    path = spec_with(tmp_path, "low = 0.0, high = 1.0", "low = 2.0, high = 1.0")
    runs = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "search", "run", str(path), "--runs-dir", str(runs)],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "space.quality.low" in lines[0], proc.stderr
    assert not runs.exists()


@pytest.mark.parametrize(
    ("study", "section", "what"),
    [
        ("", "[scaling]\nbatch_sizes = [8, 16, 32]\ntarget = 0.5\n", "a [scaling] sweep"),
        ('scheduler = "pbt"\n', '[pbt]\ninterval = 1\nhyperparams = ["quality"]\n', "population-based training"),
    ],
)
@pytest.mark.slow
def test_a_warm_start_with_scaling_or_pbt_is_a_spec_error_check_reports(
    tmp_path: Path, subprocess_env: dict[str, str], study: str, section: str, what: str
) -> None:
    body = GOOD.replace("n_trials = 3\n", f'{study}warm_start = "runs/old"\n') + "\n" + section
    path = write_spec(tmp_path / "spec.toml", body)
    with pytest.raises(SpecError) as info:
        load_spec(path, check_trainer=False)
    assert info.value.key == "study.warm_start" and what in str(info.value), str(info.value)
    proc = subprocess.run(
        [sys.executable, "-m", "search", "check", str(path)],
        capture_output=True,
        text=True,
        env=subprocess_env,
        timeout=120,
    )
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"{path}: study.warm_start: {what}" in lines[0], proc.stderr


# --- the trainer is imported only to check the spec against it ------------------------------------------------


def test_a_spec_loads_without_its_trainer_and_check_trainer_checks_it_later(tmp_path: Path) -> None:
    from search.spec.trainer_check import check_trainer

    path = spec_with(tmp_path, 'entry = "toy_trainers:fit"', 'entry = "no_such_module:fit"')
    spec = load_spec(path, check_trainer=False)
    assert spec.trainer.entry == "no_such_module:fit" and spec.study.name == "toy"
    for check in (lambda: check_trainer(spec), lambda: load_spec(path)):
        with pytest.raises(SpecError) as info:
            check()
        assert info.value.key == "trainer.entry" and "cannot import module 'no_such_module'" in str(info.value)


def test_pbt_support_is_a_trainer_check(tmp_path: Path) -> None:
    from search.spec.trainer_check import check_trainer

    body = GOOD.replace("n_trials = 3", 'n_trials = 4\nscheduler = "pbt"')
    body += '\n[pbt]\ninterval = 1\nhyperparams = ["quality"]\n'
    spec = load_spec(write_spec(tmp_path / "pbt.toml", body), check_trainer=False)
    assert spec.pbt is not None and spec.pbt.interval == 1
    with pytest.raises(SpecError, match="does not declare supports_pbt") as info:
        check_trainer(spec)  # toy_trainers:fit declares no PBT support
    assert info.value.key == "study.scheduler"


@pytest.mark.slow
def test_loading_the_example_spec_without_its_trainer_imports_no_torch() -> None:
    code = (
        "import sys\n"
        "from search.spec.campaign_spec import load_spec\n"
        "from search.spec.trainer_check import check_trainer\n"
        "spec = load_spec('examples/digits.toml', check_trainer=False)\n"
        "before = sorted(m for m in ('torch', 'trainers.classifier') if m in sys.modules)\n"
        "check_trainer(spec)\n"
        "print(before, 'trainers.classifier' in sys.modules, 'torch' in sys.modules)\n"
    )
    root = Path(__file__).resolve().parents[3]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=root)
    assert out.returncode == 0, out.stderr
    # nothing before the check; the check imports the trainer's module, which leaves torch to its trials
    assert out.stdout.strip() == "[] True False"


def test_spec_error_is_a_hypersweep_input_error_and_pickles() -> None:
    import pickle

    from spaces.errors import EXIT_INPUT, HypersweepError

    error = SpecError("s.toml", "study.seed", "must be an integer")
    assert isinstance(error, HypersweepError) and isinstance(error, ValueError) and error.exit_code == EXIT_INPUT
    again = pickle.loads(pickle.dumps(error))
    assert (again.source, again.key, again.problem, str(again)) == (error.source, error.key, error.problem, str(error))


@pytest.mark.timeout(120)  # the check was quadratic in the choices: 60,000 of them took hours
def test_a_spec_with_many_choices_is_checked_in_linear_time(tmp_path: Path) -> None:
    choices = ", ".join(f'"c{i}"' for i in range(60_000))
    spec = load_spec(
        write_spec(tmp_path / "spec.toml", GOOD + f'label = {{ type = "categorical", choices = [{choices}] }}\n'),
        check_trainer=False,
    )
    assert len(spec.space["label"].distributions()["label"].choices) == 60_000
    duplicated = GOOD + 'label = { type = "categorical", choices = ["a", 1, "b", 1.0] }\n'
    with pytest.raises(SpecError, match=r"space.label.choices\[3\]: duplicate: 1.0 equals choices\[1\] = 1"):
        load_spec(write_spec(tmp_path / "dup.toml", duplicated), check_trainer=False)
