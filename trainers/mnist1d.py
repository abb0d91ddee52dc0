"""MNIST-1D (Greydanus 2020): ten 1-D digit templates, randomly padded, translated, sheared, scaled and noised.

Generated procedurally by the ``mnist1d`` package (``pip install 'hypersweep[mnist1d]'``),
never downloaded: ``n_samples`` examples (a multiple of 10, as many per class)
from ``data_seed``, each a sequence of 40 values. Generation runs the package's
per-example Python transform (tens of seconds for 60,000 examples), so the
arrays are cached: in the process, and on disk as ``.npz`` files under
``options.data_cache`` (default ``$XDG_CACHE_HOME/hypersweep``, else
``~/.cache/hypersweep``), keyed by ``n_samples``, the seed and the package's
version. The generator's global ``numpy``/``random`` seeding is undone afterwards.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
import random
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

__all__ = ["generate", "load_arrays", "default_cache_dir", "SEQUENCE_LENGTH", "DEFAULT_SAMPLES", "NEEDED"]

SEQUENCE_LENGTH = 40
DEFAULT_SAMPLES = 62_500  # 50,000 training examples after the 80/20 split


NEEDED = "dataset='mnist1d' needs the mnist1d package: pip install 'hypersweep[mnist1d]'"


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/hypersweep``, else ``~/.cache/hypersweep``."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "hypersweep"


@contextlib.contextmanager
def _global_rng_kept() -> Iterator[None]:
    """The package seeds numpy's and Python's global generators: restore both afterwards."""
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        yield
    finally:
        np.random.set_state(numpy_state)
        random.setstate(python_state)


def generate(n_samples: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: ``x`` float32 of shape ``(n, 40)``, ``y`` int64, all ``n`` examples (train and test together)."""
    try:
        from mnist1d.data import get_dataset_args, make_dataset
    except ImportError as exc:
        raise ImportError(NEEDED) from exc
    args = get_dataset_args()
    args.num_samples, args.seed, args.train_split = int(n_samples), int(seed), 1.0
    with _global_rng_kept():
        data = make_dataset(args)
    return np.asarray(data["x"], dtype=np.float32), np.asarray(data["y"], dtype=np.int64)


def _cache_file(folder: Path, n_samples: int, seed: int) -> Path:
    try:
        version = importlib.metadata.version("mnist1d")
    except importlib.metadata.PackageNotFoundError as exc:  # looked up before the import: the same line
        raise ImportError(NEEDED) from exc
    return folder / f"mnist1d-{version}-n{n_samples}-seed{seed}.npz"


@functools.lru_cache(maxsize=2)
def load_arrays(n_samples: int, seed: int, cache_dir: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """:func:`generate`'s arrays, from the disk cache when there (written atomically when not)."""
    folder = Path(cache_dir) if cache_dir else default_cache_dir()
    path = _cache_file(folder, n_samples, seed)
    if path.is_file():
        with np.load(path) as stored:
            x, y = stored["x"], stored["y"]
    else:
        x, y = generate(n_samples, seed)
        _write_atomically(path, x, y)
    x.setflags(write=False)
    y.setflags(write=False)
    return x, y


def _write_atomically(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    """Write to a temporary file in the same folder, then rename: a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz.tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, x=x, y=y)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
