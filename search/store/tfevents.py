"""TensorBoard event files, written without TensorBoard: scalars only, synchronous, no threads.

An event file is a TFRecord stream of ``Event`` protocol buffers: each record is its length
(uint64, little-endian), the length's masked CRC-32C, the bytes, and their masked CRC-32C.
The first event names the file version; each later one holds a ``Summary`` of scalar
values (``simple_value``) at one step. That is what ``torch.utils.tensorboard``'s
``SummaryWriter.add_scalar`` writes, and what TensorBoard (and ``EventAccumulator``) read.
TensorBoard itself (with its grpcio, werkzeug...) is needed only to look at the files.
"""

from __future__ import annotations

import os
import socket
import struct
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

__all__ = ["EventFileWriter", "read_scalars", "crc32c", "event_file_name"]

FILE_VERSION = b"brain.Event:2"


def _crc_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), as TFRecord uses it."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> bytes:
    crc = crc32c(data)
    return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _record(data: bytes) -> bytes:
    length = struct.pack("<Q", len(data))
    return length + _masked(length) + data + _masked(data)


# --- protocol buffer encoding (the few fields an event needs) ---------------------------------------


def _varint(n: int) -> bytes:
    n &= 0xFFFFFFFFFFFFFFFF  # int64 as protobuf encodes it (a negative step takes ten bytes)
    out = bytearray()
    while True:
        bits, n = n & 0x7F, n >> 7
        out.append(bits | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _bytes_field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _event(wall_time: float, step: int, payload: bytes) -> bytes:
    """``Event``: wall_time (1, double), step (2, int64), then ``payload`` (its own field)."""
    return _varint(1 << 3 | 1) + struct.pack("<d", wall_time) + _varint(2 << 3) + _varint(step) + payload


def _scalar(tag: str, value: float) -> bytes:
    """``Summary.Value``: tag (1, string), simple_value (2, float)."""
    return _bytes_field(1, tag.encode()) + _varint(2 << 3 | 5) + struct.pack("<f", value)


def event_file_name(suffix: str = "") -> str:
    """``events.out.tfevents.<time>.<host>.<pid><suffix>``, the name TensorBoard looks for."""
    return f"events.out.tfevents.{int(time.time())}.{socket.gethostname()}.{os.getpid()}{suffix}"


class EventFileWriter:
    """Appends scalar events to a new event file in ``folder``; each call is in the file when it returns.

    The file is opened for each write and closed again: a campaign with 10,000 trials in flight has a writer
    per trial, and 10,000 open files would exceed the usual limit of 1,024 per process (``ulimit -n``).
    """

    def __init__(self, folder: Path, suffix: str = "") -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / event_file_name(suffix)
        self._write(_event(time.time(), 0, _bytes_field(3, FILE_VERSION)))

    def add_scalars(self, step: int, scalars: Mapping[str, float], wall_time: float | None = None) -> None:
        """One event at ``step`` holding a scalar per ``scalars`` item (tag: its name)."""
        if not scalars:
            return
        summary = b"".join(_bytes_field(1, _scalar(tag, float(value))) for tag, value in scalars.items())
        self._write(_event(time.time() if wall_time is None else wall_time, int(step), _bytes_field(5, summary)))

    def _write(self, event: bytes) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
        try:
            os.write(fd, _record(event))
        finally:
            os.close(fd)

    def close(self) -> None:
        """Nothing stays open between writes; kept for the writers' protocol."""


# --- reading back (tests, and anyone without TensorBoard) -------------------------------------------


def read_scalars(path: Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the event file at ``path``: tag -> [(step, value)] in file order; checks the CRCs."""
    out: dict[str, list[tuple[int, float]]] = {}
    for event in _records(path.read_bytes()):
        fields = dict(_fields(event))
        if 5 not in fields:
            continue
        step = int(fields.get(2, 0))
        for number, value in _fields(fields[5]):
            if number == 1:
                tag_value = dict(_fields(value))
                out.setdefault(tag_value[1].decode(), []).append((step, tag_value[2]))
    return out


def _records(data: bytes) -> Iterator[bytes]:
    at = 0
    while at < len(data):
        length_bytes = data[at : at + 8]
        if _masked(length_bytes) != data[at + 8 : at + 12]:
            raise ValueError(f"event file: bad length CRC at byte {at}")
        (length,) = struct.unpack("<Q", length_bytes)
        body = data[at + 12 : at + 12 + length]
        if _masked(body) != data[at + 12 + length : at + 16 + length]:
            raise ValueError(f"event file: bad data CRC at byte {at}")
        yield body
        at += 16 + length


def _fields(message: bytes) -> Iterator[tuple[int, Any]]:
    """(field number, value) of each field of a protocol buffer message, in order."""
    at = 0
    while at < len(message):
        key, at = _read_varint(message, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _read_varint(message, at)
            yield number, value
        elif wire == 1:
            yield number, struct.unpack_from("<d", message, at)[0]
            at += 8
        elif wire == 5:
            yield number, struct.unpack_from("<f", message, at)[0]
            at += 4
        elif wire == 2:
            length, at = _read_varint(message, at)
            yield number, message[at : at + length]
            at += length
        else:
            raise ValueError(f"event file: unexpected wire type {wire}")


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[at]
        at += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return (result - (1 << 64) if result >= 1 << 63 else result), at
