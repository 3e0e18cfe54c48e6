"""A binary file wrapper for the streaming parser: it hashes every byte it
hands out (SHA-256 of the file, for idempotent imports, in the same single
read) and draws a small progress bar on a terminal.

Hand-written rather than tqdm: one line of output is all it needs, and it
keeps the dependency list short."""
from __future__ import annotations

import hashlib
import sys
import time
from typing import BinaryIO, TextIO

_BAR = 30
_EVERY_S = 0.2  # redraw at most five times a second


def bar(share: float) -> str:
    """`[#########.....................]`: `share` (0 to 1) of the bar filled."""
    filled = int(share * _BAR)
    return f"[{'#' * filled}{'.' * (_BAR - filled)}]"


class MeteredFile:
    """Read-through wrapper: `read(n)` as the wrapped file, plus `sha256`,
    `bytes_read`, and an optional bar on `stream`."""

    def __init__(self, raw: BinaryIO, *, total: int, label: str, stream: TextIO | None) -> None:
        self._raw = raw
        self._hash = hashlib.sha256()
        self.total = total
        self.bytes_read = 0
        self._label = label
        self._stream = stream
        self._drawn_at = 0.0
        self._started = time.monotonic()

    def read(self, size: int = -1) -> bytes:
        chunk = self._raw.read(size)
        self._hash.update(chunk)
        self.bytes_read += len(chunk)
        if self._stream is not None:
            now = time.monotonic()
            if now - self._drawn_at >= _EVERY_S or not chunk:
                self._drawn_at = now
                self._draw(now)
        return chunk

    @property
    def sha256(self) -> str:
        return self._hash.hexdigest()

    def _draw(self, now: float) -> None:
        assert self._stream is not None
        share = self.bytes_read / self.total if self.total else 1.0
        mb = 1024 * 1024
        self._stream.write(
            f"\r{self._label} {bar(share)} {share:4.0%} "
            f"{self.bytes_read / mb:,.0f}/{self.total / mb:,.0f} MB {now - self._started:.0f}s"
        )
        self._stream.flush()

    def close_bar(self) -> None:
        if self._stream is not None:
            self._draw(time.monotonic())
            self._stream.write("\n")
            self._stream.flush()


def bar_stream(progress: bool | None) -> TextIO | None:
    """Where to draw: stderr when asked, or by default when stderr is a terminal."""
    if progress is None:
        progress = sys.stderr.isatty()
    return sys.stderr if progress else None
