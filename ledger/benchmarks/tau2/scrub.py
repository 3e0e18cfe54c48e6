"""`tau2_scrub`: a copy of a results file with every credential removed, so it
can be shared. Streaming (event in, text out), so a file of any size passes
in bounded memory; numbers are copied as written (ijson's Decimal)."""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, TextIO

import ijson

from kernel.redact import REDACTED, SECRET_VALUES, is_secret_key
from ledger.benchmarks.errors import LedgerInputError
from ledger.benchmarks.tau2.progress import MeteredFile, bar_stream
from ledger.benchmarks.tau2.results import json_error

_FLUSH_AT = 1 << 20
# Headers whose value differs from run to run by design, not by configuration: the kit sends each
# run's name as x-marina-session. The copy holds PER_RUN instead, so τ²'s submission check, which
# wants one agent configuration (the same llm_args) in every domain's file, sees one.
_PER_RUN_KEYS = {"x-marina-session"}
PER_RUN = "[per run]"


@dataclass
class ScrubResult:
    source: Path
    out: Path
    keys_redacted: int  # credential-named keys whose value was replaced
    strings_redacted: int  # other strings in which a key-shaped value was masked


def default_out(path: Path) -> Path:
    name = path.name[: -len(".json")] if path.name.endswith(".json") else path.name
    return path.with_name(f"{name}.scrubbed.json")


def scrub(path: str | Path, out: str | Path | None = None, *, progress: bool | None = None) -> ScrubResult:
    """Copy `path` to `out` (default `<name>.scrubbed.json` beside it) with the
    value of every credential-named key replaced by "[redacted]" and key-shaped
    strings (`sk-…`, `Bearer …`) masked wherever they appear. The keys stay,
    so τ² can still read the copy. The copy appears only when complete."""
    path = Path(path)
    target = Path(out) if out else default_out(path)
    if target.resolve() == path.resolve():
        raise LedgerInputError(path, "the scrubbed copy must not overwrite the original")
    try:
        raw = open(path, "rb")
    except OSError as exc:
        raise LedgerInputError(path, f"cannot read: {exc.strerror}") from None
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    except OSError as exc:
        raw.close()
        raise LedgerInputError(target, f"cannot write: {exc.strerror}") from None
    try:
        with raw, os.fdopen(fd, "w", encoding="utf-8") as sink:
            metered = MeteredFile(raw, total=os.fstat(raw.fileno()).st_size, label=f"scrubbing {path.name}",
                                  stream=bar_stream(progress))  # fmt: skip
            writer = _Writer(sink)
            try:
                writer.copy(ijson.parse(metered))
            except ijson.JSONError as exc:
                problem = json_error(exc, started=writer.started, offset=metered.bytes_read)
                raise LedgerInputError(path, problem) from None
            finally:
                metered.close_bar()
            writer.flush()
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return ScrubResult(path, target, writer.keys_redacted, writer.strings_redacted)


class _Writer:
    def __init__(self, sink: TextIO) -> None:
        self.sink = sink
        self.parts: list[str] = []
        self.size = 0
        self.keys_redacted = 0
        self.strings_redacted = 0
        self._secret_names: dict[str, bool] = {}
        self.started = False

    def put(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)
        if self.size >= _FLUSH_AT:
            self.flush()

    def flush(self) -> None:
        self.sink.write("".join(self.parts))
        self.parts.clear()
        self.size = 0

    def scalar(self, event: str, value: Any) -> str:
        if event == "string":
            masked, n = SECRET_VALUES.subn(REDACTED, value)
            self.strings_redacted += 1 if n else 0
            return json.dumps(masked, ensure_ascii=False)
        if event == "number":
            return str(value) if isinstance(value, (int, Decimal)) else repr(value)
        if event == "boolean":
            return "true" if value else "false"
        return "null"

    def copy(self, events: Any) -> None:
        # One count per open container: how many members were written, so
        # commas go where they belong. `skip` > 0 while dropping a secret's value.
        counts: list[int] = []
        after_key = False
        skip = 0
        for _prefix, event, value in events:
            self.started = True
            if skip:
                if event in ("start_map", "start_array"):
                    skip += 1
                elif event in ("end_map", "end_array"):
                    skip -= 1
                if skip == 1:  # the secret's whole value has passed
                    skip = 0
                    after_key = False
                continue
            if event == "map_key":
                self.put("," if counts[-1] else "")
                counts[-1] += 1
                self.put(json.dumps(value, ensure_ascii=False) + ":")
                secret = self._secret_names.get(value)
                if secret is None:
                    secret = self._secret_names[value] = is_secret_key(value)
                if secret:
                    self.put(json.dumps(REDACTED))
                    self.keys_redacted += 1
                    skip = 1
                elif value.lower() in _PER_RUN_KEYS:
                    self.put(json.dumps(PER_RUN))
                    skip = 1
                else:
                    after_key = True
                continue
            if event in ("end_map", "end_array"):
                counts.pop()
                self.put("}" if event == "end_map" else "]")
                continue
            if not after_key and counts:  # an array member
                self.put("," if counts[-1] else "")
                counts[-1] += 1
            after_key = False
            if event == "start_map":
                counts.append(0)
                self.put("{")
            elif event == "start_array":
                counts.append(0)
                self.put("[")
            else:
                self.put(self.scalar(event, value))
