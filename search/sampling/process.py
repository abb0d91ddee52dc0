"""Sampling in a child process, on a replica of the study: the sampler gets its own interpreter lock.

On one interpreter, a sampler's asks run in series with everything else the
controller does (Dask's IO thread, the loop, the storage), whichever thread
asks: with TPE on short trials the campaign ran at about half of TPE's own
rate. Here the sampler lives in a child process with an in-memory *replica*
study:

- the child asks the replica (``study.ask`` over the campaign's fixed
  distributions, then ``suggest`` for the conditional parameters whose
  condition holds) whenever the controller has credit outstanding, and sends
  back the parameters;
- the controller creates its own trial with those parameters
  (:class:`ReplaySampler` hands them to ``Study.ask``), runs and tells it;
- every tell on the controller reaches the replica (``ReplaySampler.after_trial``),
  state, values, parameters and intermediate values (TPE reads those of pruned
  trials), before the child's next ask.

Only samplers whose state lives in their object and in the trials' values and
parameters can run this way: they must not write attributes the campaign's
study needs (``search.sampling.samplers.REPLICA_SAFE``). The child's sampler is the campaign's own,
pickled with its RNG; when the campaign ends its state comes back (:meth:`ProcessAsker.sampler_state`)
and the study gets it as its sampler again.

A child that exits unexpectedly (killed, out of memory) makes :meth:`ProcessAsker.take`
raise :class:`SamplerDied`, which the trial supply answers with a new child and a fresh,
newly seeded sampler (``search.loop.supply``): the dead child's random stream is never
continued, so none of its asks is repeated. A sampler that *raises* in the child is a
bug, not an accident: :class:`~search.sampling.asker.AskFailed`, and the campaign stops.
"""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import signal
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from cluster import way_out
from search.compat import optuna_private as op
from search.sampling.asker import AskFailed, AskTimes
from search.sampling.cost_tpe import COST_KEY
from search.sampling.presample import Presampler

__all__ = ["ProcessAsker", "ReplaySampler", "Asked", "NotPortable", "SamplerDied", "replica_inputs"]

log = logging.getLogger(__name__)

T = TypeVar("T")
Suggest = Callable[[optuna.Trial], None]  # after an ask: suggests the conditional parameters (pickled to the child)
START_SECONDS = 120.0  # the child must import Optuna and unpickle the sampler within this
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


class NotPortable(RuntimeError):
    """The sampler cannot move to a child process (it does not pickle, or this process may not have children)."""


class SamplerDied(AskFailed):
    """The sampler's child process exited unexpectedly; a new one (or a thread) can take over."""


@dataclass(frozen=True)
class Asked:
    """One trial the child sampled: its replica number, parameters, finished trials seen, ask seconds."""

    replica: int
    params: dict[str, Any]
    saw: int
    seconds: float


@dataclass(frozen=True)
class Done:
    """A trial the controller told, as the replica records it (``replica`` None: not asked by the child)."""

    replica: int | None
    state: TrialState
    values: list[float] | None
    params: dict[str, Any]
    distributions: dict[str, BaseDistribution]
    intermediate: dict[int, float]
    constraints: dict[str, float] = field(default_factory=dict)  # ``Trial.set_constraint`` values
    cost: float | None = None  # slot-seconds, where the campaign recorded them (a cost-aware sampler reads them)


# --- the child --------------------------------------------------------------------------------


class _Inbox:
    """The child's receiving thread: messages land here while the child samples."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self._cond = threading.Condition()
        self._messages: deque[tuple] = deque()
        threading.Thread(target=self._read, name="replica-inbox", daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                message = ("close",)  # the controller is gone
            with self._cond:
                self._messages.append(message)
                self._cond.notify()
            if message[0] == "close":
                return

    def next(self, block: bool) -> tuple | None:
        with self._cond:
            while block and not self._messages:
                self._cond.wait()
            return self._messages.popleft() if self._messages else None


class _Replica:
    """The child's study: asks on credit, records what the controller told."""

    def __init__(
        self,
        sampler: optuna.samplers.BaseSampler,
        directions: Sequence[str],
        distributions: dict[str, BaseDistribution],
        finished: list[FrozenTrial],
        suggest: Suggest | None = None,
    ) -> None:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.study = op.create_study(directions=cast(list[Any], list(directions)), sampler=sampler)
        self.study.add_trials(finished)
        self.distributions = distributions
        self.suggest = suggest
        self.seen = len(finished)
        self.credit = 0

    def ask(self) -> Asked:
        started = time.perf_counter()
        trial = self.study.ask(fixed_distributions=self.distributions)
        if self.suggest is not None:
            self.suggest(trial)  # the conditional parameters whose condition holds
        return Asked(trial.number, dict(trial.params), self.seen, time.perf_counter() - started)

    def record(self, done: Done) -> None:
        self.seen += 1
        if done.replica is not None:
            storage = op.storage_of(self.study)
            frozen = storage.get_trial(
                storage.get_trial_id_from_study_id_trial_number(op.study_id(self.study), done.replica)
            )
            if frozen.params == done.params:
                self._finish(frozen, done)
                return
            self._finish(frozen, Done(done.replica, TrialState.FAIL, None, {}, {}, {}))  # run with other params
        self.study.add_trial(
            optuna.trial.create_trial(
                state=done.state,
                values=done.values,
                params=done.params,
                distributions=done.distributions,
                intermediate_values=done.intermediate,
                constraints=done.constraints or None,
                system_attrs={COST_KEY: done.cost} if done.cost is not None else None,
            )
        )

    def _finish(self, frozen: FrozenTrial, done: Done) -> None:
        """What ``Study.tell`` does, as the controller already validated it: intermediate values, then state."""
        storage, trial_id = op.storage_of(self.study), op.frozen_id(self.study, frozen)
        for step, value in done.intermediate.items():
            storage.set_trial_intermediate_value(trial_id, step, value)
        for key, value in done.constraints.items():  # as ``Trial.set_constraint`` stores them
            storage.set_trial_system_attr(trial_id, f"{op.constraints_key()}:{key}", value)
        if done.cost is not None:
            storage.set_trial_system_attr(trial_id, COST_KEY, done.cost)
        frozen = storage.get_trial(trial_id)
        try:
            self.study.sampler.after_trial(self.study, frozen, done.state, done.values)
        finally:
            storage.set_trial_state_values(trial_id, done.state, done.values)


def serve(
    conn: Any,
    sampler_bytes: bytes,
    directions: Sequence[str],
    distributions: dict[str, BaseDistribution],
    finished: list[FrozenTrial],
    suggest: Suggest | None = None,
) -> None:
    """The child's main: tell what arrives, ask while there is credit, answer state requests."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the controller's: it closes the child
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # born blocked: a pending one is dropped
    try:
        replica = _Replica(pickle.loads(sampler_bytes), directions, distributions, finished, suggest)
    except BaseException:  # noqa: BLE001 - reported to the controller, which raises it
        conn.send(("error", traceback.format_exc()))
        return
    conn.send(("ready",))
    inbox = _Inbox(conn)
    while True:
        message = inbox.next(block=replica.credit == 0)
        try:
            if not _handle(conn, replica, message):
                return
        except Exception:  # noqa: BLE001 - the controller raises it as AskFailed
            conn.send(("error", traceback.format_exc()))
            replica.credit = 0


def _handle(conn: Any, replica: _Replica, message: tuple | None) -> bool:
    """One step of the child: an ask (``message`` None: credit left, nothing to record first) or a message."""
    if message is None:
        replica.credit -= 1
        conn.send(("asked", replica.ask()))
        return True
    kind = message[0]
    if kind == "ask":
        replica.credit += message[1]
    elif kind == "done":
        replica.record(message[1])
    elif kind == "state":
        conn.send(("state", pickle.dumps(replica.study.sampler)))
    elif kind == "close":
        conn.close()
        return False
    return True


# --- the controller's side ---------------------------------------------------------------------


class ReplaySampler(optuna.samplers.BaseSampler, Presampler):
    """The controller study's sampler while the child samples: it replays the child's parameters.

    :meth:`stage` sets what the next ``Study.ask`` gets; ``after_trial`` forwards
    each tell to the child. It never samples: a parameter that was not staged
    is an error. The fixed distributions come through ``sample_relative``, or through :meth:`presample`
    when the trial is created with them (:func:`search.sampling.presample.ask_fixed`; ``before_trial`` then
    ties the staged ask to the new trial's number); the conditional parameters the child suggested after
    its ask, through ``sample_independent``.
    """

    def __init__(self, distributions: dict[str, BaseDistribution], forward: Callable[[Done], None]) -> None:
        self._distributions = distributions
        self._forward = forward
        self._staged: Asked | None = None
        self._presampled: Asked | None = None  # staged, its parameters given to a trial being created
        self._rest: tuple[int, dict[str, Any]] = (-1, {})  # trial number, its staged params beyond the fixed ones
        self._replica_of: dict[int, int] = {}  # controller trial number -> replica trial number

    def stage(self, asked: Asked) -> None:
        self._staged = asked

    def presample(self, distributions: dict[str, BaseDistribution]) -> dict[str, Any] | None:
        """The staged parameters of ``distributions`` (None, nothing consumed, if one is missing)."""
        staged = self._staged
        if staged is None or not distributions.keys() <= staged.params.keys():
            return None
        self._staged, self._presampled = None, staged
        return {name: staged.params[name] for name in distributions}

    def before_trial(self, study, trial) -> None:
        if self._presampled is not None:  # the trial created with the presampled parameters
            presampled, self._presampled = self._presampled, None
            self._bind(trial.number, presampled, set(trial.params))

    def infer_relative_search_space(self, study, trial):
        return dict(self._distributions) if self._staged is not None else {}

    def sample_relative(self, study, trial, search_space):
        if self._staged is None:
            return {}
        staged, self._staged = self._staged, None
        self._bind(trial.number, staged, set(search_space))
        return {name: value for name, value in staged.params.items() if name in search_space}

    def _bind(self, number: int, staged: Asked, given: set[str]) -> None:
        """Trial ``number`` has the child's ask ``staged``: the replica's number for its tell, and the parameters
        beyond ``given`` (the child's conditional ones) for ``sample_independent``."""
        self._replica_of[number] = staged.replica
        self._rest = (number, {name: value for name, value in staged.params.items() if name not in given})

    def sample_independent(self, study, trial, param_name, param_distribution):
        number, rest = self._rest
        if trial.number == number and param_name in rest:
            return rest[param_name]  # a conditional parameter the child suggested
        raise RuntimeError(
            f"parameter {param_name!r} was not sampled by the sampler process "
            "(only the campaign's fixed search space is sampled there)"
        )

    def after_trial(self, study, trial, state, values) -> None:
        self._forward(
            Done(
                self._replica_of.pop(trial.number, None),
                state,
                None if values is None else list(values),
                dict(trial.params),
                dict(trial.distributions),
                dict(trial.intermediate_values),
                dict(trial.constraints),
                trial.system_attrs.get(COST_KEY),
            )
        )


class ProcessAsker(Generic[T]):
    """The campaign's asker when the sampler runs in a child process (same protocol as ``BackgroundAsker``).

    Credit-based: :meth:`want` asks the child for more trials when fewer are in
    hand (received, or owed by the child) than wanted; each trial the child
    sends waits here until :meth:`take` turns it into a controller trial with
    ``produce(saw)``. Trials received and never taken exist in the replica only.
    ``suggest(trial)``, if given, runs in the child after each ask (a space's conditional
    parameters, define-by-run); the controller's ``produce`` must make the same calls.
    """

    background = True
    asks_here = False  # the loop never samples itself: ``ask_here`` always answers None

    def __init__(
        self,
        study: optuna.Study,
        distributions: dict[str, BaseDistribution],
        produce: Callable[[int], T],
        wake: Callable[[], None],
        name: str = "hypersweep-sampler",
        suggest: Suggest | None = None,
    ) -> None:
        self._study = study
        self._produce = produce
        self._wake = wake
        self._cond = threading.Condition()
        self._ready: deque[Asked] = deque()
        self._owed = 0
        self._wake_at = 1
        self._error: str | None = None
        self._died = False  # the child exited unexpectedly (not a sampler error)
        self._state: bytes | None = None
        self._state_asked = 0
        self._state_got = 0
        self._closing = False
        self._reaping = threading.Lock()  # one thread at a time waits for the child (see _join)
        self.times = AskTimes()  # of the child's asks
        self._original = study.sampler
        sampler_bytes, directions, finished = replica_inputs(study)
        context = multiprocessing.get_context("spawn")
        self._conn, child = context.Pipe()
        self._process = context.Process(
            target=serve,
            name=name,
            daemon=True,
            args=(child, sampler_bytes, directions, distributions, finished, suggest),
        )
        # Born with SIGINT blocked (a thread's mask is inherited across fork and exec): the terminal's Ctrl-C to the
        # whole group cannot reach the child before serve() ignores it; one sent to this thread arrives right after.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        try:
            self._process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        child.close()
        self._await_ready()
        self._replay = ReplaySampler(distributions, self._send_done)
        study.sampler = self._replay
        self._reader = threading.Thread(target=self._read, name=f"{name}-reader", daemon=True)
        self._reader.start()

    def _await_ready(self) -> None:
        """Wait for the child's "ready"; :class:`NotPortable` if it cannot start (e.g. the sampler's class
        lives in a ``__main__`` the child cannot import)."""
        problem = ""
        if not self._conn.poll(START_SECONDS):
            problem = f"the sampler process did not start within {START_SECONDS:.0f} s"
        else:
            try:
                message = self._conn.recv()
                problem = f"the sampler process could not start:\n{message[1]}" if message[0] == "error" else ""
            except EOFError:
                problem = "the sampler process exited at start"
        if problem:
            if self._join(5.0):
                self._process.kill()
                self._join(5.0)
            self._conn.close()
            raise NotPortable(problem)

    # --- the loop's side -------------------------------------------------------------------

    def want(self, n: int, wake_at: int = 1) -> None:
        """Have ``n`` trials in hand: ask the child for the difference (credit is never taken back)."""
        with self._cond:
            self._wake_at = max(1, int(wake_at))
            more = int(n) - len(self._ready) - self._owed
            if more <= 0 or self._error is not None:
                return
            self._owed += more
        self._send(("ask", more))

    def in_hand(self) -> int:
        with self._cond:
            return len(self._ready) + self._owed

    @property
    def pid(self) -> int | None:
        """The child process's id."""
        return self._process.pid

    def take(self) -> T | None:
        """A trial from the child's parameters, or None if none has arrived.

        Raises :class:`SamplerDied` if the child exited (what it had sent and not handed
        out is dropped: it exists in its replica only), :class:`AskFailed` if its sampler raised.
        """
        with self._cond:
            if self._died:
                self._ready.clear()
                raise SamplerDied(self._error or "the sampler process exited unexpectedly")
            if self._error is not None:
                raise AskFailed(f"the sampler process failed:\n{self._error}")
            if not self._ready:
                return None
            asked = self._ready.popleft()
        self._replay.stage(asked)
        return self._produce(asked.saw)

    def ask_here(self) -> T | None:
        return None

    def sampler_state(self, wait: float = 0.0) -> bytes | None:
        """The child's sampler, pickled: the latest copy received, after asking for a newer one.

        ``wait`` > 0 waits that long for the newer copy (the child answers between asks).
        Once closed, the final copy (fetched by :meth:`close`), at once.
        """
        with self._cond:
            if self._closing:
                return self._state
            asked = self._state_asked = self._state_asked + 1
        self._send(("state",))
        with self._cond:
            self._cond.wait_for(lambda: self._state_got >= asked or self._error is not None, timeout=wait)
            return self._state

    def close(self, timeout: float = 30.0) -> list[T]:
        """Fetch the sampler's final state, stop the child, give the campaign's study its sampler back. Each wait
        within ``timeout`` s and what is left of the way out (:mod:`cluster.way_out`); the child killed past it."""
        state = self._final_state(timeout) if self._process.is_alive() else self._state
        with self._cond:
            self._closing = True
        self._send(("close",))
        if self._join(seconds := way_out.left(timeout)):
            way_out.ran_out("the sampler's process did not exit", seconds, "killing it")
            self._process.kill()
            self._join(way_out.left(5.0))
        way_out.joined(self._reader, 5.0, "the sampler's reading thread did not end")
        self._conn.close()
        self._study.sampler = pickle.loads(state) if state is not None else self._original
        return []

    def _final_state(self, timeout: float) -> bytes | None:
        """The sampler's latest state, asked for and waited for within ``timeout`` s and the way out (else the last
        copy received, said)."""
        with self._cond:
            asked = self._state_asked + 1
        state = self.sampler_state(wait=(seconds := way_out.left(timeout)))
        with self._cond:
            if self._state_got < asked and self._error is None:
                way_out.ran_out("the sampler's process did not send its final state", seconds, "keeping the last one")
        return state

    def _join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the child to exit; whether it is still alive. One thread at a time: of two
        threads joining at once, the one whose ``waitpid`` finds the child already reaped by the other is told it
        is alive (``multiprocessing`` keeps no exit code then), which made ``close`` kill an exited child and warn
        that it did not exit."""
        with self._reaping:
            self._process.join(timeout)
            return self._process.is_alive()

    # --- the reading thread -----------------------------------------------------------------

    def _send(self, message: tuple) -> None:
        try:
            self._conn.send(message)
        except (OSError, ValueError) as exc:  # the child is gone: the reader reports why
            log.debug("sampler process unreachable: %s", exc)

    def _send_done(self, done: Done) -> None:
        self._send(("done", done))

    def _read(self) -> None:
        while True:
            try:
                message = self._conn.recv()
            except (EOFError, OSError):
                self._join(5.0)  # its exit code, for the message
                with self._cond:
                    if not self._closing and self._error is None:
                        self._error = f"the sampler process exited unexpectedly (exit code {self._process.exitcode})"
                        self._died = True
                    self._owed = 0
                    self._cond.notify_all()
                self._wake()
                return
            self._receive(message)

    def _receive(self, message: tuple) -> None:
        kind = message[0]
        wake = False
        with self._cond:
            if kind == "asked":
                self._ready.append(message[1])
                self._owed = max(0, self._owed - 1)
                self.times.record(message[1].seconds)
                wake = len(self._ready) >= self._wake_at or self._owed == 0
            elif kind == "state":
                self._state, self._state_got = message[1], self._state_got + 1
                self._cond.notify_all()
            elif kind == "error":
                self._error, self._owed, wake = message[1], 0, True
                self._cond.notify_all()
        if wake:
            self._wake()


def replica_inputs(study: optuna.Study) -> tuple[bytes, list[str], list[FrozenTrial]]:
    """What a sampler child starts its replica with: the campaign's sampler pickled (:class:`NotPortable` if it
    cannot be), the study's directions, and its finished trials, bare."""
    finished = [_bare(t) for t in study.get_trials(deepcopy=False, states=FINISHED)]
    return _portable(study.sampler), list(_directions(study)), finished


def _portable(sampler: optuna.samplers.BaseSampler) -> bytes:
    """The sampler pickled for the child; :class:`NotPortable` if it cannot go there."""
    if multiprocessing.current_process().daemon:
        raise NotPortable("this process is a daemon (e.g. a multiprocessing pool worker) and may not start a child")
    try:
        return pickle.dumps(sampler)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise NotPortable(f"the sampler {type(sampler).__name__} does not pickle: {exc}") from exc


def _bare(trial: FrozenTrial) -> FrozenTrial:
    """A finished trial as the replica needs it: no user attributes (histories, configs)."""
    return optuna.trial.create_trial(
        state=trial.state,
        values=trial.values,
        params=trial.params,
        distributions=trial.distributions,
        intermediate_values=trial.intermediate_values,
        system_attrs=trial.system_attrs,
    )


def _directions(study: optuna.Study) -> list[str]:
    return ["maximize" if d == optuna.study.StudyDirection.MAXIMIZE else "minimize" for d in study.directions]
