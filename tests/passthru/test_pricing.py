"""Pricing: the provider's reported cost, else genai-prices; misses remembered
until the price data changes."""
from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Iterator
from decimal import Decimal

import pytest
from genai_prices import Usage as PriceUsage
from genai_prices import calc_price, types
from genai_prices.data_snapshot import DataSnapshot, get_snapshot, set_custom_snapshot

from passthru import pricing
from passthru.pricing import SOURCE_NONE, SOURCE_PRICE_TABLE, SOURCE_PROVIDER, Usage, price


@pytest.fixture
def bundled() -> Iterator[DataSnapshot]:
    snapshot = get_snapshot()
    yield snapshot
    set_custom_snapshot(None)


def priced(model: str, provider: str = "openai", reported: dict[str, object] | None = None) -> Usage:
    usage = Usage(prompt_tokens=1000, completion_tokens=100)
    price(usage, provider=provider, upstream_model=model, reported=reported)
    return usage


def test_reported_cost_wins_over_the_table() -> None:
    usage = priced("gpt-4.1-mini", reported={"cost": "0.0125"})
    assert (usage.cost_nanousd, usage.cost_source) == (12_500_000, SOURCE_PROVIDER)


def test_a_known_model_is_priced_from_the_table() -> None:
    usage = priced("gpt-4.1-mini")
    assert usage.cost_source == SOURCE_PRICE_TABLE and usage.cost_nanousd and usage.cost_nanousd > 0


def test_an_unknown_model_stays_unpriced_and_the_miss_is_remembered(monkeypatch: pytest.MonkeyPatch) -> None:
    usage = priced("my-local-llama-unknown-1")
    assert (usage.cost_nanousd, usage.cost_source) == (None, SOURCE_NONE)
    assert ("openai", "my-local-llama-unknown-1") in pricing.unpriced

    # The second call does not look it up again.
    def no_lookup(*args: object, **kwargs: object) -> None:
        raise AssertionError("looked up a remembered miss")

    monkeypatch.setattr(pricing, "table_price", no_lookup)
    again = priced("my-local-llama-unknown-1")
    assert (again.cost_nanousd, again.cost_source) == (None, SOURCE_NONE)


@pytest.mark.parametrize("resolved_once", [True, False], ids=["units-resolved-once", "calc_price-whole"])
def test_usage_the_tables_refuse_leaves_that_call_unpriced_not_the_model(monkeypatch: pytest.MonkeyPatch, resolved_once: bool) -> None:
    monkeypatch.setattr(pricing, "RESOLVED_ONCE", resolved_once)
    odd = Usage(prompt_tokens=10, completion_tokens=1, cached_tokens=11)  # more cached than input: genai-prices refuses it
    price(odd, provider="openai", upstream_model="gpt-4.1-mini", reported=None)
    assert (odd.cost_nanousd, odd.cost_source) == (None, SOURCE_NONE)
    assert ("openai", "gpt-4.1-mini") not in pricing.unpriced
    after = priced("gpt-4.1-mini")
    assert after.cost_source == SOURCE_PRICE_TABLE and after.cost_nanousd and after.cost_nanousd > 0


def test_new_price_data_forgets_the_misses(bundled: DataSnapshot) -> None:
    assert priced("brand-new-model-x").cost_source == SOURCE_NONE
    # genai-prices' auto-update swaps in a new snapshot; here one that knows the model.
    providers = []
    for provider in bundled.providers:
        if provider.id == "openai":
            known = next(m for m in provider.models if m.id == "gpt-4.1-mini")
            new = dataclasses.replace(known, id="brand-new-model-x", match=types.ClauseEquals(equals="brand-new-model-x"))
            provider = dataclasses.replace(provider, models=[*provider.models, new])
        providers.append(provider)
    set_custom_snapshot(DataSnapshot(providers=providers, from_auto_update=False))

    usage = priced("brand-new-model-x")
    assert usage.cost_source == SOURCE_PRICE_TABLE
    assert usage.cost_nanousd == priced("gpt-4.1-mini").cost_nanousd


def test_the_memory_of_misses_is_bounded() -> None:
    misses = pricing._Misses(size=3)
    for n in range(5):
        misses.add(("p", f"m{n}"))
    assert ("p", "m0") not in misses and ("p", "m1") not in misses
    assert all(("p", f"m{n}") in misses for n in (2, 3, 4))


@pytest.mark.parametrize(
    ("cost", "believed"),
    [(0, True), ("0.0125", True), (100_000, True), (-5, False), (float("nan"), False), (float("inf"), False),
     (1e12, False), ("1e30", False), ("lots", False), (True, False), ({"usd": 1}, False)],
)  # fmt: skip
def test_a_cost_no_provider_should_send_is_priced_from_the_table_and_named(cost, believed) -> None:
    usage = priced("gpt-4.1-mini", reported={"cost": cost})
    listed = priced("gpt-4.1-mini")
    if believed:
        assert usage.cost_source == SOURCE_PROVIDER and usage.rejected == []
    else:
        assert (usage.cost_nanousd, usage.cost_source, usage.rejected) == (listed.cost_nanousd, SOURCE_PRICE_TABLE, ["cost"])


@pytest.mark.parametrize("count", [-1, 10**10 + 1, 10**30, float("nan"), float("-inf")])
def test_a_token_count_no_provider_should_send_is_unknown_and_leaves_the_call_unpriced(count) -> None:
    usage = Usage(prompt_tokens=1000, completion_tokens=pricing.reported_tokens(count), cached_tokens=10)
    price(usage, provider="openai", upstream_model="gpt-4.1-mini", reported={})
    assert (usage.completion_tokens, usage.prompt_tokens, usage.cached_tokens) == (0, 1000, 10)
    assert (usage.cost_nanousd, usage.cost_source, usage.rejected) == (None, SOURCE_NONE, ["completion_tokens"])
    # A cost the provider reported and that is believable still stands.
    reported = Usage(completion_tokens=pricing.reported_tokens(count))
    price(reported, provider="openai", upstream_model="gpt-4.1-mini", reported={"cost": 0.5})
    assert (reported.cost_nanousd, reported.cost_source, reported.rejected) == (500_000_000, SOURCE_PROVIDER, ["completion_tokens"])


def test_whole_float_counts_are_read_and_a_formations_sum_keeps_what_was_rejected() -> None:
    assert pricing.reported_tokens(12.0) == 12 and pricing.reported_tokens("12") == 0 and pricing.reported_tokens(None) == 0
    total, bad = Usage(), Usage(cost_nanousd=5, rejected=["cost"])
    total.add(bad)
    total.add(Usage(cost_nanousd=1, rejected=["cost", "prompt_tokens"]))
    assert total.rejected == ["cost", "prompt_tokens"] and total.cost_nanousd == 6


# Usage shapes as price() hands them to the tables: (prompt, cached, cache writes or None, completion).
SHAPES = [
    (1000, 0, None, 100),
    (0, 0, None, 0),
    (123_457, 100_000, None, 7),  # mostly cached
    (900, 900, None, 33),  # all cached
    (250_001, 1_000, 5_000, 4_096),  # past the usual 200k tier; cache writes priced
    (5_000, 0, 5_000, 1),  # all written to the cache
    (10, 11, None, 1),  # more cached than sent: the tables refuse it
    (1_000_000, 0, 0, 1_000_000),
]


def _genai_total(shape: tuple[int, int, int | None, int], provider: str, model: str) -> object:
    prompt, cached, written, completion = shape
    usage = PriceUsage(input_tokens=prompt, cache_read_tokens=cached, cache_write_tokens=written, output_tokens=completion)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return calc_price(usage, model_ref=model, provider_id=provider).total_price
    except (LookupError, ValueError) as e:
        return type(e)


def _table_total(shape: tuple[int, int, int | None, int], provider: str, model: str) -> object:
    prompt, cached, written, completion = shape
    # As pricing.price hands them over: no cache writes priced apart is none written.
    tokens = {"input_tokens": prompt, "cache_read_tokens": cached, "cache_write_tokens": written or 0, "output_tokens": completion}
    try:
        return pricing.table_price(tokens, provider=provider, model_ref=model)
    except (LookupError, ValueError) as e:
        return type(e)


def test_every_model_is_priced_exactly_as_genai_prices_prices_it(bundled: DataSnapshot) -> None:
    """The units laid out once per model price (pricing._Layout) give calc_price's
    total to the last digit, for every model of the snapshot, each usage shape
    twice (the second from what was kept), or the same refusal."""
    compared = priced_models = 0
    for provider in bundled.providers:
        for model in provider.models:
            for shape in SHAPES:
                expected = _genai_total(shape, provider.id, model.id)
                for _ in range(2):
                    got = _table_total(shape, provider.id, model.id)
                    assert got == expected and type(got) is type(expected), (provider.id, model.id, shape)
                compared += 1
                priced_models += isinstance(expected, Decimal) and expected > 0
    assert compared == len(SHAPES) * sum(len(p.models) for p in bundled.providers)
    assert priced_models > 1000  # the tables priced most of them, so the sums were compared, not only refusals


@pytest.fixture
def inferred(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The usages genai-prices' own inference was asked to count (the layout stepping aside)."""
    asked: list[object] = []
    infer = types._compute_registry_priced_counts

    def counted(rates: object, usage: PriceUsage) -> object:
        asked.append(usage)
        return infer(rates, usage)  # type: ignore[arg-type]

    monkeypatch.setattr(pricing, "_compute_registry_priced_counts", counted)
    return asked


def test_counts_other_than_those_price_gives_are_left_to_genai_prices(bundled: DataSnapshot, inferred: list[object]) -> None:
    """Given fewer counts than `price` gives, the layout steps aside and
    genai-prices infers the rest, with calc_price's totals."""
    models = [(p.id, m.id) for p in bundled.providers for m in p.models][::7]
    priced_models = 0
    for provider, model in models:
        expected = _genai_total((2_000, 0, None, 30), provider, model)
        try:
            got: object = pricing.table_price({"input_tokens": 2_000, "output_tokens": 30}, provider=provider, model_ref=model)
        except (LookupError, ValueError) as e:
            got = type(e)
        assert got == expected, (provider, model)
        priced_models += isinstance(expected, Decimal) and expected > 0
    assert priced_models > 100 and len(inferred) >= priced_models


def test_a_models_units_are_resolved_once_per_model_price(monkeypatch: pytest.MonkeyPatch) -> None:
    resolved: list[object] = []
    collect = types._collect_resolved_model_prices

    def counted(model_price: types.ModelPrice, registry: object) -> object:
        resolved.append(model_price)
        return collect(model_price, registry)  # type: ignore[arg-type]

    monkeypatch.setattr(pricing, "_collect_resolved_model_prices", counted)
    monkeypatch.setattr(pricing, "rates", pricing._Rates())  # nothing kept yet
    first, second = priced("gpt-4.1-mini"), priced("gpt-4.1-mini", provider="openai")
    assert first.cost_nanousd == second.cost_nanousd and first.cost_nanousd
    assert len(resolved) == 1


def test_new_price_data_forgets_the_resolved_units_and_prices_with_the_new(bundled: DataSnapshot) -> None:
    before = priced("gpt-4.1-mini")
    providers = []
    for provider in bundled.providers:
        if provider.id == "openai":
            models = []
            for model in provider.models:
                if model.id == "gpt-4.1-mini":
                    model = dataclasses.replace(model, prices=types.ModelPrice(input_mtok=Decimal(4), output_mtok=Decimal(16)))
                models.append(model)
            provider = dataclasses.replace(provider, models=models)
        providers.append(provider)
    set_custom_snapshot(DataSnapshot(providers=providers, from_auto_update=False))

    after = priced("gpt-4.1-mini")  # 1000 prompt tokens at $4/M and 100 completion tokens at $16/M
    assert after.cost_nanousd == 5_600_000 != before.cost_nanousd
    kept = list(pricing.rates._resolved.values())
    assert len(kept) == 1 and kept[0][0] is get_snapshot().find_provider_model("gpt-4.1-mini", None, "openai", None)[1].prices


def test_a_genai_prices_without_the_steps_table_price_uses_prices_with_calc_price(monkeypatch: pytest.MonkeyPatch) -> None:
    """requirements.txt bounds genai-prices from below only: a release whose
    ModelPrice internals moved (RESOLVED_ONCE false at import) still prices."""
    expected = priced("gpt-4.1-mini").cost_nanousd
    monkeypatch.setattr(pricing, "RESOLVED_ONCE", False)
    monkeypatch.setattr(pricing, "_compute_registry_priced_counts", None)
    monkeypatch.setattr(pricing, "rates", None)
    again = priced("gpt-4.1-mini")
    assert (again.cost_nanousd, again.cost_source) == (expected, SOURCE_PRICE_TABLE) and expected


def test_a_model_whose_unreported_counts_genai_prices_might_refuse_is_priced_by_genai_prices(
    monkeypatch: pytest.MonkeyPatch, inferred: list[object]
) -> None:
    """Where genai-prices would refuse to infer a priced count Marina never
    reports (no such unit in today's registry), the layout is not used."""
    refused: list[str] = []

    class Refusing(PriceUsage):
        def __getattr__(self, name: str) -> int | float | Decimal:
            if name == "web_searches":  # priced for gpt-4.1-mini, never reported
                refused.append(name)
                raise ValueError("Missing usage for web_searches")
            return super().__getattr__(name)

    monkeypatch.setattr(pricing, "_PriceUsage", Refusing)
    monkeypatch.setattr(pricing, "rates", pricing._Rates())  # nothing kept yet
    with pytest.raises(ValueError):  # genai-prices' own inference, refusing as told
        pricing.table_price(
            {"input_tokens": 10, "cache_read_tokens": 0, "cache_write_tokens": 0, "output_tokens": 1},
            provider="openai", model_ref="gpt-4.1-mini",
        )
    assert refused and inferred
