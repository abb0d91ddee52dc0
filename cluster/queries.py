"""A running trial's questions to the controller and their answers: the round trip of a define-by-run trial.

A question goes up the trial's event stream (``Worker.log_event`` on its topic, after the trial's reports, so the
controller has handled those when it answers); the answer comes straight back to the worker that asked, through the
worker handler :data:`ANSWER_OP`, over the client's connection to that worker (as the executor sends trials to slot
runners). The asking thread waits for it, bounded by :data:`ANSWER_TIMEOUT`; nothing else on the worker waits. The
handler is added by the first question a worker process asks, before the question leaves, so no plugin is needed and
any cluster the controller joins can answer.

Questions and answers are plain dicts of msgpack types; what they mean is the controller's business
(``search.objective.messages``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import queue
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .worker_messages import TrialAsked, send

if TYPE_CHECKING:  # distributed is loaded where a question is asked or answered
    from distributed import Client

__all__ = ["ANSWER_OP", "ANSWER_TIMEOUT", "NoAnswer", "ask", "take_answer", "send_answer"]

ANSWER_OP = "hypersweep_answer"  # the worker handler that takes an answer
ANSWER_TIMEOUT = 300.0  # seconds a trial waits for an answer before it fails (the controller is gone)

_WAITING: dict[tuple[str, int, int], queue.SimpleQueue[dict[str, Any]]] = {}  # (topic, trial, question) -> its box
_LOCK = threading.Lock()
_NUMBERS = itertools.count()  # question numbers, unique in this worker process


class NoAnswer(TimeoutError):
    """The controller did not answer a trial's question in time."""


def ask(worker: Any, topic: str, number: int, question: Mapping[str, Any], timeout: float = ANSWER_TIMEOUT) -> dict:
    """Send ``question`` for trial ``number`` up ``topic`` from ``worker`` and wait for the controller's answer."""
    if worker.handlers.get(ANSWER_OP) is not take_answer:
        worker.handlers[ANSWER_OP] = take_answer  # before the question leaves: its answer finds the handler
    seq = next(_NUMBERS)
    key = (topic, int(number), seq)
    box: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
    with _LOCK:
        _WAITING[key] = box
    try:
        send(worker, topic, TrialAsked(int(number), dict(question), seq, time.time()))
        try:
            return box.get(timeout=timeout)
        except queue.Empty:
            raise NoAnswer(
                f"trial {number}: the controller did not answer {question.get('op')!r} within {timeout:g} s"
            ) from None
    finally:
        with _LOCK:
            _WAITING.pop(key, None)


def take_answer(topic: str, number: int, seq: int, answer: dict[str, Any]) -> str:
    """The :data:`ANSWER_OP` handler (on the worker's event loop): hand ``answer`` to the thread that asked."""
    with _LOCK:
        box = _WAITING.get((str(topic), int(number), int(seq)))
    if box is None:
        return "gone"  # it stopped waiting (timed out, or its trial ended)
    box.put(dict(answer))
    return "ok"


def send_answer(
    client: Client, worker: str, topic: str, number: int, seq: int, answer: Mapping[str, Any]
) -> concurrent.futures.Future[Any]:
    """Send ``answer`` to question ``seq`` of trial ``number``, asked on ``worker`` (returns at once)."""

    async def put() -> Any:
        return await getattr(client.rpc(worker), ANSWER_OP)(topic=topic, number=number, seq=seq, answer=dict(answer))

    loop: Any = client.loop  # tornado's IOLoop over the client's asyncio loop
    return asyncio.run_coroutine_threadsafe(put(), loop.asyncio_loop)
