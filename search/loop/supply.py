"""Where the campaign's trials come from: trials a dead controller left running first, then new
ones from the sampler, through an :class:`~search.sampling.asker.Asker` (on the loop, on a
thread, or in a child process; see :func:`sampling_mode`). A simulated cluster that models the child
a real one would sample in gets the child's code in process, on virtual time
(:class:`~search.sampling.virtual_child.VirtualChildAsker`).

Each trial is configured (its :class:`~trainers.api.TrialConfig`) by a
:class:`~search.loop.trial_maker.TrialMaker`, which the asker calls; one whose parameters
cannot run is handed to the campaign, which tells it FAIL at once, without a slot (the supply tells the ledger
nothing). Asked trials wait in ``pending`` until the campaign moves them to the dispatcher; the budget counts them as
spent (:meth:`TrialSupply.spent`; ``outside``, a count the campaign gives once, says how many it holds elsewhere).

Every sampler the campaign builds is seeded anew (:func:`~search.loop.sampler_factory.campaign_sampler`: why).

A sampler child process that dies (OOM killer, a signal) does not end the campaign: the
trials it had sent and not handed out are dropped (they exist in its replica only), and
a new child starts with a fresh sampler (:data:`MAX_CHILD_RESTARTS` times), then the
sampler moves to a thread.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, cast

import optuna
from optuna.trial import FrozenTrial

from cluster import way_out
from cluster.executor import TrialExecutor
from search.compat import optuna_private as op
from search.loop.budget import Budget
from search.loop.pipeline import SLOW_ASK_SECONDS
from search.loop.sampler_factory import campaign_sampler
from search.loop.trial_maker import AskOrder, TrialMaker
from search.loop.trials import Prepared
from search.pbt.population import Population
from search.sampling.asker import Asker, AskTimes, BackgroundAsker, InlineAsker
from search.sampling.process import NotPortable, ProcessAsker, SamplerDied
from search.sampling.samplers import runs_in_process, sampling_problem
from search.sampling.seeds import component_seed
from search.sampling.virtual_child import SamplerCore, VirtualChildAsker
from search.spec.campaign_spec import CampaignSpec
from search.store.folder import CampaignFolder
from search.store.trial_params import read_params, recorded_params, restore_params
from search.vocab.terms import SamplingMode
from spaces.errors import InputError

__all__ = [
    "TrialSupply",
    "sampling_mode",
    "MAX_CHILD_RESTARTS",
]

log = logging.getLogger(__name__)

MAX_CHILD_RESTARTS = 2  # sampler child processes started again after one died; then a thread samples


def sampling_mode(requested: str, sampler: str, ordered: bool) -> SamplingMode:
    """Where the sampler runs: ``inline`` when the order of asks matters (deterministic, PBT, virtual
    time); otherwise, on ``auto``, in a child ``process`` for the samplers that allow it, else on a ``thread``.
    """
    problem = sampling_problem(requested, sampler, ordered)
    if problem:
        raise InputError(f"sampling: {problem}")
    if ordered:
        return SamplingMode.INLINE
    if requested == SamplingMode.AUTO:
        return SamplingMode.PROCESS if runs_in_process(sampler) else SamplingMode.THREAD
    return SamplingMode(requested)


class TrialSupply:
    """Resumed trials, then sampled ones, as many as the :class:`~search.loop.budget.Budget` allows."""

    def __init__(
        self,
        spec: CampaignSpec,
        folder: CampaignFolder,
        study: optuna.Study,
        executor: TrialExecutor,
        order: AskOrder,
        budget: Budget,
        population: Population | None,
        outside: Callable[[], int],
        sampling: str | None = None,
    ) -> None:
        """``order``: the ledger's count of told trials and (deterministic) order of asks; ``outside``: the trials
        of the budget the campaign holds elsewhere (told, waiting to be told, launched)."""
        self._spec = spec
        self._folder = folder
        self._study = study
        self._executor = executor
        self._order = order
        self._budget = budget
        self._outside = outside
        self._sampling_asked = sampling or spec.study.sampling
        ordered = spec.study.deterministic or population is not None or executor.virtual_time
        self.sampling = sampling_mode(self._sampling_asked, spec.study.sampler, ordered)
        self._models_child = (  # a simulated cluster models the child a real one would sample in
            getattr(executor, "models_sampler_process", False)
            and not spec.study.deterministic
            and population is None
            and sampling_mode(self._sampling_asked, spec.study.sampler, False) == SamplingMode.PROCESS
        )
        self._maker = TrialMaker(
            spec.study, spec.trainer, spec.space, folder, study, order, population
        )  # what the askers call, on any thread
        self._asker: Asker[Prepared] = InlineAsker(self._maker.ask_inline, order.may_ask)
        self._resumable: deque[FrozenTrial] = deque()
        self.pending: deque[Prepared] = deque()  # asked, not yet launched (they go first)
        self._restarts = 0  # samplers built by this controller after the first (a dead child replaced)
        self._recorded: dict[int, dict[str, Any]] | None = None  # the parameters log, once a resume needs it

    # --- start and stop -----------------------------------------------------------------------------

    def start(self, resumable: list[FrozenTrial]) -> None:
        """Trials to run again first; then the sampler, on a thread or in a child process if the mode says so."""
        self._resumable.extend(resumable)
        self._maker.start(len(self._study.get_trials(deepcopy=False)))
        if self._models_child:
            self._asker = self._virtual_child()
            self.sampling = SamplingMode.PROCESS
            return
        if self.sampling == SamplingMode.INLINE:
            return
        if self.sampling == SamplingMode.PROCESS:
            try:
                self._asker = self._process_asker()
                return
            except NotPortable as exc:
                if self._sampling_asked == SamplingMode.PROCESS:
                    raise InputError(f"sampling='process': {exc}") from exc
                log.warning("sampling on a thread instead of a child process: %s", exc)
                self.sampling = SamplingMode.THREAD
        self._asker = self._thread_asker()

    def _process_asker(self) -> ProcessAsker[Prepared]:
        space = self._spec.space
        suggest = space.suggest if space.conditional else None  # the child suggests the conditional parameters
        return ProcessAsker(
            self._study,
            space.base_distributions(),
            self._maker.produce,
            self._executor.wake,
            f"sampler-{self._spec.study.name}",
            suggest,
        )

    def _virtual_child(self) -> VirtualChildAsker[Prepared]:
        space = self._spec.space
        return VirtualChildAsker(
            self._study,
            space.base_distributions(),
            self._maker.produce,
            lambda prepared: prepared.trial.number,
            cast(SamplerCore, self._executor),
            space.suggest if space.conditional else None,
        )

    def _thread_asker(self) -> BackgroundAsker[Prepared]:
        return BackgroundAsker(self._maker.produce, self._executor.wake, f"sampler-{self._spec.study.name}")

    def _replace_dead_child(self, died: SamplerDied) -> None:
        """A new sampler child (a fresh sampler, seeded anew), or a thread once it died too often."""
        self._asker.close(timeout=5.0)  # the trials it had sent and not handed out die with its replica
        self._restarts += 1
        trials = len(self._study.get_trials(deepcopy=False))
        self._study.sampler = campaign_sampler(self._spec, trials, self._restarts)
        if self._restarts <= MAX_CHILD_RESTARTS:
            log.warning(
                "%s; starting a new one with a fresh sampler (%d of %d), the campaign goes on",
                died,
                self._restarts,
                MAX_CHILD_RESTARTS,
            )
            try:
                self._asker = self._process_asker()
                return
            except NotPortable as exc:
                log.warning("the sampler process could not start again: %s", exc)
        else:
            log.warning("%s; %d restarts already: sampling on a thread from now on", died, MAX_CHILD_RESTARTS)
        self.sampling = SamplingMode.THREAD
        self._asker = self._thread_asker()

    def close(self, timeout: float = 30.0) -> None:
        """Stop sampling; trials asked and not taken join the pending ones. The parameters kept are written.
        ``timeout``: each of the sampler's waits (its last ask, its child's final state and exit), at most. The first
        step of the campaign's way out: from here its waits (the sampler's, the cluster's) share one bound
        (:func:`cluster.way_out.begin`)."""
        way_out.begin()
        try:
            self.pending.extend(self._asker.close(timeout))
        finally:
            self._maker.close()

    def flush_params(self) -> None:
        """The parameters of the trials asked since the last call, written (see :meth:`TrialMaker.flush_params`)."""
        self._maker.flush_params()

    def unstarted(self) -> Iterator[Prepared]:
        """Trials asked but never launched (the time budget ran out first), taken out one by one for the campaign
        to tell."""
        while self.pending:
            yield self.pending.popleft()

    # --- how many ---------------------------------------------------------------------------------------

    def in_hand(self) -> int:
        """Trials asked (or to be run again) and not yet launched: the budget counts them as spent."""
        return self._asker.in_hand() + len(self._resumable) + len(self.pending)

    def spent(self) -> int:
        """Trials of the budget spent: held by the campaign (told, waiting to be told, launched) or in hand here."""
        return self._outside() + self.in_hand()

    def trials_left(self) -> int:
        """Trials the campaign may still ask."""
        return self._budget.trials_left(self.spent())

    def more_coming(self, time_left: bool) -> bool:
        """Whether a background sampler still owes trials (nothing runs while it samples the first ones)."""
        if not self._asker.background or not time_left:
            return False
        return self._asker.in_hand() > 0 or self.trials_left() > 0

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
            wanted = min(wanted, self._asker.in_hand() + self.trials_left())
        starved = not self.pending and slot_free and self._asker.asks_here  # a slot waits for a trial
        self._asker.want(wanted, wake_at=1 if starved else batch)

    # --- the next trials --------------------------------------------------------------------------------

    def short_of(self, batch: int) -> bool:
        """Fewer than ``batch`` trials wait to launch: :meth:`fetch` another."""
        return len(self.pending) < batch

    def group(self, batch: int) -> list[Prepared]:
        """Up to ``batch`` prepared trials of one width, the pending ones first, taken out of ``pending``."""
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

    def fetch(self) -> Prepared | None:
        """The next trial: one to run again, else one asked (ahead, or now). One marked ``invalid`` (e.g. a genome
        over the parameter limit) is the campaign's to tell FAIL; a valid one goes to ``pending``."""
        item: Prepared | None
        if self._resumable:
            frozen = self._resumable.popleft()
            log.info("trial %d was left running; starting it again", frozen.number)
            item = self._maker.configure(self._reopen(frozen), self._order.finished)
        else:
            item = self._take() or self._ask_here()
        if item is not None and not item.invalid:
            self.pending.append(item)
        return item

    def _reopen(self, frozen: FrozenTrial) -> optuna.Trial:
        """A trial left running, to run again. Parameters a torn journal cut from its record are taken back from
        the campaign's parameters log (``trial-params.jsonl``; a campaign made before it: ``trials/<n>/params.json``),
        which the controller wrote before the journal's record: its checkpoint was made with them. Any still missing
        (its line never got written) are sampled now by a seeded random sampler, never the campaign's (a sampler
        child only hands out what it sampled itself)."""
        if self._recorded is None:
            self._recorded = recorded_params(self._folder)  # read once, for all the trials a resume runs again
        restored = restore_params(
            self._study,
            frozen,
            self._spec.space.distributions(),
            read_params(self._folder, frozen.number, self._recorded),
        )
        completer = optuna.load_study(
            study_name=self._study.study_name,
            storage=op.storage_of(self._study),
            sampler=optuna.samplers.RandomSampler(self._cut_seed(frozen.number)),
        )
        sampled = self._spec.space.suggest_missing(optuna.Trial(completer, op.frozen_id(self._study, frozen)))
        if restored or sampled:
            how = [f"{', '.join(restored)} restored from its folder"] if restored else []
            how += [f"{', '.join(sampled)} sampled now"] if sampled else []
            log.warning("trial %d's record was cut short: %s", frozen.number, "; ".join(how))
        return optuna.Trial(self._study, op.frozen_id(self._study, frozen))

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
        if self.trials_left() <= 0 or self._sampler_is_slow():
            return None
        return self._asker.ask_here()

    def _sampler_is_slow(self) -> bool:
        times = self._asker.times
        return self._asker.background and times.asked > 0 and times.ask_seconds >= SLOW_ASK_SECONDS
