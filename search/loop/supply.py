"""Where the campaign's trials come from: trials a dead controller left running first, then new
ones from the sampler, through an :class:`~search.sampling.asker.Asker` (on the loop, on a
thread, or in a child process; see :func:`sampling_mode`).

Each trial is configured here (its :class:`~trainers.api.TrialConfig`); one whose
parameters cannot run is told FAIL at once, without a slot. Asked trials wait in
``pending`` until the dispatcher has slots for them; the budget counts them as spent.

No trial is sampled twice from one random stream. Trials are asked ahead of need, so a
saved sampler state is always behind what reached the storage: restoring it would replay
parameter sets already run. Instead every sampler the campaign builds gets its own seed,
:func:`sampler_seed` of the study seed, the number of trials in the storage when it is
built, and how many samplers this controller built before (:func:`campaign_sampler`). A
sampler whose trials reached the storage leaves that number higher for any sampler built
after it, so two samplers that both put trials in the storage never share a seed: after
``resume``, after a sampler child that died and was replaced, after both. Besides their
random generator, the registry's samplers keep nothing outside the storage that sampling
needs (TPE, CMA-ES, QMC, NSGA-II, grid and evolution read the trials; GP's kernel cache
only speeds it up), so a new sampler loses nothing else.

A sampler child process that dies (OOM killer, a signal) does not end the campaign: the
trials it had sent and not handed out are dropped (they exist in its replica only), and
a new child starts with a fresh sampler (:data:`MAX_CHILD_RESTARTS` times), then the
sampler moves to a thread.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

import optuna
from optuna.trial import FrozenTrial

from cluster.executor import TrialExecutor
from spaces.errors import SpaceError
from trainers.api import TrialConfig

from search.loop.ledger import Ledger
from search.pbt.population import Population
from search.loop.pipeline import SLOW_ASK_SECONDS
from search.sampling.asker import Asker, AskTimes, BackgroundAsker, InlineAsker
from search.sampling.process import NotPortable, ProcessAsker, SamplerDied
from search.scaling.sweep import scaling_sampler
from search.sampling.seeds import component_seed, trial_seed
from search.sampling.samplers import make_sampler, runs_in_process, sampling_problem
from search.spec.campaign_spec import DATA_PARALLEL, CampaignSpec
from search.store.folder import CampaignFolder
from search.store.trial_params import read_params, restore_params, set_aside_stale_folder, write_params
from search.loop.trials import Prepared

__all__ = [
    "TrialSupply", "sampling_mode", "sampler_seed", "campaign_sampler", "MAX_CHILD_RESTARTS",
]  # fmt: skip

log = logging.getLogger(__name__)

MAX_CHILD_RESTARTS = 2  # sampler child processes started again after one died; then a thread samples


def sampler_seed(study_seed: int, trials: int, restart: int = 0) -> int:
    """The seed of a sampler built with ``trials`` trials in the storage, after ``restart`` others in this
    controller; a new campaign's first sampler (0, 0) gets the study seed itself."""
    if trials == 0 and restart == 0:
        return int(study_seed)
    return component_seed(study_seed, f"sampler-{int(trials)}-{int(restart)}")


def campaign_sampler(spec: CampaignSpec, trials: int = 0, restart: int = 0) -> optuna.samplers.BaseSampler:
    """The spec's sampler, seeded with :func:`sampler_seed` (a scaling sweep's: one per batch size)."""
    seed = sampler_seed(spec.study.seed, trials, restart)
    if spec.scaling is None:
        return make_sampler(spec.study.sampler, spec.space, seed, spec.sampler_options, budget=spec.study.n_trials)
    return scaling_sampler(spec.scaling.batch_sizes, seed,
                           lambda s: make_sampler(spec.study.sampler, spec.space, s, spec.sampler_options))  # fmt: skip


def sampling_mode(requested: str, sampler: str, ordered: bool) -> str:
    """Where the sampler runs: ``inline`` when the order of asks matters (deterministic, PBT, virtual
    time); otherwise, on ``auto``, in a child ``process`` for the samplers that allow it, else on a ``thread``.
    """
    problem = sampling_problem(requested, sampler, ordered)
    if problem:
        raise ValueError(f"sampling: {problem}")
    if ordered:
        return "inline"
    if requested == "auto":
        return "process" if runs_in_process(sampler) else "thread"
    return requested


class TrialSupply:
    """Resumed trials, then sampled ones; ``budget_left()``: trials the campaign may still ask."""

    def __init__(
        self,
        spec: CampaignSpec,
        folder: CampaignFolder,
        study: optuna.Study,
        executor: TrialExecutor,
        ledger: Ledger,
        budget_left: Callable[[], int],
        population: Population | None,
        sampling: str | None = None,
    ) -> None:
        self._spec = spec
        self._folder = folder
        self._study = study
        self._executor = executor
        self._ledger = ledger
        self._budget_left = budget_left
        self._population = population
        self._sampling_asked = sampling or spec.study.sampling
        ordered = spec.study.deterministic or population is not None or executor.virtual_time
        self.sampling = sampling_mode(self._sampling_asked, spec.study.sampler, ordered)
        self._asker: Asker[Prepared] = InlineAsker(self._ask_inline, ledger.may_ask)
        self._resumable: deque[FrozenTrial] = deque()
        self.pending: deque[Prepared] = deque()  # asked, not yet launched (they go first)
        self._restarts = 0  # samplers built by this controller after the first (a dead child replaced)

    # --- start and stop -----------------------------------------------------------------------------

    def start(self, resumable: list[FrozenTrial]) -> None:
        """Trials to run again first; then the sampler, on a thread or in a child process if the mode says so."""
        self._resumable.extend(resumable)
        if self.sampling == "inline":
            return
        if self.sampling == "process":
            try:
                self._asker = self._process_asker()
                return
            except NotPortable as exc:
                if self._sampling_asked == "process":
                    raise ValueError(f"sampling='process': {exc}") from exc
                log.warning("sampling on a thread instead of a child process: %s", exc)
                self.sampling = "thread"
        self._asker = self._thread_asker()

    def _process_asker(self) -> ProcessAsker[Prepared]:
        space = self._spec.space
        suggest = space.suggest if space.conditional else None  # the child suggests the conditional parameters
        return ProcessAsker(self._study, space.base_distributions(), self._produce, self._executor.wake,
                            f"sampler-{self._spec.study.name}", suggest)  # fmt: skip

    def _thread_asker(self) -> BackgroundAsker[Prepared]:
        return BackgroundAsker(self._produce, self._executor.wake, f"sampler-{self._spec.study.name}")

    def _replace_dead_child(self, died: SamplerDied) -> None:
        """A new sampler child (a fresh sampler, seeded anew), or a thread once it died too often."""
        self._asker.close(timeout=5.0)  # the trials it had sent and not handed out die with its replica
        self._restarts += 1
        trials = len(self._study.get_trials(deepcopy=False))
        self._study.sampler = campaign_sampler(self._spec, trials, self._restarts)
        if self._restarts <= MAX_CHILD_RESTARTS:
            log.warning("%s; starting a new one with a fresh sampler (%d of %d), the campaign goes on",
                        died, self._restarts, MAX_CHILD_RESTARTS)  # fmt: skip
            try:
                self._asker = self._process_asker()
                return
            except NotPortable as exc:
                log.warning("the sampler process could not start again: %s", exc)
        else:
            log.warning("%s; %d restarts already: sampling on a thread from now on", died, MAX_CHILD_RESTARTS)
        self.sampling = "thread"
        self._asker = self._thread_asker()

    def close(self) -> None:
        """Stop sampling; trials asked and not taken join the pending ones."""
        self.pending.extend(self._asker.close())

    def release_unstarted(self) -> None:
        """Trials asked but never launched (the time budget ran out first) end PRUNED; none stays RUNNING."""
        while self.pending:
            prepared = self.pending.popleft()
            if prepared.invalid:
                self._ledger.reject(prepared.trial, prepared.invalid)
            else:
                self._ledger.never_started(prepared.trial)

    # --- how many ---------------------------------------------------------------------------------------

    def in_hand(self) -> int:
        """Trials asked (or to be run again) and not yet launched: the budget counts them as spent."""
        return self._asker.in_hand() + len(self._resumable) + len(self.pending)

    def more_coming(self, time_left: bool) -> bool:
        """Whether a background sampler still owes trials (nothing runs while it samples the first ones)."""
        if not self._asker.background or not time_left:
            return False
        return self._asker.in_hand() > 0 or self._budget_left() > 0

    @property
    def times(self) -> AskTimes:
        """How long the sampler's asks took (where it ran)."""
        return self._asker.times

    def ask_seconds(self) -> float:
        return self._asker.times.ask_seconds

    def want(self, free_tasks: int, batch: int, spare: int, slot_free: bool, time_left: bool) -> None:
        """Tell a background sampler how many trials to have ready: what is free plus spares, within budget.

        A fast sampler that the loop may ask itself gets 0: it is asked on the loop's thread, when needed.
        """
        wanted = 0
        if time_left and (self._sampler_is_slow() or not self._asker.asks_here):
            wanted = max(0, batch * free_tasks + spare - len(self.pending))
            wanted = min(wanted, self._asker.in_hand() + self._budget_left())
        starved = not self.pending and slot_free and self._asker.asks_here  # a slot waits for a trial
        self._asker.want(wanted, wake_at=1 if starved else batch)

    # --- the next trials --------------------------------------------------------------------------------

    def next_group(self, batch: int) -> list[Prepared]:
        """Up to ``batch`` prepared trials of one width, the pending ones first."""
        while len(self.pending) < batch and (item := self._fetch()) is not None:
            self.pending.append(item)
        group: list[Prepared] = []
        while self.pending and len(group) < batch and (not group or self.pending[0].width == group[0].width):
            group.append(self.pending.popleft())
        return group

    def put_back(self, group: list[Prepared]) -> None:
        """Asked trials that could not launch yet: they go first when slots free up."""
        self.pending.extendleft(reversed(group))

    def batch_on_its_way(self, group: list[Prepared], batch: int) -> bool:
        """A child process sends trials one at a time: wait for the batch it owes rather than launch each.

        A batch is at most ``TASK_SECONDS`` of asks, so a slot waits no longer than that;
        launching a task per trial would cost the controller, scheduler and workers the
        CPU the sampler needs.
        """
        return not self._asker.asks_here and len(group) < batch and self._asker.in_hand() > 0

    def _fetch(self) -> Prepared | None:
        """The next trial to launch: one to run again, else one asked (ahead, or now); invalid ones are told FAIL."""
        while True:
            if self._resumable:
                frozen = self._resumable.popleft()
                log.info("trial %d was left running; starting it again", frozen.number)
                item = self._configure(self._reopen(frozen), self._ledger.finished)
            else:
                item = self._take() or self._ask_here()
            if item is None or not item.invalid:
                return item
            self._ledger.reject(item.trial, item.invalid)  # e.g. a genome over the parameter limit

    def _reopen(self, frozen: FrozenTrial) -> optuna.Trial:
        """A trial left running, to run again. Parameters a torn journal cut from its record are taken back from
        its folder (``trials/<n>/params.json``: its checkpoint was made with them); any still missing (it never
        reached its folder) are sampled now by a seeded random sampler, never the campaign's (a sampler child
        only hands out what it sampled itself)."""
        restored = restore_params(self._study, frozen, self._spec.space.distributions(),
                                  read_params(self._folder, frozen.number))  # fmt: skip
        completer = optuna.load_study(study_name=self._study.study_name, storage=self._study._storage,
                                      sampler=optuna.samplers.RandomSampler(self._cut_seed(frozen.number)))  # fmt: skip
        sampled = self._spec.space.suggest_missing(optuna.Trial(completer, frozen._trial_id))
        if restored or sampled:
            how = [f"{', '.join(restored)} restored from its folder"] if restored else []
            how += [f"{', '.join(sampled)} sampled now"] if sampled else []
            log.warning("trial %d's record was cut short: %s", frozen.number, "; ".join(how))
        return optuna.Trial(self._study, frozen._trial_id)

    def _cut_seed(self, number: int) -> int:
        return component_seed(self._spec.study.seed, f"cut-{number}")

    def _take(self) -> Prepared | None:
        """A trial the asker has ready; a sampler child that died is replaced first (None this turn)."""
        try:
            return self._asker.take()
        except SamplerDied as died:
            self._replace_dead_child(died)
            return None

    def _ask_here(self) -> Prepared | None:
        """A fast sampler is asked on this thread (cheaper than a hand-over); a slow one only on its own."""
        if self._budget_left() <= 0 or self._sampler_is_slow():
            return None
        return self._asker.ask_here()

    def _sampler_is_slow(self) -> bool:
        times = self._asker.times
        return self._asker.background and times.asked > 0 and times.ask_seconds >= SLOW_ASK_SECONDS

    def _ask_inline(self) -> Prepared:
        saw = self._ledger.finished  # before ``asked`` tells the trials this ask makes tellable (deterministic)
        trial = self._ask()
        self._ledger.asked(trial.number)
        return self._configure(trial, saw)

    def _produce(self, saw: int | None = None) -> Prepared:
        """A background asker's job: one new trial with its config; ``saw``: finished trials the sampler knew."""
        saw = self._ledger.finished if saw is None else saw
        return self._configure(self._ask(), saw)

    def _ask(self) -> optuna.Trial:
        """A new trial: every unconditional parameter as fixed distributions, then (define-by-run) each
        conditional parameter whose condition holds (from the child's values when a child samples). A folder
        its number already has belongs to a trial the storage lost: it is moved aside."""
        space = self._spec.space
        trial = self._study.ask(fixed_distributions=space.base_distributions())
        space.suggest(trial)
        set_aside_stale_folder(self._folder, trial.number)
        return trial

    def _configure(self, trial: optuna.Trial, saw: int) -> Prepared:
        try:
            config = self._trial_config(trial)
        except (SpaceError, ValueError, TypeError) as exc:  # e.g. a genome over the parameter limit
            return Prepared(trial, None, 1, saw, invalid=f"invalid parameters: {exc}")
        write_params(self._folder, trial.number, trial.params)  # before it runs: resume's copy of its record
        return Prepared(trial, config, config.data_parallel, saw)

    def _trial_config(self, trial: optuna.Trial) -> TrialConfig:
        spec, trainer = self._spec, self._spec.trainer
        params = spec.space.complete(trial.params)
        data_parallel = int(params.pop(DATA_PARALLEL, trainer.data_parallel))
        config = TrialConfig(
            study=spec.study.name,
            number=trial.number,
            params=params,
            seed=trial_seed(spec.study.seed, trial.number),
            epochs=trainer.epochs,
            dataset=trainer.dataset,
            device=trainer.device,
            data_parallel=data_parallel,
            checkpoint_dir=str(self._folder.trial(trial.number)),
            log_dir=str(self._folder.trial(trial.number)),  # the trainer's output: trials/<n>/stdout.log
            checkpoint_every=trainer.checkpoint_every,
            deterministic=spec.study.deterministic,
            options=dict(trainer.options),
        )
        return self._population.first_segment(config) if self._population else config
