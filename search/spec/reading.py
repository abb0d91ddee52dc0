"""Reading a spec file safely: a regular file, of a bounded size, UTF-8 text, valid TOML.

Every refusal is one :class:`~search.spec.table.SpecError` naming the file (and, for a key given
twice, the key), raised before the file is read past its limit: a FIFO, ``/dev/zero`` or a 50 MB
file never hangs or fills the memory of ``check``, ``run`` or ``resume``.
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from pathlib import Path
from typing import Any

from search.spec.table import SpecError

__all__ = ["MAX_SPEC_BYTES", "read_spec_text", "parse_toml"]

#: The largest spec file read (1 MiB): ample for any search space written by hand or by a script.
MAX_SPEC_BYTES = 1 << 20

_WHERE = re.compile(r"\(at line (\d+), column (\d+)\)")
_HEADER = re.compile(r"^\s*\[\[?\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_KEY = re.compile(r"^\s*([A-Za-z0-9_\-.\"' ]+?)\s*=")


def read_spec_text(path: str | Path, what: str = "spec") -> str:
    """The text of the spec file at ``path``; a :class:`SpecError` on ``file`` if it is not a readable regular
    file of at most :data:`MAX_SPEC_BYTES` bytes of UTF-8 text."""
    source = str(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise SpecError(source, "file", f"cannot read ({exc.strerror or exc})") from None
    if stat.S_ISDIR(info.st_mode):
        raise SpecError(source, "file", f"is a directory, not a {what} file")
    if not stat.S_ISREG(info.st_mode):
        raise SpecError(source, "file", f"is not a regular file (a pipe, device or socket); give a {what} file")
    if info.st_size > MAX_SPEC_BYTES:
        raise SpecError(
            source, "file", f"{info.st_size:,} bytes: a {what} file may have at most {MAX_SPEC_BYTES:,} bytes"
        )
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_SPEC_BYTES + 1)
    except OSError as exc:
        raise SpecError(source, "file", f"cannot read ({exc.strerror or exc})") from None
    if len(data) > MAX_SPEC_BYTES:  # it grew since the stat
        raise SpecError(source, "file", f"larger than the {MAX_SPEC_BYTES:,} bytes a {what} file may have")
    return decode_text(source, data)


def decode_text(source: str, data: bytes) -> str:
    """``data`` as UTF-8 text; a :class:`SpecError` naming the file if it is UTF-16, binary or another encoding."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in data:
        kind = "UTF-16 text" if data.startswith((b"\xff\xfe", b"\xfe\xff")) else "binary (it holds NUL bytes)"
        raise SpecError(source, "file", f"is {kind}, not UTF-8 text; save it as UTF-8")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise SpecError(
            source, "file", f"is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}); save it as UTF-8"
        ) from None


def parse_toml(source: str, text: str) -> dict[str, Any]:
    """``text`` parsed as TOML; a :class:`SpecError` naming the key given twice, else ``toml`` and the parser's
    own words (line and column)."""
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        if message.startswith("Cannot overwrite a value") or "twice" in message:
            key = _key_at(text, message)
            if key:
                raise SpecError(source, key, f"is given twice ({message})") from None
        raise SpecError(source, "toml", f"not valid TOML ({message})") from None


def _key_at(text: str, message: str) -> str:
    """The dotted key defined at the line the parser's ``message`` points at ("" if it cannot be told)."""
    where = _WHERE.search(message)
    lines = text.splitlines()
    if where is None and "end of document" in message:
        number = max((i + 1 for i, line in enumerate(lines) if line.strip()), default=0)
    elif where is None:
        return ""
    else:
        number = int(where.group(1))
    if not 1 <= number <= len(lines):
        return ""
    header = _HEADER.match(lines[number - 1])
    if header:
        return _plain(header.group(1))
    key = _KEY.match(lines[number - 1])
    if key is None:
        return ""
    table = ""
    for line in reversed(lines[: number - 1]):
        found = _HEADER.match(line)
        if found:
            table = _plain(found.group(1))
            break
    return f"{table}.{_plain(key.group(1))}" if table else _plain(key.group(1))


def _plain(key: str) -> str:
    """A dotted TOML key without its quotes and spaces (``"a" . b`` -> ``a.b``)."""
    return ".".join(part.strip().strip("\"'") for part in key.split("."))
