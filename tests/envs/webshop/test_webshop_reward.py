"""WebShop's score on hand-worked cases (each expected value is worked out in the comment above it).

The default mode is upstream's ``get_reward``; the ``legacy`` cases pin envkit's earlier score. Cases whose type
reward depends on titles outside the shipped noun table need the spaCy model (``envkit[webshop]``).
"""

from __future__ import annotations

import pytest

pytest.importorskip("rapidfuzz")

from envkit.envs.webshop.products import Product, WebShopGoal
from envkit.envs.webshop.reward import normalize_color, token_set_ratio, type_reward
from envkit.envs.webshop.reward_legacy import title_nouns
from envkit.envs.webshop.scoring import get_reward


def _tagger() -> None:
    """Skip unless spaCy and an English model are installed (titles outside the shipped table need them)."""
    spacy = pytest.importorskip("spacy")
    from envkit.envs.webshop.nouns import SPACY_MODELS

    if not any(spacy.util.is_package(m) for m in SPACY_MODELS):
        pytest.skip("no spaCy English model installed (pip install 'envkit[webshop]')")


def product(**kw) -> Product:
    base = dict(
        asin="B000000001",
        title="Aldera Shampoo Bottle Refill Pump, Paraben Free",
        category="beauty",
        query="shampoo",
        product_category="Beauty & Personal Care › Hair Care › Shampoo",
        description="A gentle shampoo with tea tree oil.",
        bullet_points=("Long lasting freshness.",),
        pricing=(20.0,),
        price_tag="$20.0",
        options=(("scent", ("lavender", "citrus")), ("size", ("4 ounce", "8 ounce"))),
        attributes=("paraben free", "long lasting"),
    )
    base.update(kw)
    return Product(**base)  # type: ignore[arg-type]


def goal(**kw) -> WebShopGoal:
    base = dict(
        asin="B000000001",
        instruction_text="i need paraben free, long lasting shampoo",
        attributes=("paraben free", "long lasting"),
        goal_options=("lavender", "8 ounce"),
        option_names=("scent", "size"),
        price_upper=30.0,
        query="shampoo",
        category="beauty",
        name="Aldera Shampoo Bottle Refill Pump, Paraben Free",
        product_category="Beauty & Personal Care › Hair Care › Shampoo",
    )
    base.update(kw)
    return WebShopGoal(**base)  # type: ignore[arg-type]


def test_upstream_normalize_color_cases():
    # upstream web_agent_site/engine/normalize.py's own test suite
    for text, want in [
        ("", ""),
        ("black forest", "black"),
        ("violet lavender", "lavender"),
        ("steelivy fuchsia", "fuchsia"),
        ("123alabaster", "alabaster"),
        ("webshop", "webshop"),
    ]:
        assert normalize_color(text) == want


def test_token_set_ratio_like_thefuzz():
    assert token_set_ratio("small", "x-small") == 100  # a token subset scores 100
    assert token_set_ratio("Paraben-Free", "paraben free") == 100  # full processing: case and punctuation
    assert token_set_ratio("sugar free", "gluten free") < 85
    assert token_set_ratio("", "x") == 0


def test_perfect_purchase_scores_one():
    _tagger()
    # (2 attributes + 2 options + price ok) / (2 + 2 + 1) * r_type 1.0 = 1.0
    info = get_reward(product(), goal(), 20.0, {"scent": "lavender", "size": "8 ounce"})
    assert info.score == 1.0
    assert (info.r_type, info.num_attr_matches, info.num_option_matches, info.r_price) == (1.0, 2, 2, True)


def test_size_is_fuzzy_upstream_and_exact_in_legacy():
    _tagger()
    # upstream: token_set_ratio("4 ounce", "8 ounce") = 86 > 85, so the goal's "8 ounce" counts: 5 / 5 = 1.0
    info = get_reward(product(), goal(), 20.0, {"scent": "lavender", "size": "4 ounce"})
    assert info.score == 1.0 and info.num_option_matches == 2
    # a size that is not close: "16 ounce" vs "8 ounce" = 80 -> 1 option: (2 + 1 + 1) / 5 = 0.8
    assert get_reward(product(), goal(), 20.0, {"scent": "lavender", "size": "16 ounce"}).score == pytest.approx(0.8)
    # legacy: size is matched exactly: "4 ounce" not in ["lavender", "8 ounce"] and not in the texts -> 0.8
    info = get_reward(product(), goal(), 20.0, {"scent": "lavender", "size": "4 ounce"}, "legacy")
    assert info.score == pytest.approx(0.8)
    assert info.num_option_matches == 1 and info.r_option == 0.5


def test_price_over_the_bound():
    _tagger()
    # (2 + 2 + 0) / 5 = 0.8
    assert get_reward(product(), goal(), 35.0, {"scent": "lavender", "size": "8 ounce"}).score == pytest.approx(0.8)


def test_missing_options_and_attribute_found_in_description():
    _tagger()
    # goal attributes: "tea tree" is not a product attribute but is in the description (substring) -> match;
    # "vegan" matches nothing. No options chosen. (1 + 0 + 1) / (2 + 2 + 1) = 0.4
    g = goal(attributes=("tea tree", "vegan"))
    info = get_reward(product(), g, 20.0, {})
    assert info.num_attr_matches == 1 and info.num_option_matches == 0
    assert info.score == pytest.approx(0.4)


def test_fuzzy_option_after_color_normalisation():
    _tagger()
    # non-size groups match fuzzily after normalize_color: "light blue" -> "blue", goal "navy blue" -> "blue"
    p = product(options=(("color", ("light blue", "red")),))
    g = goal(goal_options=("navy blue",), option_names=("color",))
    info = get_reward(p, g, 20.0, {"color": "light blue"})
    # (2 + 1 + 1) / (2 + 1 + 1) = 1.0
    assert info.num_option_matches == 1 and info.score == 1.0
    # "red" -> normalised "red", fuzz("blue", "red") < 85, "red" not in the texts -> (2 + 0 + 1) / 4 = 0.75
    assert get_reward(p, g, 20.0, {"color": "red"}).score == pytest.approx(0.75)


def test_type_reward_half_when_only_one_fifth_of_nouns_match():
    _tagger()
    # spaCy's goal title nouns: aldera shampoo bottle refill pump paraben free (7)
    # purchased nouns: kestrel pump sprayer -> 1 of 7 = 0.1429: > 0.1 but not > 0.2, no query match, one
    # common category level -> r_type 0.5; attributes: none match; price ok: (0 + 0 + 1) / 5 * 0.5 = 0.1
    p = product(
        title="Kestrel Pump Sprayer",
        query="sprayer",
        product_category="Patio, Lawn & Garden › Gardening › Sprayer",
        description="Garden sprayer.",
        bullet_points=("Sprays water.",),
        attributes=("easy to use",),
    )
    r_type, query_match, category_match, title_score = type_reward(p, goal())
    assert (r_type, query_match, category_match) == (0.5, False, False)
    assert title_score == pytest.approx(1 / 7)
    assert get_reward(p, goal(), 20.0, {}).score == pytest.approx(0.1)
    # legacy nouns drop "free" (a listed adjective): 1 of 6
    assert title_nouns(goal().name) == ("aldera", "shampoo", "bottle", "refill", "pump", "paraben")
    assert type_reward(p, goal(), title_nouns)[3] == pytest.approx(1 / 6)


def test_type_reward_zero_when_no_noun_matches():
    _tagger()
    p = product(title="Kestrel Garden Hose", query="hose", product_category="Garden › Hoses")
    assert type_reward(p, goal())[0] == 0.0
    assert get_reward(p, goal(), 20.0, {"scent": "lavender", "size": "8 ounce"}).score == 0.0


def test_query_match_keeps_type_reward_when_title_overlap_is_small():
    _tagger()
    # 1/7 title overlap but the same query -> match -> r_type 1.0 (title_score >= 0.1)
    p = product(title="Kestrel Pump Sprayer", attributes=("paraben free", "long lasting"))
    assert type_reward(p, goal())[0] == 1.0


def test_options_count_per_goal_option_upstream_and_per_purchase_in_legacy():
    _tagger()
    # a human goal names 1 option; upstream counts goal options: 1 -> (2 + 1 + 1) / (2 + 1 + 1) = 1.0
    p = product(title="Aldera Shampoo Bottle Refill Pump, Paraben Free, 8 Ounce")
    g = goal(goal_options=("lavender",), option_names=(), kind="human", name=p.title)
    info = get_reward(p, g, 20.0, {"scent": "lavender", "size": "8 ounce"})
    assert info.num_option_matches == 1 and info.score == 1.0
    # legacy counts purchased options (the size through the title fallback): (2 + 2 + 1) / 4 = 1.25, clipped
    info = get_reward(p, g, 20.0, {"scent": "lavender", "size": "8 ounce"}, "legacy")
    assert info.num_option_matches == 2
    assert info.score == 1.0
