"""New trials for the campaign: asked from the study, their parameters suggested, their config made.

What an :class:`~search.sampling.asker.Asker` calls to get a trial, on the loop's thread, on its
own thread, or (for a sampler child) with the parameters the child sampled. The
:class:`~search.loop.supply.TrialSupply` decides when and how many; this only makes them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, Protocol

import optuna

from search.loop.segments import Segment, current_segment, resume_epoch, segment_configs
from search.loop.trials import Prepared
from search.pbt.population import Population
from search.sampling.presample import ask_fixed
from search.sampling.seeds import trial_seed
from search.spec.campaign_spec import DATA_PARALLEL, StudySpec, TrainerSpec
from search.store.folder import CampaignFolder
from search.store.records import Attr, read_metrics_lines
from search.store.trial_params import ParamsLog, set_aside_stale_folders
from spaces.errors import SpaceError
from spaces.params import SearchSpace
from trainers.api import TrialConfig

__all__ = ["AskOrder", "TrialMaker"]


class AskOrder(Protocol):
    """What asking needs of the ledger (:class:`~search.loop.ledger.Ledger`): how many trials are told, and in
    a deterministic campaign the order of asks. Nothing here tells a trial: the campaign alone does."""

    @property
    def finished(self) -> int: ...

    def asked(self, number: int) -> None: ...

    def may_ask(self) -> bool: ...


class TrialMaker:
    """Asks the study for a trial and configures it (:class:`~search.loop.trials.Prepared`)."""

    def __init__(
        self,
        spec: StudySpec,
        trainer: TrainerSpec,
        space: SearchSpace,
        folder: CampaignFolder,
        study: optuna.Study,
        order: AskOrder,
        population: Population | None,
    ) -> None:
        self._spec = spec
        self._trainer = trainer
        self._space = space
        self._folder = folder
        self._study = study
        self._order = order
        self._population = population
        self._params = ParamsLog(folder)  # each new trial's parameters, written before the journal's record

    def start(self, first_new: int) -> None:
        """Before the first ask: folders numbered from ``first_new`` (the storage's trial count) on that hold
        files belong to trials the storage lost; they are moved aside, and the new trials get fresh ones."""
        set_aside_stale_folders(self._folder, first_new)

    def flush_params(self) -> None:
        """Write the parameters of every trial configured since the last call, with one append: called before the
        journal's group commit records them, and so before the campaign handles any event of theirs (see
        :mod:`search.store.trial_params`). Raises what the write raised (a full disk)."""
        self._params.flush()

    def close(self) -> None:
        """Write the parameters still kept, then close the log."""
        self._params.close()

    def ask_inline(self) -> Prepared:
        """One new trial, asked on the loop's thread, its ask recorded with the ledger (deterministic order)."""
        saw = self._order.finished  # before ``asked`` tells the trials this ask makes tellable (deterministic)
        trial = self._ask()
        self._order.asked(trial.number)
        return self.configure(trial, saw, fresh=True)

    def produce(self, saw: int | None = None) -> Prepared:
        """A background asker's job: one new trial with its config; ``saw``: finished trials the sampler knew."""
        saw = self._order.finished if saw is None else saw
        return self.configure(self._ask(), saw, fresh=True)

    def _ask(self) -> optuna.Trial:
        """A new trial: every unconditional parameter as fixed distributions, then (define-by-run) each
        conditional parameter whose condition holds (from the child's values when a child samples)."""
        space = self._space
        trial = ask_fixed(self._study, space.base_distributions())
        space.suggest(trial)
        return trial

    def configure(self, trial: optuna.Trial, saw: int, fresh: bool = False) -> Prepared:
        """``trial`` with its config; one whose parameters cannot run is marked ``invalid`` (told FAIL at once).
        ``fresh``: asked just now, into a new folder (a resumed trial is not). Its parameters (resume's copy of its
        record) go to the parameters log with the next :meth:`flush_params`."""
        params = trial.params  # a copy (Optuna's), this trial's own
        segments = () if fresh else _recorded_segments(trial)
        try:
            config = self._trial_config(trial, params)
        except (SpaceError, ValueError, TypeError) as exc:  # e.g. a genome over the parameter limit
            return Prepared(trial, None, 1, saw, invalid=f"invalid parameters: {exc}")
        if len(segments) > 1 and self._population is None:  # resumed in a later segment (a resize): that one's config
            config = segment_configs(config, segments)[-1]
        elif segments and self._population is not None:  # a PBT member: its parameters the journal's, its width its own
            config = dataclasses.replace(config, data_parallel=segments[-1].width)
        self._params.put(trial.number, params)
        start = 0 if fresh else self._resumes_at(trial.number, config, segments)
        return Prepared(trial, config, config.data_parallel, saw, fresh=fresh, segments=segments, start_epoch=start)

    def _resumes_at(self, number: int, config: TrialConfig, segments: tuple[Segment, ...]) -> int:
        """The epoch a resumed trial's run resumes at (:func:`~search.loop.segments.resume_epoch`): its segment's
        start, or the last checkpointed epoch its earlier reports (``metrics.jsonl``) show; the time budget's
        placement predicts only the rest."""
        history = [(step, metrics) for step, metrics, _at in read_metrics_lines(self._folder.trial_metrics(number))]
        return resume_epoch(current_segment(segments, config, config.data_parallel), config, history)

    def _trial_config(self, trial: optuna.Trial, searched: Mapping[str, Any]) -> TrialConfig:
        if preset := trial.user_attrs.get(Attr.PRESET):
            return _preset_config(preset, trial.number, str(self._folder.trial(trial.number)))
        spec, trainer = self._spec, self._trainer
        params = dict(searched) if trainer.objective else self._space.complete(searched)  # objective: as suggested
        data_parallel = int(params.pop(DATA_PARALLEL, trainer.data_parallel))
        folder = str(self._folder.trial(trial.number))
        config = TrialConfig(
            study=spec.name,
            number=trial.number,
            params=params,
            seed=trial_seed(spec.seed, trial.number),
            epochs=trainer.epochs,
            dataset=trainer.dataset,
            device=trainer.device,
            data_parallel=data_parallel,
            checkpoint_dir=folder,
            log_dir=folder,  # the trainer's output: trials/<n>/stdout.log
            checkpoint_every=trainer.checkpoint_every,
            deterministic=spec.deterministic,
            options=dict(trainer.options),
            oom_retry=trainer.oom_retry,
        )
        return self._population.first_segment(config) if self._population else config


def _preset_config(preset: Mapping[str, Any], number: int, folder: str) -> TrialConfig:
    """The config an enqueued trial carries (a branching study's run: its epochs, checkpoint folder and seed are
    its own), as this trial: its number, its output in its own trial folder."""
    return dataclasses.replace(TrialConfig.from_dict(preset), number=number, log_dir=folder)


def _recorded_segments(trial: optuna.Trial) -> tuple[Segment, ...]:
    """The segments a trial left running had begun (and their runs), as its record holds them."""
    return tuple(Segment.from_record(r) for r in trial.user_attrs.get(Attr.SEGMENTS) or ())
