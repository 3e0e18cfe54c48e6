"""The leak guard: a proposed lesson must be a general rule, not a piece of
the conversation it was learned from. Pure functions.

A proposal is refused when it holds, from that conversation (every message,
tool call and tool result, and τ²'s reward breakdown):

- an **id**: a token with a digit and a letter (`FQ8APE`, `HAT056`,
  `gift_card_8190333`, `omar_rossi_1241`) or a number of 4+ digits, that
  occurs in the conversation (tool names such as `update_reservation_flights`
  hold no digit and may be named);
- an **amount**: a number with decimals, or of 3+ digits, that occurs in the
  conversation (small whole numbers such as "24 hours" or "3 bags" are
  policy, not data, and pass);
- a **number regrouped**: 4+ digits that the conversation writes in groups
  (`4417-9921`, `4111 1111 1111 1111`), written with other separators or none
  (`44179921`): the digits of each run of digit groups are compared, not
  their spelling;
- a **date**: any date, in any order or spelling (`2024-05-25`, `05/25`,
  `May 25`, `25 May`, `the 25th of May`): a general rule names none;
- an **id written without its separators** or with others (`K1N-W8N` for the
  conversation's `K1NW8N`, `gift card 8190333`);
- an **amount in words** (`three hundred forty-eight dollars` for `348`);
- an **all-caps code** that the conversation's tool results hold (`ATL`,
  `PHL`: airports, fare classes);
- a **name**: a capitalised word the conversation uses as a name: values of
  keys ending in `name` (first_name, last_name, name, …: `Omar`, `Rossi`), and
  words written capitalised in the middle of a sentence and never in lower
  case (`Chicago`; not `Basic` where `basic economy` appears too);
- a **long verbatim span**: 8 or more consecutive words also found in a row
  in the conversation (case and punctuation ignored).

It is also refused when it is empty, shorter than 20 or longer than 300
characters.

**Ground truth, exactly.** The learner holds the answers: τ²'s expected
actions (the task's `evaluation_criteria` and the reward breakdown's
`action_checks`), what it must communicate, and the outputs of those actions
in the conversation (the tool results of calls to the expected tools). Every
identifying value among them (`ground_truth`: a string with a digit or a
capital letter — ids, names, cities, airport codes, dates — a number of two
or more digits or with decimals, and each date's other spellings: `May 25`,
`25th`, `05/25`) refuses a rule that holds it as a whole word, case ignored
(`truth_refusal`), and so do its normal forms (ledger/lessons/spellings.py):
the date in any order or spelling (`26 May` for `2024-05-26`), the number in
words, the id without separators: no guessing at what looks like data. Lower-case category
words (`economy`, `credit_card`) and small counts are policy vocabulary and
are left to the lexical checks above."""
from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ledger.lessons import spellings
from ledger.lessons.models import MAX_RULE_CHARS

MIN_RULE_CHARS = 20
SPAN_WORDS = 8

_TOKEN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*[A-Za-z0-9]|[A-Za-z0-9]")
_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")
_DATE = re.compile(
    r"\b\d{4}-\d{1,2}-\d{1,2}\b|\b\d{1,2}/\d{1,2}(?:/\d{2,4})?\b|"
    r"\b(?:jan|feb|mar|apr|may|jun|jul|aug|sep|sept|oct|nov|dec)[a-z]*\.? \d{1,2}(?:st|nd|rd|th)?\b",
    re.IGNORECASE,
)
_CAPITALISED = re.compile(r"(?<=[a-z,;:] )([A-Z][a-z]+)")
_WORD = re.compile(r"[a-z0-9]+")
_DIGIT_RUN = re.compile(r"\d+(?:[ .\-/]\d+)*")  # digit groups joined by one separator each
MIN_RUN_DIGITS = 4


def _digit_runs(text: str) -> set[str]:
    """The digits of each run of digit groups ("4417-9921" -> "44179921"), 4+ digits."""
    runs = {re.sub(r"\D", "", m.group()) for m in _DIGIT_RUN.finditer(text)}
    return {r for r in runs if len(r) >= MIN_RUN_DIGITS}


def _is_id(token: str) -> bool:
    has_digit = any(c.isdigit() for c in token)
    has_alpha = any(c.isalpha() for c in token)
    if has_digit and has_alpha and len(token) >= 3:
        return True
    return token.isdigit() and len(token) >= 4


@dataclass
class Evidence:
    """What a conversation holds that a lesson must not repeat."""

    ids: set[str] = field(default_factory=set)  # lower-cased
    amounts: set[str] = field(default_factory=set)  # digits, without thousands commas
    names: set[str] = field(default_factory=set)  # values of *name keys, as written, capitalised
    capitalised: set[str] = field(default_factory=set)  # words written capitalised mid-sentence
    lower_words: set[str] = field(default_factory=set)  # every word as written in lower case
    spans: set[tuple[str, ...]] = field(default_factory=set)  # SPAN_WORDS-word runs, lower-cased
    digit_runs: set[str] = field(default_factory=set)  # the digits of each run of digit groups
    codes: set[str] = field(default_factory=set)  # all-caps words of the tool results ("ATL")

    @property
    def compact_ids(self) -> set[str]:
        """The ids without their separators ("k1n-w8n" -> "k1nw8n")."""
        return {c for c in map(spellings.compact, self.ids) if spellings.is_identifier(c)}

    def is_name(self, word: str) -> bool:
        """A *name value, or a word only ever written capitalised mid-sentence
        ("Chicago"; not "Basic" when "basic" appears too)."""
        return word in self.names or (word in self.capitalised and word.lower() not in self.lower_words)

    def add_text(self, text: str) -> None:
        for token in _TOKEN.findall(text):
            if _is_id(token):
                self.ids.add(token.lower())
        for number in _NUMBER.findall(text):
            plain = number.replace(",", "")
            if "." in plain or len(plain) >= 3:
                self.amounts.add(plain.rstrip("0").rstrip(".") if "." in plain else plain)
        self.digit_runs |= _digit_runs(text)
        self.capitalised.update(_CAPITALISED.findall(text))
        self.lower_words.update(re.findall(r"\b[a-z]+\b", text.replace("_", " ")))
        words = _WORD.findall(text.lower())
        for i in range(len(words) - SPAN_WORDS + 1):
            self.spans.add(tuple(words[i : i + SPAN_WORDS]))

    def add_value(self, value: Any, key: str = "") -> None:
        """A JSON value: its strings and numbers, and names under *name keys."""
        if isinstance(value, Mapping):
            for k, v in value.items():
                self.add_value(v, str(k))
        elif isinstance(value, list):
            for v in value:
                self.add_value(v, key)
        elif isinstance(value, str):
            if key.lower().endswith("name"):
                self.names.update(w for w in re.findall(r"[A-Z][a-z]+", value))
            if value[:1] in "{[":
                try:
                    self.add_value(json.loads(value), key)
                    return
                except ValueError:
                    pass
            self.add_text(value)
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            self.add_text(str(value))


def evidence_of(messages: Iterable[Any], breakdown: Any = None) -> Evidence:
    """The evidence of a τ² conversation (its messages as results.json stores
    them) and of its reward breakdown."""
    found = Evidence()
    for message in messages:
        found.add_value(message)
        if isinstance(message, Mapping) and message.get("role") == "tool":
            found.codes |= spellings.codes(json.dumps(message.get("content"), ensure_ascii=False))
    if breakdown is not None:
        found.add_value(breakdown)
    return found


_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")  # fmt: skip
_ISO_DATE = re.compile(r"^(\d{4})-(\d{1,2})-(\d{1,2})")


def _ordinal(day: int) -> str:
    suffix = "th" if 11 <= day % 100 <= 13 else {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")
    return f"{day}{suffix}"


def _truth_forms(value: str) -> set[str]:
    """A ground-truth string and, for a date, its other spellings."""
    forms = {value.lower()}
    date = _ISO_DATE.match(value)
    if date:
        month, day = int(date.group(2)), int(date.group(3))
        if 1 <= month <= 12:
            name = _MONTHS[month - 1]
            forms |= {f"{name} {day}", f"{name[:3]} {day}", f"{name} {_ordinal(day)}", f"{name[:3]} {_ordinal(day)}",
                      _ordinal(day), f"{month:02d}/{day:02d}", f"{month}/{day}"}  # fmt: skip
    return forms


def _truth_leaves(value: Any, out: set[str]) -> None:
    if isinstance(value, Mapping):
        for v in value.values():
            _truth_leaves(v, out)
    elif isinstance(value, list):
        for v in value:
            _truth_leaves(v, out)
    elif isinstance(value, str):
        text = value.strip()
        if text[:1] in "{[":
            try:
                _truth_leaves(json.loads(text), out)
                return
            except ValueError:
                pass
        if 2 <= len(text) <= 120 and (any(c.isdigit() for c in text) or any(c.isupper() for c in text)):
            out |= _truth_forms(text)
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        if isinstance(value, float) and not value.is_integer():
            out.add(f"{value:g}")
        elif abs(int(value)) >= 10:
            out.add(str(int(value)))


def _calls(message: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(id, tool name) of an assistant message's calls, τ²'s flat form or OpenAI's."""
    found = []
    for call in message.get("tool_calls") or ():
        if isinstance(call, Mapping):
            inner = call.get("function")
            fn: Mapping[str, Any] = inner if isinstance(inner, Mapping) else call
            found.append((str(call.get("id") or ""), str(fn.get("name") or "")))
    return found


def ground_truth(criteria: Any, breakdown: Any = None, messages: Iterable[Any] = ()) -> set[str]:
    """The identifying values of what a simulation should have done (see the
    module doc), lower-cased: the expected actions' arguments, what is to be
    communicated, and the results of the calls to the expected tools."""
    out: set[str] = set()
    expected: list[Any] = []
    for source in (criteria, breakdown):
        if not isinstance(source, Mapping):
            continue
        expected += [a for a in source.get("actions") or () if isinstance(a, Mapping)]
        expected += [c["action"] for c in source.get("action_checks") or () if isinstance(c, Mapping) and isinstance(c.get("action"), Mapping)]
        _truth_leaves(source.get("communicate_info") or [], out)
    for action in expected:
        _truth_leaves(action.get("arguments") or {}, out)
    names = {str(a.get("name")) for a in expected}
    wanted: set[str] = set()
    for message in messages:
        if not isinstance(message, Mapping):
            continue
        wanted |= {call_id for call_id, name in _calls(message) if name in names and call_id}
        if message.get("role") == "tool" and (message.get("id") in wanted or message.get("tool_call_id") in wanted):
            _truth_leaves(message.get("content"), out)
    return out


def truth_refusal(rule: str, truth: set[str]) -> str:
    """'holds a ground-truth value' when `rule` holds one of `truth` as a whole word, or in
    another spelling: a date in any order, a number in words, an id without separators."""
    text = " ".join(rule.split()).lower()
    for value in truth:
        if re.search(r"(?<![a-z0-9])" + re.escape(value) + r"(?![a-z0-9])", text):
            return "holds a ground-truth value"
    truth_dates = {d for value in truth for d in spellings.dates(value)}
    truth_numbers = {n for n in spellings.whole_numbers(truth) if n >= 10}
    truth_ids = {c for c in map(spellings.compact, truth) if spellings.is_identifier(c)}
    if (
        spellings.dates(rule) & truth_dates
        or spellings.numbers_in_words(rule) & truth_numbers
        or spellings.compact_windows(rule) & truth_ids
    ):
        return "holds a ground-truth value"
    return ""


def _names_a_date(text: str, evidence: Evidence) -> str:
    return "names a date" if _DATE.search(text) or spellings.dates(text) else ""


def _quotes_an_id(text: str, evidence: Evidence) -> str:
    as_written = any(_is_id(token) and token.lower() in evidence.ids for token in _TOKEN.findall(text))
    if as_written or spellings.compact_windows(text) & evidence.compact_ids:
        return "quotes an id from the conversation"
    return ""


def _quotes_an_amount(text: str, evidence: Evidence) -> str:
    if {str(n) for n in spellings.numbers_in_words(text) if n >= 100} & (evidence.amounts | evidence.digit_runs):
        return "quotes an amount from the conversation"  # in words
    for number in _NUMBER.findall(text):
        plain = number.replace(",", "")
        if "." in plain:
            plain = plain.rstrip("0").rstrip(".")
        if ("." in number or len(plain) >= 3) and plain in evidence.amounts:
            return "quotes an amount from the conversation"
    return ""


def _names_a_code(text: str, evidence: Evidence) -> str:
    return "names a code from the conversation's tool results" if spellings.codes(text) & evidence.codes else ""


def _quotes_a_number(text: str, evidence: Evidence) -> str:
    return "quotes a number from the conversation" if _digit_runs(text) & evidence.digit_runs else ""


def _names_a_name(text: str, evidence: Evidence) -> str:
    if any(evidence.is_name(word) for word in re.findall(r"\b[A-Z][a-z]+\b", text)):
        return "names a name from the conversation"
    return ""


def _repeats_a_span(text: str, evidence: Evidence) -> str:
    words = _WORD.findall(text.lower())
    for i in range(len(words) - SPAN_WORDS + 1):
        if tuple(words[i : i + SPAN_WORDS]) in evidence.spans:
            return f"repeats {SPAN_WORDS}+ words of the conversation verbatim"
    return ""


# In the order a refusal names them: the first that holds is the reason.
_CHECKS = (_names_a_date, _quotes_an_id, _quotes_an_amount, _names_a_code, _quotes_a_number, _names_a_name, _repeats_a_span)


def refusal(rule: str, evidence: Evidence) -> str:
    """Why `rule` may not be kept ('' when it may)."""
    text = " ".join(rule.split())
    if len(text) < MIN_RULE_CHARS:
        return "too short"
    if len(text) > MAX_RULE_CHARS:
        return f"longer than {MAX_RULE_CHARS} characters"
    return next((why for why in (check(text, evidence) for check in _CHECKS) if why), "")
