"""Building a WebShop `Catalog` (`envkit.envs.webshop.products`): the real data files' loader and the embedded generated one.

Usage::

    from envkit.envs.webshop.catalog import load_catalog
    cat = load_catalog()                       # embedded generated catalog (no data needed)
    cat = load_catalog("/data/webshop")        # real files (or set $WEBSHOP_DATA)
    goal = cat.goals[cat.split_indices("test")[0]]

Real files read from the data directory (WebShop's own names):

* ``items_shuffle_1000.json`` (else ``items_shuffle.json``): the product list;
* ``items_ins_v2_1000.json`` (else ``items_ins_v2.json``): attributes and synthetic instructions per asin;
* ``items_human_ins.json`` (optional): human instructions per asin, used with ``human_goals=True``;
* ``human_goals.json`` (optional): the list of human instruction texts of WebShop's IL baseline; with
  ``restrict_to_human_goals_json=True`` only human goals whose instruction is in it are kept.

The conversion mirrors upstream ``engine.load_products`` and ``goal.get_synthetic_goals`` /
``get_human_goals`` (option names and values lower-cased, ``/`` -> ``" | "``, prices parsed from ``pricing``,
products without attributes get ``DUMMY_ATTR``; one synthetic goal per option combination; goals shuffled with
``random.Random(233)`` like upstream). Upstream draws prices and price bounds unseeded; here they come from a
generator seeded by `seed`, so a catalog is identical in every process.
"""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
import re
import warnings
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np

from envkit.envs.webshop.products import GOAL_SHUFFLE_SEED, PRICE_RANGE, Catalog, Product, WebShopGoal
from envkit.errors import DataNotFoundError


def _parse_pricing(pricing: Any) -> tuple[tuple[float, ...], str]:
    if not pricing:
        return (100.0,), "$100.0"
    values = [float(Decimal(re.sub(r"[^\d.]", "", p))) for p in str(pricing).split("$")[1:] if re.sub(r"[^\d.]", "", p)]
    if not values:
        return (100.0,), "$100.0"
    if len(values) == 1:
        return (values[0],), f"${values[0]}"
    return (values[0], values[1]), f"${values[0]} to ${values[1]}"


def _parse_product(p: Mapping[str, Any], attrs: Mapping[str, Any] | None, human: Any) -> Product:
    options: list[tuple[str, tuple[str, ...]]] = []
    for name, contents in (p.get("customization_options") or {}).items():
        if contents is None:
            continue
        values = tuple(str(c["value"]).strip().replace("/", " | ").lower() for c in contents)
        options.append((str(name).lower(), values))
    small = p.get("small_description", "")
    bullets = tuple(str(b) for b in small) if isinstance(small, list) else (str(small),)
    reviews = tuple(
        (str(r.get("score", r.get("stars", ""))), str(r.get("body", r.get("review", ""))))
        for r in p.get("reviews", []) or []
    )
    pricing, tag = _parse_pricing(p.get("pricing"))
    a = attrs or {}
    return Product(
        asin=str(p["asin"]),
        title=str(p.get("name", "")),
        category=str(p.get("category", "")),
        query=str(p.get("query", "")).lower().strip(),
        product_category=str(p.get("product_category", "")),
        description=str(p.get("full_description", "") or ""),
        bullet_points=bullets,
        pricing=pricing,
        price_tag=tag,
        options=tuple(options),
        attributes=tuple(a["attributes"]) if "attributes" in a else ("DUMMY_ATTR",),
        rating=str(p.get("average_rating", "N.A.") or "N.A."),
        reviews=reviews,
        instruction_text=a.get("instruction"),
        instruction_attributes=tuple(a.get("instruction_attributes") or ()),
        human_instructions=tuple(human or ()),
    )


def _price_upper(price: float, rng: np.random.Generator) -> tuple[float, str]:
    price_range = [p for p in PRICE_RANGE if p > price][:4]
    if len(price_range) >= 2:
        i, j = rng.choice(len(price_range), size=2, replace=False)
        upper = price_range[max(int(i), int(j))]
        return upper, f", and price lower than {upper:.2f} dollars"
    return 1000000.0, ""


def build_catalog(
    raw_products: Sequence[Mapping[str, Any]],
    attributes: Mapping[str, Mapping[str, Any]],
    human_instructions: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    *,
    human_goals: bool = False,
    num_products: int | None = None,
    seed: int = 0,
    human_goal_texts: Sequence[str] | None = None,
    source: str = "",
) -> Catalog:
    """Turn data in WebShop's file schemas into a `Catalog` (mirrors upstream ``load_products`` + goals).

    Args:
        raw_products: ``items_shuffle*.json`` entries.
        attributes: ``items_ins_v2*.json`` (asin -> attributes, instruction, instruction_attributes).
        human_instructions: ``items_human_ins.json`` (asin -> list of human instructions); needed for human goals.
        human_goals: Human goals (True) or synthetic goals from the attribute file (False, verl-agent's choice).
        num_products: Keep only the first N products (upstream's ``num_products``).
        seed: Seeds product prices within price ranges and the goals' price bounds.
        human_goal_texts: If given, keep only human goals whose instruction is in this list.
        source: A label for messages and ``info``.
    """
    if human_goals and not human_instructions:
        raise DataNotFoundError(
            "human goals need items_human_ins.json (asin -> human instructions) next to the product file; "
            "pass human_goals=False for synthetic goals from items_ins_v2*.json"
        )
    rng = np.random.default_rng(seed)
    products: list[Product] = []
    seen: set[str] = set()
    for p in raw_products[:num_products] if num_products is not None else raw_products:
        asin = str(p.get("asin", "nan"))
        if asin == "nan" or len(asin) > 10 or asin in seen:
            continue
        seen.add(asin)
        human = (human_instructions or {}).get(asin) if human_goals else None
        products.append(_parse_product(p, attributes.get(asin), human))
    prices: dict[str, float] = {}
    for prod in products:
        lo_hi = prod.pricing
        prices[prod.asin] = lo_hi[0] if len(lo_hi) == 1 else float(rng.uniform(lo_hi[0], lo_hi[1]))
    goals = (
        _human_goals(products, prices, rng, human_goal_texts)
        if human_goals
        else _synthetic_goals(products, prices, rng)
    )
    random.Random(GOAL_SHUFFLE_SEED).shuffle(goals)
    return Catalog(tuple(products), {p.asin: p for p in products}, prices, tuple(goals), source)


def _synthetic_goals(
    products: list[Product], prices: Mapping[str, float], rng: np.random.Generator
) -> list[WebShopGoal]:
    goals: list[WebShopGoal] = []
    counts: dict[str, int] = defaultdict(int)
    for p in products:
        if not p.instruction_text or not p.instruction_attributes:
            continue
        upper, price_text = _price_upper(prices[p.asin], rng)
        opts = dict(p.options)
        names = sorted(opts)
        for combo in itertools.product(*(opts[n] for n in names)):
            option_text = ", and ".join(f"{n}: {v}" for n, v in zip(names, combo))
            option_text = " with " + option_text if option_text else ""
            goals.append(
                WebShopGoal(
                    asin=p.asin,
                    instruction_text=f"{p.instruction_text}{option_text}{price_text}",
                    attributes=p.instruction_attributes,
                    goal_options=tuple(combo),
                    option_names=tuple(names),
                    price_upper=upper,
                    query=p.query,
                    category=p.category,
                    name=p.title,
                    product_category=p.product_category,
                )
            )
            for att in p.instruction_attributes:
                counts[att] += 1
    return [replace(g, weight=sum(1.0 / counts[a] for a in g.attributes) / len(g.attributes)) for g in goals]


def _human_goals(
    products: list[Product], prices: Mapping[str, float], rng: np.random.Generator, texts: Sequence[str] | None
) -> list[WebShopGoal]:
    keep = {t.strip().lower().strip(".") for t in texts} if texts is not None else None
    goals: list[WebShopGoal] = []
    for p in products:
        for ins in p.human_instructions:
            attrs = tuple(ins.get("instruction_attributes") or ())
            if not attrs:
                continue
            text = str(ins.get("instruction", "")).strip(".")
            if keep is not None and text.strip().lower() not in keep:
                continue
            upper, price_text = _price_upper(prices[p.asin], rng)
            goals.append(
                WebShopGoal(
                    asin=p.asin,
                    instruction_text=text + price_text,
                    attributes=attrs,
                    goal_options=tuple(str(o) for o in ins.get("instruction_options") or ()),
                    option_names=(),
                    price_upper=upper,
                    query=p.query,
                    category=p.category,
                    name=p.title,
                    product_category=p.product_category,
                    kind="human",
                )
            )
    return goals


def _first(data_dir: Path, names: Sequence[str]) -> Path | None:
    for n in names:
        if (data_dir / n).is_file():
            return data_dir / n
    return None


def _read_json(path: Path) -> Any:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def load_catalog(
    data_dir: str | None = None,
    *,
    human_goals: bool = False,
    num_products: int | None = None,
    seed: int = 0,
    restrict_to_human_goals_json: bool = False,
) -> Catalog:
    """Load a catalog (cached per arguments; catalogs are immutable).

    Args:
        data_dir: Directory with WebShop's files; None -> ``$WEBSHOP_DATA`` if it holds a product file, else
            the embedded generated catalog. ``"embedded"`` forces the embedded catalog.
        human_goals: Use human instructions (needs ``items_human_ins.json``).
        num_products: Keep the first N products.
        seed: Price seed (see `build_catalog`).
        restrict_to_human_goals_json: With human goals, keep only those listed in ``human_goals.json``.

    Raises:
        DataNotFoundError: `data_dir` was given but holds no product file.
    """
    if data_dir is None:
        env_dir = os.environ.get("WEBSHOP_DATA")
        if env_dir and _first(Path(env_dir), ("items_shuffle_1000.json", "items_shuffle.json")) is not None:
            data_dir = env_dir
        elif env_dir:
            _warn_embedded(env_dir)
    return _load_catalog(
        data_dir or "embedded",
        human_goals=human_goals,
        num_products=num_products,
        seed=seed,
        restrict_to_human_goals_json=restrict_to_human_goals_json,
    )


@functools.cache
def _warn_embedded(env_dir: str) -> None:
    """Say once per directory that $WEBSHOP_DATA was set but is not used, and which catalog is used instead (once per
    run: in a pool, only worker 0 says it, `envkit.pool.WORKER_INDEX_ENV`)."""
    if os.environ.get("ENVKIT_WORKER_INDEX", "0") != "0":
        return
    warnings.warn(
        f"WEBSHOP_DATA={env_dir} holds no product file (items_shuffle_1000.json or items_shuffle.json): using the "
        "embedded generated catalog instead (300 products, synthetic goals). Add the product file there, or unset "
        "WEBSHOP_DATA to silence this.",
        UserWarning,
        stacklevel=3,
    )


@functools.lru_cache(maxsize=8)
def _load_catalog(
    data_dir: str,
    *,
    human_goals: bool,
    num_products: int | None,
    seed: int,
    restrict_to_human_goals_json: bool,
) -> Catalog:
    if data_dir == "embedded":
        if human_goals:
            raise DataNotFoundError(
                "human goals need WebShop's items_human_ins.json: pass data_dir= (or set WEBSHOP_DATA) to a "
                "directory with the real files; the embedded catalog has synthetic goals only"
            )
        from envkit.envs.webshop.generated import generate_raw

        raw, attrs = generate_raw(seed=seed)
        return build_catalog(raw, attrs, num_products=num_products, seed=seed, source="embedded")
    root = Path(data_dir).expanduser()
    prod_file = _first(root, ("items_shuffle_1000.json", "items_shuffle.json"))
    if prod_file is None:
        raise DataNotFoundError(
            f"no WebShop product file in {root}: expected items_shuffle_1000.json or items_shuffle.json. Get them "
            "with WebShop's setup.sh (github.com/princeton-nlp/WebShop, 'small' or 'all' data), or leave "
            "data_dir/WEBSHOP_DATA unset to use the embedded generated catalog"
        )
    small = prod_file.name.endswith("_1000.json")
    order = (
        ("items_ins_v2_1000.json", "items_ins_v2.json") if small else ("items_ins_v2.json", "items_ins_v2_1000.json")
    )
    attr_file = _first(root, order)
    if attr_file is None:
        raise DataNotFoundError(f"no WebShop attribute file in {root}: expected {order[0]} (from WebShop's setup.sh)")
    human_file = _first(root, ("items_human_ins.json",))
    texts_file = _first(root, ("human_goals.json",))
    texts = _read_json(texts_file) if (restrict_to_human_goals_json and texts_file) else None
    return build_catalog(
        _read_json(prod_file),
        _read_json(attr_file),
        _read_json(human_file) if (human_goals and human_file) else None,
        human_goals=human_goals,
        num_products=num_products,
        seed=seed,
        human_goal_texts=texts,
        source=str(prod_file),
    )
