"""WebShop's purchase score as upstream computes it (``web_agent_site/engine/goal.py::get_reward``).

``score = r_type * (n_attr + n_option + [price <= bound]) / (len(goal.attributes) + len(goal.goal_options) + 1)``

The default ``reward_mode="upstream"`` (princeton-nlp/WebShop master, with the thefuzz 0.19.0 it pins):

* **attributes** (``get_attribute_reward``): a goal attribute matches when ``token_set_ratio(product attribute,
  goal attribute) > 85`` for some product attribute, else when it is a substring of the title, the features or
  the description (lower-cased);
* **options** (``get_option_reward``): purchased values and goal values go through ``normalize_color``; each
  *goal* option counts once when some purchased option has ``token_set_ratio > 85`` with it (every group, size
  included, is fuzzy; no text fallback), so ``n_option <= len(goal_options)`` and the score never exceeds 1;
* **price**: ``price <= goal.price_upper``;
* **type** (``get_type_reward``): ``r_type = 1``; 0.5 when neither the query, two ``›`` category levels, nor
  more than 20 % of the goal title's nouns match; 0.1 when under 10 % of them match; 0 when none does. Nouns are
  spaCy's (`envkit.envs.webshop.nouns`: shipped for the embedded catalog, en_core_web_sm 3.8.0 otherwise).

``token_set_ratio`` is thefuzz 0.19.0's: ``full_process`` drops only code points 128-255 (``force_ascii``),
turns every ``\\W`` character into a space, lower-cases and strips; the ratio is computed with rapidfuzz (the
indel ratio python-Levenshtein gives thefuzz); upstream's pinned install, without python-Levenshtein, uses
difflib's SequenceMatcher, which agreed on every threshold decision measured (docs/webshop.md).

One upstream bug is not reproduced (documented): for synthetic goals, upstream master passes
``goal['goal_options'].items()`` ((name, value) tuples) to ``get_option_reward``, so ``normalize_color`` tests
tuple membership and the matcher sees ``"('color', 'rustic')"``; here the goal's option *values* are normalised.

``reward_mode="legacy"`` is envkit's earlier score (`envkit.envs.webshop.reward_legacy`), kept to reproduce old runs;
it pays some wrong purchases as successes (see there). `envkit.envs.webshop.scoring.get_reward` picks the mode.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from envkit.envs.webshop.nouns import spacy_nouns
from envkit.envs.webshop.products import Product, WebShopGoal
from envkit.errors import require

_fuzz = require("rapidfuzz.fuzz", extra="webshop", what="envkit/WebShop-v0")


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
_LATIN1 = dict.fromkeys(range(128, 256))
_NON_WORD = re.compile(r"\W")


def normalize_color(color_string: str) -> str:
    """Upstream ``normalize.normalize_color``: the first `COLOR_SET` entry contained in the string, else it."""
    for c in COLOR_SET:
        if c in color_string:
            return c
    return color_string


def full_process(s: str) -> str:
    """thefuzz 0.19.0's ``utils.full_process(s, force_ascii=True)``."""
    return _NON_WORD.sub(" ", str(s).translate(_LATIN1)).lower().strip()


def token_set_ratio(a: str, b: str) -> int:
    """thefuzz 0.19.0's ``fuzz.token_set_ratio`` (force_ascii, full_process) as an int in 0..100."""
    pa, pb = full_process(a), full_process(b)
    if not pa or not pb:
        return 0
    return round(float(_fuzz.token_set_ratio(pa, pb, processor=None)))


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


def type_reward(
    product: Product, goal: WebShopGoal, nouns: Callable[[str], tuple[str, ...]] = spacy_nouns
) -> tuple[float, bool, bool, float]:
    """``(r_type, query_match, category_match, title_score)`` as upstream ``get_type_reward``."""
    query_match = product.query == goal.query
    p_cat = {x.strip() for x in product.product_category.split("›")}
    g_cat = {x.strip() for x in goal.product_category.split("›")}
    category_match = len(p_cat & g_cat) >= 2
    desired = nouns(goal.name)
    purchased = nouns(product.title)
    title_score = 0.2 if not desired else len(set(purchased) & set(desired)) / len(desired)
    r_type = 1.0
    if not (query_match or category_match or title_score > 0.2):
        r_type = 0.5
    if title_score < 0.1:
        r_type = 0.1
    if title_score == 0.0:
        r_type = 0.0
    return r_type, query_match, category_match, title_score


def in_text(needle: str, product: Product) -> bool:
    return (
        needle in product.title.lower()
        or needle in " ".join(product.bullet_points).lower()
        or needle in product.description.lower()
    )


def attribute_matches(product: Product, goal: WebShopGoal, ratio: Callable[[str, str], int] | None = None) -> int:
    """Number of goal attributes found in the product (upstream ``get_attribute_reward``)."""
    ratio = ratio or token_set_ratio
    n = 0
    for g in goal.attributes:
        if any(ratio(p, g) > 85 for p in product.attributes) or in_text(g, product):
            n += 1
    return n


def option_matches(goal_options: tuple[str, ...], purchased: Mapping[str, str]) -> int:
    """Number of goal options some purchased option matches (upstream ``get_option_reward``)."""
    bought = [normalize_color(v) for v in purchased.values()]
    return sum(any(token_set_ratio(p, normalize_color(g)) > 85 for p in bought) for g in goal_options)


def upstream_reward(product: Product, goal: WebShopGoal, price: float, options: Mapping[str, str]) -> RewardInfo:
    """Score a purchase of `product` at `price` with the chosen `options` (option group -> value) for `goal`, as
    upstream does (the shop's default ``reward_mode``; `envkit.envs.webshop.scoring.get_reward` picks the mode)."""
    r_type, query_match, category_match, title_score = type_reward(product, goal)
    r_price = price <= goal.price_upper
    n_att = attribute_matches(product, goal)
    n_opt = option_matches(goal.goal_options, options)
    total = (n_att + n_opt + int(r_price)) / (len(goal.attributes) + len(goal.goal_options) + 1) * r_type
    return reward_info(total, r_type, query_match, category_match, title_score, n_att, n_opt, r_price, goal)


def reward_info(
    total: float,
    r_type: float,
    query_match: bool,
    category_match: bool,
    title_score: float,
    n_att: int,
    n_opt: int,
    r_price: bool,
    goal: WebShopGoal,
) -> RewardInfo:
    """The `RewardInfo` of a scored purchase (the parts as upstream's ``verbose`` info)."""
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
