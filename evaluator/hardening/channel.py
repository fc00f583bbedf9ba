"""The result channel between a worker and its parent: authenticated JSON lines over a pipe.

The parent hands the worker a fresh random key on stdin. The worker signs every message with
it (HMAC-SHA256 over a sequence number and the body); the parent drops the run if a line fails
to verify or arrives out of order, so a kernel that writes to the pipe itself cannot forge or
replay a result (rule ``result-channel``). A kernel in the worker's process could still dig
the key out of memory; this rule guards against writing to the descriptor, not against that.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from typing import Any

__all__ = ["MAX_LINE_BYTES", "ChannelError", "Reader", "Writer", "new_key"]

# A case's result with a thousand samples is tens of kilobytes; a line that grows past this is a
# kernel writing to the descriptor, and buffering it would let it exhaust the parent's memory.
MAX_LINE_BYTES = 16 * 1024 * 1024


class ChannelError(ValueError):
    """A line that fails authentication, order or format."""


def new_key() -> str:
    return os.urandom(32).hex()


def _mac(key: bytes, seq: int, body: str) -> str:
    return hmac.new(key, f"{seq}\n{body}".encode(), hashlib.sha256).hexdigest()


class Writer:
    """The worker's end: one signed JSON line per message, flushed at once.

    Slotted, so that no instance attribute can shadow :meth:`send` (and rewrite a message
    before it is signed) on a writer found among live objects.
    """

    __slots__ = ("_fd", "_key", "_seq", "_write")

    def __init__(self, fd: int, key: str) -> None:
        self._write = os.write
        self._fd = fd
        self._key = bytes.fromhex(key)
        self._seq = 0

    def send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message, allow_nan=False, separators=(",", ":"))
        line = json.dumps({"seq": self._seq, "body": body, "mac": _mac(self._key, self._seq, body)}) + "\n"
        data = line.encode()
        while data:
            written = self._write(self._fd, data)
            data = data[written:]
        self._seq += 1


class Reader:
    """The parent's end: splits what arrives into lines, verifies each, returns the messages."""

    def __init__(self, key: str) -> None:
        self._key = bytes.fromhex(key)
        self._seq = 0
        self._pending = bytearray()

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        """The messages completed by ``chunk`` (bytes as read from the pipe), in order."""
        first, *rest = chunk.split(b"\n")
        self._pending += first
        if len(self._pending) > MAX_LINE_BYTES:
            raise ChannelError(f"a line on the result channel exceeds {MAX_LINE_BYTES} bytes")
        if not rest:
            return []
        lines = [bytes(self._pending), *rest[:-1]]
        self._pending = bytearray(rest[-1])
        return [self.decode(line) for line in lines]

    def decode(self, line: bytes) -> dict[str, Any]:
        """One line's message. Whatever the line holds (a worker has the key, so a signed line
        can still be hostile: nested a million deep, not an object), the parent only ever sees
        a message dict or a :class:`ChannelError`."""
        try:
            envelope = json.loads(line)
            seq, body, mac = envelope["seq"], envelope["body"], envelope["mac"]
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise ChannelError(f"malformed line on the result channel: {line[:80]!r}") from exc
        if not isinstance(body, str) or not isinstance(mac, str):
            raise ChannelError("malformed envelope on the result channel")
        if not hmac.compare_digest(mac, _mac(self._key, seq, body)):
            raise ChannelError("a message on the result channel failed authentication")
        if seq != self._seq:
            raise ChannelError(f"message {seq} arrived where {self._seq} was due (replayed or dropped)")
        self._seq += 1
        try:
            message = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise ChannelError(f"a malformed message on the result channel: {body[:80]!r}") from exc
        if not isinstance(message, dict):
            raise ChannelError(f"a message on the result channel is not an object: {body[:80]!r}")
        return message
