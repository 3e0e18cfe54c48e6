"""What one upstream call cost, and where that figure came from.

The provider's own `usage.cost` wins (OpenRouter reports it). Otherwise the
tokens are priced with genai-prices, pydantic's maintained price tables: they
ship inside the package (no network at run time), know cached-input rates and
are updated with each release. An unknown model stays unpriced (None): never a
made-up zero.

Usage is sanitised here, the one place every door reads it (`reported_tokens`
for the counts, `price` for the whole): a count or cost no provider should
send (negative, not finite, past TOKENS_LIMIT or COST_LIMIT_NANOUSD) is
recorded as unknown (a count as 0, a cost from the price table where the
counts allow, else none), named in the span's detail (`usage_rejected`) and
counted (marina_usage_rejected_total). So it never lowers a total, never
turns an answered call into an error, and never makes a row the database
refuses (a cost of -5 once took today's total to -$23; NaN answered 500
after the provider had billed; 10^30 tokens left no trace)."""
from __future__ import annotations

import math
import threading
import warnings
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from genai_prices import Usage as _PriceUsage
from genai_prices import calc_price
from genai_prices.data_snapshot import get_snapshot

try:
    # The steps of genai-prices' ModelPrice.calc_price (0.2.x), for table_price.
    # requirements.txt bounds genai-prices from below only: a release that moves
    # them prices with calc_price whole, as before.
    from genai_prices.decompose import is_descendant_or_self
    from genai_prices.types import (
        ModelPrice,
        TieredPrices,
        _collect_resolved_model_prices,
        _compute_registry_priced_counts,
        calc_unit_price,
    )
    from genai_prices.units import _get_registry
    from genai_prices.validation import validate_priced_units

    RESOLVED_ONCE = True
except ImportError:
    RESOLVED_ONCE = False

from kernel.money import MoneyError, to_nanousd

# Cost sources stored with every call.
SOURCE_PROVIDER = "provider"
SOURCE_PRICE_TABLE = "price_table"
SOURCE_NONE = "none"

# Past these a reported figure is not believed (and would overflow the
# ledger's 64-bit sums): ten billion tokens, or $100,000, for one call.
TOKENS_LIMIT = 10**10
COST_LIMIT_NANOUSD = 100_000 * 10**9
# The counts `price` gives the tables for every call (genai-prices' usage keys).
REPORTED = frozenset({"input_tokens", "cache_read_tokens", "cache_write_tokens", "output_tokens"})
TOKEN_FIELDS = ("prompt_tokens", "completion_tokens", "cached_tokens", "reasoning_tokens", "cache_write_tokens")


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int = 0
    cache_write_tokens: int = 0  # prompt tokens written to the provider's cache (reported, not priced)
    cost_nanousd: int | None = None
    cost_source: str = SOURCE_NONE
    rejected: list[str] = field(default_factory=list)  # reported figures not believed (recorded as unknown)

    def add(self, other: Usage) -> None:
        """Sum another call into this one (formations report the total)."""
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens
        self.cached_tokens += other.cached_tokens
        self.reasoning_tokens += other.reasoning_tokens
        self.cache_write_tokens += other.cache_write_tokens
        self.rejected += [name for name in other.rejected if name not in self.rejected]
        if other.cost_nanousd is not None:
            self.cost_nanousd = (self.cost_nanousd or 0) + other.cost_nanousd
            if self.cost_source == SOURCE_NONE:
                self.cost_source = other.cost_source

    def as_payload(self) -> dict[str, Any]:
        """The OpenAI `usage` object a formation reports for the sum of its calls."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": self.reasoning_tokens},
        }


def sum_headers(usage: Usage, unpriced: int) -> dict[str, str]:
    """A summed reply's optional headers: how many answered calls had no price, and cache reads."""
    headers: dict[str, str] = {}
    if unpriced:
        headers["x-marina-cost-unpriced-calls"] = str(unpriced)
    if usage.cached_tokens:
        headers["x-marina-cache-read-tokens"] = str(usage.cached_tokens)
    return headers


def reported_tokens(value: Any) -> int:
    """A token count as a provider reported it: an integer (a whole float too),
    any sign and size, for `price` to judge; -1 for a number that is not
    finite; 0 for anything else (absent, a string)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value) if math.isfinite(value) else -1
    return 0



def usage_from(payload: dict[str, Any] | None) -> Usage | None:
    """Token counts from an OpenAI-shaped `usage` object (None if absent)."""
    if not isinstance(payload, dict):
        return None
    prompt_details = payload.get("prompt_tokens_details") or {}
    completion_details = payload.get("completion_tokens_details") or {}
    if not isinstance(prompt_details, dict):
        prompt_details = {}
    # Cache reads and writes in the dialects providers use: OpenAI's
    # prompt_tokens_details.cached_tokens, OpenRouter's …cache_write_tokens,
    # Anthropic's cache_read_input_tokens / cache_creation_input_tokens.
    cached = reported_tokens(prompt_details.get("cached_tokens")) or reported_tokens(payload.get("cache_read_input_tokens"))
    written = reported_tokens(prompt_details.get("cache_write_tokens")) or reported_tokens(payload.get("cache_creation_input_tokens"))
    return Usage(
        prompt_tokens=reported_tokens(payload.get("prompt_tokens")),
        completion_tokens=reported_tokens(payload.get("completion_tokens")),
        cached_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=(
            reported_tokens(completion_details.get("reasoning_tokens")) if isinstance(completion_details, dict) else 0
        ),
    )


class _Misses:
    """(provider, model) pairs the price tables do not know, remembered.

    genai-prices remembers the models it found but not the ones it did not:
    each miss scans the provider's whole model list again (measured 0.3 ms a
    call here, about 1.2 ms at c=1 through the server), and every local model
    (vLLM, llama.cpp) and every new id is a miss on every call. Bounded (least
    recently used out first), and forgotten as a whole when genai-prices swaps
    in new price data (its auto-update replaces the snapshot object)."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        self._pairs: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._snapshot: object = None
        self._lock = threading.Lock()  # the writer thread and the event loop both price

    def _current(self) -> None:
        snapshot = get_snapshot()
        if snapshot is not self._snapshot:
            self._pairs.clear()
            self._snapshot = snapshot

    def __contains__(self, pair: tuple[str, str]) -> bool:
        with self._lock:
            self._current()
            if pair in self._pairs:
                self._pairs.move_to_end(pair)
                return True
            return False

    def add(self, pair: tuple[str, str]) -> None:
        with self._lock:
            self._current()
            self._pairs[pair] = None
            if len(self._pairs) > self._size:
                self._pairs.popitem(last=False)


unpriced = _Misses()


class _Rates:
    """Each model price's priced units, resolved, checked and laid out once.

    genai-prices' `ModelPrice.calc_price` resolves the model's prices against
    its unit registry, validates their coverage and works out which priced
    unit lies inside which (cached input inside input, say) on every call; all
    three depend on the model price and the registry alone. Kept here,
    `price` takes 16 µs a call instead of 143 (gpt-4.1-mini; docs/performance.md,
    issue 45): one entry per model price object of the current snapshot (so
    bounded by it), forgotten when genai-prices swaps in new price data. The
    per-call part is the call's counts less the counts inside them, and
    genai-prices' `calc_unit_price` on each, so `table_price` is
    `calc_price(...).total_price` to the last digit
    (tests/passthru/test_pricing.py checks every model of the snapshot over
    several usage shapes)."""

    def __init__(self) -> None:
        self._resolved: dict[int, tuple[ModelPrice, _Layout]] = {}
        self._snapshot: object = None
        self._lock = threading.Lock()

    def of(self, snapshot: object, model_price: ModelPrice) -> _Layout:
        with self._lock:
            if snapshot is not self._snapshot:
                self._resolved.clear()
                self._snapshot = snapshot
            entry = self._resolved.get(id(model_price))
        if entry is None or entry[0] is not model_price:
            entry = (model_price, _Layout.of(model_price))
            with self._lock:
                if snapshot is self._snapshot:
                    self._resolved[id(model_price)] = entry
        return entry[1]


@dataclass(frozen=True)
class _Layout:
    """A model price's units as genai-prices prices them.

    `rates`: its (unit, price) pairs; `tiered`: whether a price depends on the
    input tokens; `leaves`: each priced count (all but `requests`) in the
    order genai-prices' `compute_leaf_values` takes them, the most specific
    first, with the positions of the counts inside it, which it subtracts."""

    rates: tuple[Any, ...]
    tiered: bool
    leaves: tuple[tuple[str, tuple[int, ...]], ...]
    per_request: bool
    # Priced counts a call never reports (web searches, audio tokens), which
    # genai-prices infers as 0 whatever the call's token counts; when it might
    # refuse instead, the layout is not used (`counts` answers None).
    never_reported: frozenset[str]
    exact: bool

    @classmethod
    def of(cls, model_price: ModelPrice) -> _Layout:
        registry = _get_registry()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a price key the registry does not know is left out, as calc_price does
            rates = tuple(_collect_resolved_model_prices(model_price, registry))
        validate_priced_units(tuple(unit for unit, _ in rates), registry)  # ValueError: unpriced
        counted = {unit.usage_key: unit for unit, _ in rates if unit.usage_key != "requests"}
        order = sorted(counted.values(), key=lambda unit: (-len(unit.dimensions), unit.usage_key))
        leaves = tuple(
            (unit.usage_key, tuple(i for i, inner in enumerate(order) if inner is not unit and is_descendant_or_self(unit, inner)))
            for unit in order
        )
        # genai-prices infers a count no call reports from those reported above
        # zero; with every count Marina reports above zero, what it infers (0,
        # or a refusal) holds for any call with fewer (its checks only add up
        # reported counts).
        probe = _PriceUsage(**dict.fromkeys(REPORTED, 1))
        never = frozenset(counted) - REPORTED
        try:
            exact = all(getattr(probe, key) == 0 for key in never)
        except ValueError:
            exact = False
        return cls(
            rates=rates,
            tiered=any(isinstance(rate, TieredPrices) for _, rate in rates),
            leaves=leaves,
            per_request=any(unit.usage_key == "requests" for unit, _ in rates),
            never_reported=never,
            exact=exact,
        )

    def counts(self, tokens: dict[str, int]) -> dict[str, int] | None:
        """What each priced unit counts for this call (`compute_leaf_values`'
        subtraction); None when genai-prices' own inference is needed (the
        call has other counts than REPORTED, or the layout is not exact)."""
        if not self.exact or tokens.keys() != REPORTED:
            return None
        counts: dict[str, int] = {}
        leaf: list[int] = []
        for key, inner in self.leaves:
            value = 0 if key in self.never_reported else tokens[key]
            value -= sum(leaf[i] for i in inner)
            if value < 0:
                raise ValueError(f"Invalid usage data: the counts inside {key} exceed it")
            leaf.append(value)
            counts[key] = value
        if self.per_request:
            counts["requests"] = 1
        return counts


rates = _Rates()


def table_price(tokens: dict[str, int], *, provider: str, model_ref: str) -> Decimal:
    """What genai-prices' `calc_price(Usage(**tokens), model_ref, provider_id=provider).total_price`
    gives, with the model's units laid out once (`_Rates`). `tokens`: genai-prices'
    usage keys (input_tokens, cache_read_tokens, ...) and their counts, none negative.
    LookupError for a model the tables do not know, ValueError for usage or prices
    they refuse. (`ModelInfo.calc_price`'s one adjustment, Groq Whisper's billed
    seconds, concerns audio seconds: Marina reports none.)"""
    if not RESOLVED_ONCE:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return calc_price(_PriceUsage(**tokens), model_ref=model_ref, provider_id=provider).total_price
    snapshot = get_snapshot()
    _, model = snapshot.find_provider_model(model_ref, None, provider, None)
    layout = rates.of(snapshot, model.get_prices(datetime.now(tz=UTC)))
    counts: Mapping[str, Any] | None = layout.counts(tokens)
    if counts is None:
        counts = _compute_registry_priced_counts(layout.rates, _PriceUsage(**tokens))
    input_tokens = tokens.get("input_tokens", 0) if layout.tiered else 0
    return sum(
        (calc_unit_price(rate, counts[unit.usage_key], input_tokens, unit.per) for unit, rate in layout.rates),
        Decimal(0),
    )


def price(
    usage: Usage, *, provider: str, upstream_model: str, reported: dict[str, Any] | None, cache_writes: bool = False
) -> None:
    """Fill usage.cost_nanousd and cost_source in place. `cache_writes`: price
    usage.cache_write_tokens at the model's cache-write rate (Anthropic's
    Messages API reports them apart; elsewhere they stay at the input rate).
    Figures no provider should send are recorded as unknown (the module's docstring)."""
    _sanitise_tokens(usage)
    cost = (reported or {}).get("cost")
    if cost is not None:
        provider_cost = _reported_cost(cost)
        if provider_cost is not None:
            usage.cost_nanousd, usage.cost_source = provider_cost, SOURCE_PROVIDER
            return
        usage.rejected.append("cost")
    if any(name != "cost" for name in usage.rejected):
        usage.cost_nanousd, usage.cost_source = None, SOURCE_NONE  # a count unknown: no price from the rest
        return
    pair = (provider, upstream_model)
    if pair in unpriced:
        usage.cost_nanousd, usage.cost_source = None, SOURCE_NONE
        return
    try:
        # OpenAI counts cached and reasoning tokens inside prompt/completion
        # tokens; genai-prices' input/output tokens are the same totals.
        tokens = {
            "input_tokens": usage.prompt_tokens,
            "cache_read_tokens": usage.cached_tokens,
            # Not priced apart, cache writes are input tokens at the input rate:
            # none written, as genai-prices counts a cache write it is not told of.
            "cache_write_tokens": usage.cache_write_tokens if cache_writes else 0,
            "output_tokens": usage.completion_tokens,
        }
        total = table_price(tokens, provider=provider, model_ref=upstream_model)
    except LookupError:  # a model the tables do not know: remembered
        unpriced.add(pair)
        usage.cost_nanousd, usage.cost_source = None, SOURCE_NONE
        return
    except ValueError:
        # Figures genai-prices refuses (more cached tokens than input tokens, say): this
        # call is unpriced, not the model; remembered, one odd reply would leave every
        # later call to it unpriced until the price data changed.
        usage.cost_nanousd, usage.cost_source = None, SOURCE_NONE
        return
    usage.cost_nanousd = to_nanousd(total)
    usage.cost_source = SOURCE_PRICE_TABLE


def _sanitise_tokens(usage: Usage) -> None:
    for name in TOKEN_FIELDS:
        if not 0 <= getattr(usage, name) <= TOKENS_LIMIT:
            setattr(usage, name, 0)
            if name not in usage.rejected:
                usage.rejected.append(name)


def _reported_cost(cost: Any) -> int | None:
    """The provider's cost in nano-dollars, or None if it is not a believable one."""
    if isinstance(cost, bool) or not isinstance(cost, (int, float, str)):
        return None
    try:
        nanousd = to_nanousd(Decimal(str(cost)))
    except (MoneyError, InvalidOperation):
        return None
    return nanousd if 0 <= nanousd <= COST_LIMIT_NANOUSD else None
