"""Writing spec files in tests."""

from __future__ import annotations

import textwrap
from pathlib import Path


def write_spec(path: Path, body: str) -> Path:
    path.write_text(textwrap.dedent(body))
    return path
