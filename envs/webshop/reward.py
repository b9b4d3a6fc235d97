"""WebShop's purchase score, re-implemented from upstream ``web_agent_site/engine/goal.py::get_reward``.

``score = r_type * (n_attr + n_option + r_price) / (len(goal.attributes) + len(goal.goal_options) + 1)``

* **attributes** (``get_attribute_reward``): a goal attribute matches when
  ``token_set_ratio(product attribute, goal attribute) > 85`` for some product attribute, else when it is a
  substring of the title, the features or the description (lower-cased);
* **options** (``get_option_reward``, upstream's current version): every *purchased* option value (after
  ``normalize_color``) matches exactly for the ``size`` group, by ``token_set_ratio > 85`` against any goal
  option otherwise, and falls back to a substring search in title / features / description;
* **price**: ``price <= goal.price_upper``;
* **type** (``get_type_reward``): ``r_type = 1``; 0.5 when neither the query, two ``›`` category levels, nor
  more than 20 % of the goal title's nouns match; 0.1 when under 10 % of them match; 0 when none does.

Fuzzy matching is thefuzz's ``token_set_ratio`` (``force_ascii``, full processing, rounded to an int),
computed with rapidfuzz, which thefuzz itself wraps.

**Substitute for spaCy** (documented deviation): upstream keeps the title tokens spaCy tags NOUN/PROPN. Here the
"nouns" of a title are its alphabetic tokens of two or more letters that are not in a fixed list of English
function words and common product adjectives (`NON_NOUNS`). This matches spaCy whenever the titles are the
same product (score 1.0 is unaffected) and is close on unrelated ones; it needs no model download.
The only other deviation: the total is clipped to 1.0 (upstream can exceed 1 when a purchase has more option
groups than a human goal names).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass

from envkit.errors import require
from envs.webshop.catalog import Goal, Product

_fuzz = require("rapidfuzz.fuzz", extra="webshop", what="envkit/WebShop-v0")
_utils = require("rapidfuzz.utils", extra="webshop", what="envkit/WebShop-v0")

EXACT_MATCH_OPTS = ("size",)
_COLORS = (
    "alabaster apricot aqua ash asphalt azure banana beige black blue blush bordeaux bronze brown burgundy camel "
    "camo caramel champagne charcoal cheetah chestnut chocolate christmas coffee cognac copper coral cranberry "
    "cream crystal dark denim eggplant elephant espresso fuchsia gold granite grape graphite grass gray green grey "
    "heather indigo ivory ivy khaki lavender lemon leopard light lilac lime magenta maroon mauve merlot midnight "
    "mint mocha multicolor mushroom mustard natural navy nude olive orange peach pewter pink plum purple rainbow "
    "red rose royal rust sand sapphire seashell silver skull slate steel stone stonewash sunflower tan taupe teal "
    "tiger turquoise violet walnut wheat white wine yellow"
)
COLOR_SET = tuple(_COLORS.split())

#: Tokens never counted as title nouns by the spaCy substitute (function words and common adjectives).
_NON_NOUNS = (
    "a an the and or but nor for of in on at to by with without from into onto over under up down out off as "
    "is are was were be been being it its this that these those their our your my his her we you they he she "
    "i me us them not no so than too very can will just also only all any each every both few more most other "
    "some such own same new best great good high low small large big extra super ultra premium classic pro "
    "essential daily everyday signature select prime free easy long short light dark soft hard natural "
    "organic original fresh pure quick fast slow heavy strong portable wireless smart modern rustic mini "
    "plus max men women womens mens unisex kids adult"
)
NON_NOUNS = frozenset(_NON_NOUNS.split())
_WORD = re.compile(r"[a-z]+")


def normalize_color(color_string: str) -> str:
    """Upstream ``normalize.normalize_color``: the first `COLOR_SET` entry contained in the string, else it."""
    for c in COLOR_SET:
        if c in color_string:
            return c
    return color_string


def token_set_ratio(a: str, b: str) -> int:
    """thefuzz's ``fuzz.token_set_ratio`` (force_ascii, full_process) as an int in 0..100."""
    pa = _utils.default_process("".join(ch for ch in str(a) if ord(ch) < 128))
    pb = _utils.default_process("".join(ch for ch in str(b) if ord(ch) < 128))
    if not pa or not pb:
        return 0
    return round(float(_fuzz.token_set_ratio(pa, pb)))


@functools.lru_cache(maxsize=65536)
def title_nouns(title: str) -> tuple[str, ...]:
    """The spaCy substitute: lower-cased alphabetic tokens (>= 2 letters) not in `NON_NOUNS`."""
    return tuple(t for t in _WORD.findall(title.lower()) if len(t) >= 2 and t not in NON_NOUNS)


@dataclass(frozen=True)
class RewardInfo:
    """The score and its parts (upstream's ``verbose`` info)."""

    score: float
    r_type: float
    r_att: float
    r_option: float | None
    r_price: bool
    query_match: bool
    category_match: bool
    title_score: float
    num_attr_matches: int
    num_option_matches: int

    def as_dict(self) -> dict[str, float | bool | int | None]:
        return dict(self.__dict__)


def type_reward(product: Product, goal: Goal) -> tuple[float, bool, bool, float]:
    """``(r_type, query_match, category_match, title_score)`` as upstream ``get_type_reward``."""
    query_match = product.query == goal.query
    p_cat = {x.strip() for x in product.product_category.split("›")}
    g_cat = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(p_cat & g_cat) >= 2
    desired = title_nouns(goal.name)
    purchased = title_nouns(product.title)
    title_score = 0.2 if not desired else len(set(purchased) & set(desired)) / len(desired)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, query_match, category_match, title_score


def _in_text(needle: str, product: Product) -> bool:
    return (
        needle in product.title.lower()
        or needle in " ".join(product.bullet_points).lower()
        or needle in product.description.lower()
    )


def attribute_matches(product: Product, goal: Goal) -> int:
    """Number of goal attributes found in the product (upstream ``get_attribute_reward``)."""
    n = 0
    for g in goal.attributes:
        if any(token_set_ratio(p, g) > 85 for p in product.attributes) or _in_text(g, product):
            n += 1
    return n


def option_matches(product: Product, goal_options: tuple[str, ...], purchased: Mapping[str, str]) -> int:
    """Number of purchased options that match the goal (upstream ``get_option_reward``)."""
    goal_norm = [normalize_color(o) for o in goal_options]
    n = 0
    for key, value in purchased.items():
        v = normalize_color(value)
        if key.lower() in EXACT_MATCH_OPTS:
            matched = v in goal_norm
        else:
            matched = any(token_set_ratio(g, v) > 85 for g in goal_norm)
        if matched or _in_text(v, product):
            n += 1
    return n


def get_reward(product: Product, goal: Goal, price: float, options: Mapping[str, str]) -> RewardInfo:
    """Score a purchase of `product` at `price` with the chosen `options` (option group -> value) for `goal`."""
    r_type, query_match, category_match, title_score = type_reward(product, goal)
    r_price = price <= goal.price_upper
    n_att = attribute_matches(product, goal)
    n_opt = option_matches(product, goal.goal_options, options)
    denom = len(goal.attributes) + len(goal.goal_options) + 1
    total = min(1.0, (n_att + n_opt + int(r_price)) / denom * r_type)
    return RewardInfo(
        score=total,
        r_type=r_type,
        r_att=n_att / len(goal.attributes) if goal.attributes else 0.0,
        r_option=n_opt / len(goal.goal_options) if goal.goal_options else None,
        r_price=r_price,
        query_match=query_match,
        category_match=category_match,
        title_score=title_score,
        num_attr_matches=n_att,
        num_option_matches=n_opt,
    )
