"""The embedded generated catalog, the real-file loader, goal parsing from the real attribute file, and search."""

from __future__ import annotations

import copy
import json
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("bm25s")

from envkit.envs.webshop.catalog import build_catalog, load_catalog
from envkit.envs.webshop.generated import generate_raw
from envkit.envs.webshop.scoring import get_reward
from envkit.envs.webshop.search import engine_for
from envkit.errors import DataNotFoundError


def test_generated_catalog_is_deterministic_and_varied():
    a, b = generate_raw(seed=0), generate_raw(seed=0)
    assert a == b
    products, attrs = a
    assert len(products) == 300 and len(attrs) == 300
    assert len({p["asin"] for p in products}) == 300 and len({p["name"] for p in products}) == 300
    assert len(Counter(p["category"] for p in products)) == 5
    for p in products:
        opts = p["customization_options"]
        assert len(opts) == 2 and all(3 <= len(v) <= 4 for v in opts.values())
        values = [v["value"].lower() for vs in opts.values() for v in vs]
        assert len(values) == len(set(values))  # click[value] is unambiguous
        text = (p["name"] + " ".join(p["small_description"]) + p["full_description"]).lower()
        assert not any(v in text for v in values)  # the option reward cannot be earned through the texts
        assert 3 <= len(attrs[p["asin"]]["attributes"]) <= 4
    assert generate_raw(seed=1) != a


def test_embedded_catalog_goals_are_satisfiable():
    cat = load_catalog()
    assert cat.source == "embedded" and len(cat.products) == 300
    assert len(cat.goals) > 2000
    assert {g.asin for g in cat.goals} == set(cat.by_asin)
    for g in cat.goals[:400]:
        p = cat.by_asin[g.asin]
        assert cat.prices[g.asin] <= g.price_upper
        assert get_reward(p, g, cat.prices[g.asin], dict(zip(g.option_names, g.goal_options))).score == 1.0
        assert g.instruction_text.endswith(f"price lower than {g.price_upper:.2f} dollars")
    test, train = cat.split_indices("test"), cat.split_indices("train")
    assert len(test) == 500 and set(test).isdisjoint(train) and len(test) + len(train) == len(cat.goals)
    assert load_catalog() is cat  # cached: envs share one catalog and index


def test_every_product_is_found_first_by_its_title():
    cat = load_catalog()
    engine = engine_for(cat)
    for p in cat.products:
        assert engine.search(p.title.lower())[0] == p.asin
    assert len(engine.search("free")) == 50  # at most the top 50, like upstream
    shampoos = {p.asin for p in cat.products if p.query == "shampoo"}
    assert set(engine.search("shampoos")) == shampoos and len(shampoos) == 10  # stemmed: shampoos -> shampoo
    assert engine.search("the of and") == ()  # only stop words: no results
    assert engine.search("<a>") == ()  # upstream crashes on this one


def test_loader_reads_the_real_file_names(tmp_path: Path):
    with pytest.raises(DataNotFoundError, match="items_shuffle"):
        load_catalog(str(tmp_path))
    products, attrs = generate_raw(seed=0)
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(products))
    with pytest.raises(DataNotFoundError, match="items_ins_v2"):
        load_catalog(str(tmp_path))
    (tmp_path / "items_ins_v2_1000.json").write_text(json.dumps(attrs))
    real_path = load_catalog(str(tmp_path))
    embedded = load_catalog("embedded")
    assert real_path.products == embedded.products and real_path.goals == embedded.goals
    assert load_catalog(str(tmp_path), num_products=10).products == embedded.products[:10]


def test_upstream_product_conversion():
    products, attrs = generate_raw(seed=0)
    raw = copy.deepcopy(products[:3])
    raw[0]["pricing"] = "$10.00 - $20.00"
    raw[0]["customization_options"] = {"Color": [{"value": "Black/White"}, {"value": " Navy "}], "Size": None}
    raw[1]["small_description"] = "one bullet"
    raw[2]["asin"] = "nan"  # skipped like upstream
    cat = build_catalog(raw, {raw[1]["asin"]: attrs[products[1]["asin"]]}, seed=3)
    p0, p1 = cat.products
    assert p0.pricing == (10.0, 20.0) and p0.price_tag == "$10.0 to $20.0"
    assert 10.0 <= cat.prices[p0.asin] <= 20.0
    assert p0.options == (("color", ("black | white", "navy")),)
    assert p0.attributes == ("DUMMY_ATTR",)  # not in the attribute file
    assert p1.bullet_points == ("one bullet",)
    assert [g.asin for g in cat.goals] == [p1.asin] * len(cat.goals)  # only products with instructions
    assert build_catalog(raw, {}, seed=3).prices == build_catalog(raw, {}, seed=3).prices  # seeded


def test_goals_from_the_real_attribute_file(webshop_data: Path):
    """Real items_ins_v2_1000.json (its instructions and attributes) merged with generated products.

    The shared data dir has the attribute file but no product file, so the generated products take the ASINs of
    the real entries that have an instruction; the goals then come from the real instructions and attributes
    through the same code path as with WebShop's own product file.
    """
    real = json.loads((webshop_data / "items_ins_v2_1000.json").read_text())
    with_ins = [a for a, v in real.items() if v.get("instruction")]
    assert len(with_ins) == 415
    products, _ = generate_raw(seed=0)
    for p, asin in zip(products, with_ins[:200] + [a for a in real if a not in with_ins][:100]):
        p["asin"] = asin
    cat = build_catalog(products, real, seed=0)
    assert len(cat.products) == 300
    combos = {p.asin: 1 for p in cat.products}
    for p in cat.products:
        for _, values in p.options:
            combos[p.asin] *= len(values)
    assert len(cat.goals) == sum(combos[a] for a in with_ins[:200])
    for g in cat.goals:
        entry = real[g.asin]
        assert g.attributes == tuple(entry["instruction_attributes"])
        assert g.instruction_text.startswith(entry["instruction"] + " with ")
        assert "price lower than" in g.instruction_text
        p = cat.by_asin[g.asin]
        assert p.attributes == tuple(entry["attributes"])
        assert get_reward(p, g, cat.prices[g.asin], dict(zip(g.option_names, g.goal_options))).score == 1.0


def test_human_goals_and_the_human_goals_json_filter(webshop_data: Path):
    texts = json.loads((webshop_data / "human_goals.json").read_text())
    assert isinstance(texts, list) and all(isinstance(t, str) for t in texts) and len(texts) > 10000
    products, attrs = generate_raw(seed=0)
    human = {
        p["asin"]: [
            {
                "instruction": texts[i],
                "instruction_attributes": attrs[p["asin"]]["attributes"][:1],
                "instruction_options": [next(iter(p["customization_options"].values()))[0]["value"].lower()],
            }
        ]
        for i, p in enumerate(products[:20])
    }
    human[products[0]["asin"]].append({"instruction": "not a listed text", "instruction_attributes": ["x"]})
    with pytest.raises(DataNotFoundError, match="items_human_ins"):
        build_catalog(products, attrs, None, human_goals=True)
    cat = build_catalog(products, attrs, human, human_goals=True)
    assert len(cat.goals) == 21 and {g.kind for g in cat.goals} == {"human"}
    kept = build_catalog(products, attrs, human, human_goals=True, human_goal_texts=texts)
    assert len(kept.goals) == 20


def test_webshop_data_env_var_selects_the_real_files(tmp_path: Path, monkeypatch):
    from envkit.envs.webshop.env import WebShopEnv

    products, attrs = generate_raw(seed=0)
    products = products[:40]
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(products))
    (tmp_path / "items_ins_v2_1000.json").write_text(json.dumps(attrs))
    monkeypatch.setenv("WEBSHOP_DATA", str(tmp_path))
    env = WebShopEnv()
    assert env.catalog.source.endswith("items_shuffle_1000.json") and len(env.catalog.products) == 40
    monkeypatch.setenv("WEBSHOP_DATA", str(tmp_path / "missing"))  # no product file there: embedded catalog
    assert WebShopEnv().catalog.source == "embedded"
    with pytest.raises(DataNotFoundError, match="items_human_ins"):
        WebShopEnv(human_goals=True)


def test_env_and_oracle_on_real_instructions(webshop_data: Path, tmp_path: Path):
    """The env loads a data dir (generated products under the real ASINs + the real items_ins_v2_1000.json)."""
    from envkit.envs.webshop.env import WebShopEnv
    from envkit.oracles.base import run_oracle
    from envkit.oracles.webshop import WebShopOracle

    real = json.loads((webshop_data / "items_ins_v2_1000.json").read_text())
    products, _ = generate_raw(seed=0)
    for p, asin in zip(products, [a for a, v in real.items() if v.get("instruction")]):
        p["asin"] = asin
    (tmp_path / "items_shuffle_1000.json").write_text(json.dumps(products))
    (tmp_path / "items_ins_v2_1000.json").write_text(json.dumps(real))
    env = WebShopEnv(data_dir=str(tmp_path), split="test")
    instructions = {v["instruction"] for v in real.values() if v.get("instruction")}
    for seed in range(20):
        obs, info = env.reset(seed=seed)
        assert any(info["instruction"].startswith(i + " with ") for i in instructions)
        run = run_oracle(env, WebShopOracle(), obs, info, max_steps=15)
        assert run.success, run.reason


def test_webshop_data_without_a_product_file_says_which_catalog_is_used(tmp_path, monkeypatch):
    from envkit.envs.webshop import catalog as catalog_mod

    catalog_mod._warn_embedded.cache_clear()
    (tmp_path / "human_goals.json").write_text("[]")
    monkeypatch.setenv("WEBSHOP_DATA", str(tmp_path))
    with pytest.warns(UserWarning, match=r"holds no product file .*: using the embedded generated catalog instead"):
        cat = load_catalog()
    assert cat.source == "embedded"
