"""The campaign folder: where every file of one campaign lives (names: ``records.Files``), and its controller lock."""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from search.store.records import Files
from spaces.errors import InputError

__all__ = [
    "CampaignFolder",
    "ControllerLock",
    "FolderLockedError",
    "NoCampaignError",
    "make_private",
    "write_atomic",
    "write_atomic_bytes",
    "replaced_atomically",
]

#: A campaign folder's mode: its owner's alone. It holds the study, checkpoints and the cluster's
#: address; other users of the machine have no business reading it.
PRIVATE_DIR_MODE = 0o700


class FolderLockedError(InputError, RuntimeError):
    """Another controller holds this campaign folder."""


class NoCampaignError(InputError, FileNotFoundError):
    """A folder given as a campaign holds none (no ``spec.toml``), or its storage lacks the study: exit status 2."""


@dataclasses.dataclass(frozen=True)
class CampaignFolder:
    """Paths inside ``runs/<study>/``; nothing outside ``root`` is ever written."""

    root: Path

    @classmethod
    def existing(cls, path: str | Path) -> CampaignFolder:
        """The campaign folder at ``path``; :class:`NoCampaignError` if it holds no campaign."""
        folder = cls(Path(path).resolve())
        if not folder.exists():
            raise NoCampaignError(f"{folder.root} holds no campaign (no spec.toml)")
        return folder

    @classmethod
    def for_study(cls, runs_dir: str | Path, name: str) -> CampaignFolder:
        runs = Path(runs_dir).resolve()
        if runs.exists() and not runs.is_dir():
            raise InputError(f"runs folder {runs} (--runs-dir): is not a folder")
        root = (runs / name).resolve()
        if root.parent != runs:
            raise InputError(f"study name {name!r} would leave the runs folder {runs}")
        return cls(root)

    @property
    def spec(self) -> Path:
        return self.root / Files.SPEC

    @property
    def sqlite(self) -> Path:
        return self.root / Files.SQLITE

    @property
    def journal(self) -> Path:
        return self.root / Files.JOURNAL

    @property
    def branching(self) -> Path:
        """The ``[scaling.branching]`` study's own campaign folder and results (search.session.branching)."""
        return self.root / Files.BRANCHING

    @property
    def scaling(self) -> Path:
        return self.root / Files.SCALING

    @property
    def lock(self) -> Path:
        return self.root / Files.LOCK

    @property
    def log(self) -> Path:
        return self.root / Files.LOG

    @property
    def summary(self) -> Path:
        return self.root / Files.SUMMARY

    @property
    def trials(self) -> Path:
        return self.root / Files.TRIALS

    @property
    def job_logs(self) -> Path:
        return self.root / Files.JOB_LOGS

    @property
    def environment(self) -> Path:
        return self.root / Files.ENVIRONMENT

    @property
    def report(self) -> Path:
        return self.root / Files.REPORT

    @property
    def scaling_table(self) -> Path:
        return self.scaling / Files.SCALING_TABLE

    @property
    def scaling_conclusion(self) -> Path:
        return self.scaling / Files.SCALING_CONCLUSION

    def trial(self, number: int) -> Path:
        """``trials/<number>/``: the trial's checkpoints and the controller's records of it."""
        return self.trials / str(int(number))

    def trial_metrics(self, number: int) -> Path:
        """``trials/<number>/metrics.jsonl``: one line per report (see ``records.append_metrics_line``)."""
        return Path(self.trial_metrics_file(number))

    def trial_metrics_file(self, number: int) -> str:
        """:meth:`trial_metrics` as a string, built without pathlib: the controller appends there at every report,
        and two pathlib joins a report were a twentieth of its time per report."""
        return f"{self.root}{os.sep}{Files.TRIALS}{os.sep}{int(number)}{os.sep}{Files.TRIAL_METRICS}"

    def trial_error_log(self, number: int) -> Path:
        """``trials/<number>/error.log``: a failed trial's reason and traceback."""
        return self.trial(number) / Files.TRIAL_ERROR_LOG

    def exists(self) -> bool:
        return self.spec.exists()

    def create(self, spec_text: str) -> None:
        """Make the folder (its owner's alone, see ``make_private``) and freeze the spec in it (written atomically)."""
        make_private(self.root)
        self.trials.mkdir(parents=True, exist_ok=True)
        write_atomic(self.spec, spec_text)


def make_private(folder: Path) -> None:
    """Create ``folder`` if need be and make it readable by its owner only (mode 0700), whatever the umask.

    Whatever is inside is then out of other users' reach, so files keep their ordinary modes. A folder
    this user does not own (shared on purpose by its owner) is left as it is.
    """
    folder.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    info = folder.stat()
    if info.st_mode & 0o777 != PRIVATE_DIR_MODE and info.st_uid == os.geteuid():
        os.chmod(folder, PRIVATE_DIR_MODE)


def write_atomic(path: Path, text: str, durable: bool = True) -> None:
    """Write then rename, so a crash never leaves a half-written file (see :func:`write_atomic_bytes`)."""
    write_atomic_bytes(path, text.encode(), durable)


def write_atomic_bytes(path: Path, data: bytes, durable: bool = True) -> None:
    """Write then rename, so a crash never leaves a half-written file. ``durable``: fsync before the rename,
    so that a machine crash leaves the old file or the new one (without it, a process crash still does)."""
    with replaced_atomically(path) as tmp, open(tmp, "wb") as fh:
        fh.write(data)
        fh.flush()
        if durable:
            os.fsync(fh.fileno())


@contextlib.contextmanager
def replaced_atomically(path: Path) -> Iterator[Path]:
    """A temporary name next to ``path`` to write; it replaces ``path`` when the block ends.

    If the block raises (a full disk), the temporary file is removed: nothing is left behind.
    """
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise
    os.replace(tmp, path)


class ControllerLock:
    """An exclusive ``flock`` on ``controller.lock``; the kernel drops it if the process dies.

    Taking it makes the folder that holds it private (``make_private``): a controller, new or resumed,
    never runs in a folder other users can read, even one made by an older version or by hand.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._fh: IO[str] | None = None

    def acquire(self, announce: bool = True) -> None:
        """Take the lock; ``announce``: and write who holds it (see :meth:`announce`)."""
        if announce:
            make_private(self._path.parent)
        fh = open(self._path, "a+")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "unknown process"
            fh.close()
            raise FolderLockedError(
                f"{self._path.parent} is in use by another controller ({holder}); "
                "wait for it to finish or stop it first"
            ) from None
        self._fh = fh
        if announce:
            self.announce()

    def announce(self) -> None:
        """Write who holds the lock into it (pid, host, since, command), and make the folder private."""
        assert self._fh is not None, "announce() needs the lock held"
        make_private(self._path.parent)
        self._fh.seek(0)
        self._fh.truncate()
        self._fh.write(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "since": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    "cmd": " ".join(sys.argv),
                }
            )
        )
        self._fh.flush()

    @contextlib.contextmanager
    def held_quietly(self) -> Iterator[ControllerLock]:
        """Hold the lock without writing to it, until :meth:`announce`: a command refused meanwhile (a changed
        spec, a budget too small) leaves ``controller.lock`` as it found it."""
        self.acquire(announce=False)
        try:
            yield self
        finally:
            self.release()

    def release(self) -> None:
        if self._fh is not None:
            fcntl.flock(self._fh.fileno(), fcntl.LOCK_UN)
            self._fh.close()
            self._fh = None

    @staticmethod
    def held(path: Path) -> bool:
        """Whether a live process holds the lock at ``path``."""
        if not path.exists():
            return False
        with open(path) as fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            return False

    def __enter__(self) -> ControllerLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
