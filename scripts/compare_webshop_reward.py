"""Compare envkit's WebShop reward with the reference transcription of upstream's ``get_reward``; prints JSON.

Random purchases (`tests/envs/webshop/upstream_reference.random_purchases`) on three catalogs: the embedded one,
generated products carrying the real ``items_ins_v2_1000.json`` attributes and instructions (``$WEBSHOP_DATA``),
and the same with human-style goals. For each envkit mode (``upstream``, ``legacy``) against each upstream variant
(``pinned``: thefuzz 0.19.0 with difflib, as upstream's requirements.txt installs it; ``levenshtein``: with
python-Levenshtein; ``master_tuples``: master's (name, value) tuples passed to the colour normaliser), it counts
totals within 1e-6, success (score == 1) agreement, and wrong purchases (not the goal product with exactly the
goal's options) that envkit pays as success while upstream does not. Nouns: spaCy (the shipped table, else the
model) on both sides, so the type reward compares the formula, not the tagger.

Usage: ``WEBSHOP_DATA=../shared/data/webshop python scripts/compare_webshop_reward.py [--n 20000]``
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "envs" / "webshop"))

import upstream_reference as ref

from envkit.envs.webshop.catalog import load_catalog
from envkit.envs.webshop.nouns import spacy_nouns
from envkit.envs.webshop.scoring import get_reward

VARIANTS = {"pinned": {}, "levenshtein": {"levenshtein": True}, "master_tuples": {"tuple_goal_options": True}}


def wrong(p: Any, g: Any, options: dict[str, str]) -> bool:
    if p.asin != g.asin:
        return True
    if g.option_names:
        return options != dict(zip(g.option_names, g.goal_options, strict=True))
    return not all(o in options.values() for o in g.goal_options)


def compare(catalog: Any, n: int, seed: int) -> dict[str, Any]:
    buys = ref.random_purchases(catalog, n, seed)
    out: dict[str, Any] = {"purchases": n, "wrong_purchases": sum(wrong(p, g, o) for p, g, _, o in buys)}
    refs = {
        k: [
            ref.get_reward(ref.purchased_dict(p), ref.goal_dict(g), pr, o, nouns=spacy_nouns, **kw)
            for p, g, pr, o in buys
        ]
        for k, kw in VARIANTS.items()
    }
    for k in VARIANTS:
        out[f"upstream_{k}_success_paid_on_wrong"] = sum(
            r[0] == 1.0 and wrong(p, g, o) for r, (p, g, _, o) in zip(refs[k], buys, strict=True)
        )
    for mode in ("upstream", "legacy"):
        t0 = time.perf_counter()
        mine = [get_reward(p, g, pr, o, mode) for p, g, pr, o in buys]
        out[f"{mode}_us_per_reward"] = round(1e6 * (time.perf_counter() - t0) / n, 1)
        out[f"{mode}_success_paid_on_wrong"] = sum(
            m.score == 1.0 and wrong(p, g, o) for m, (p, g, _, o) in zip(mine, buys, strict=True)
        )
        for k, rs in refs.items():
            tot = sum(abs(m.score - r[0]) <= 1e-6 for m, r in zip(mine, rs, strict=True))
            suc = sum((m.score == 1.0) == (r[0] == 1.0) for m, r in zip(mine, rs, strict=True))
            extra = sum(
                m.score == 1.0 and r[0] != 1.0 and wrong(p, g, o)
                for m, r, (p, g, _, o) in zip(mine, rs, buys, strict=True)
            )
            out[f"{mode}_vs_{k}"] = {"total_agree": tot / n, "success_agree": suc / n, "extra_wrong_successes": extra}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20000, help="random purchases per catalog")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    res: dict[str, Any] = {"embedded": compare(load_catalog("embedded"), args.n, args.seed)}
    data = os.environ.get("WEBSHOP_DATA")
    if data and (Path(data) / "items_ins_v2_1000.json").is_file():
        res["real_attributes"] = compare(ref.real_attribute_catalog(data), args.n, args.seed)
        res["real_attributes_human_goals"] = compare(ref.real_attribute_catalog(data, human=True), args.n, args.seed)
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
