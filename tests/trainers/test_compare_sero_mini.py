"""scripts/compare_sero_mini.py (issue 32): the matched arm's group size, the scheduler (matched runs after their
SERO run, also when it was loaded from an earlier invocation), the start artefact's hash check, and a short smoke
of the whole script (tiny start, 2 steps) that checks the JSON's shape and that the reading rule ran."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("matplotlib")

REPO = Path(__file__).resolve().parents[2]
START = REPO / "docs" / "results" / "sero_mini_start"


def _script():
    spec = importlib.util.spec_from_file_location("compare_sero_mini", REPO / "scripts" / "compare_sero_mini.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses resolve their annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


def test_matched_group_size_follows_the_target_and_stays_in_bounds():
    m = _script()
    cfg = m.Config(tasks_per_step=4, group_size=4, max_group_size=16)
    assert m.matched_group_size(200.0, 100.0, 4.0, cfg) == 6  # 100 steps to go, 4 tasks x 4 turns per episode
    assert m.matched_group_size(100.0, 100.0, 4.0, cfg) == 4  # never below the plain group size
    assert m.matched_group_size(10_000.0, 0.0, 4.0, cfg) == 16  # capped


def test_matched_runs_start_when_their_target_is_already_done_or_finishes_now():
    m = _script()
    sero, matched = "GraphGPO + SERO", "GraphGPO + matched steps"
    order: list[tuple] = []

    def run(key):
        v, arm, seed = key
        assert m.ARMS[arm].match_steps_of is None or (v, sero, seed) in done  # never before its target
        return {"variant": v, "arm": arm, "seed": seed}

    def finished(r):
        done[(r["variant"], r["arm"], r["seed"])] = r
        order.append((r["variant"], r["arm"], r["seed"]))

    with ThreadPoolExecutor(2) as pool:
        done: dict = {("word", sero, 0): {}, ("readable", sero, 0): {}}  # loaded from an earlier invocation
        todo = [("word", matched, 0), ("readable", matched, 0)]
        m.schedule(lambda k: pool.submit(run, k), todo, done, finished)
        assert sorted(order) == sorted(todo)
        order.clear()
        done = {}
        todo = [("word", "GraphGPO", 0), ("word", matched, 0), ("word", sero, 0), ("readable", matched, 0),
                ("readable", sero, 0)]  # fmt: skip
        m.schedule(lambda k: pool.submit(run, k), todo, done, finished)
        assert sorted(order) == sorted(todo)
        for v in ("word", "readable"):
            assert order.index((v, sero, 0)) < order.index((v, matched, 0))


def test_the_committed_start_loads_and_an_altered_file_is_refused(tmp_path):
    m = _script()
    from sero_mini_start import load_start

    for variant in ("word", "readable", "readable_end"):
        folder, entry = load_start(START, variant)
        assert (folder / "model.safetensors").exists() and entry["step"] % 250 == 0
    copy = tmp_path / "start"
    shutil.copytree(START, copy)
    with (copy / "word" / "config.json").open("a") as f:
        f.write(" ")
    with pytest.raises(SystemExit, match="sha256 differs"):
        load_start(copy, "word")
    with pytest.raises(SystemExit, match="no start artefact"):
        m.main(m.Config(out=str(tmp_path / "out"), start=str(tmp_path / "nowhere")))
    with pytest.raises(SystemExit, match="unknown arm"):
        m.main(m.Config(out=str(tmp_path / "out"), arms=("GraphGPO", "Branching")))
    with pytest.raises(SystemExit, match=r"matches the env steps of 'GraphGPO \+ SERO'"):
        m.main(m.Config(out=str(tmp_path / "out"), arms=("GraphGPO + matched steps",)))
    assert not (tmp_path / "out").exists()  # refused before writing anything


@pytest.mark.slow
def test_smoke_every_default_arm_from_one_start_and_the_verdict_runs(tmp_path):
    """~2 min CPU: a tiny start (10 BC steps), both variants, the five default arms, 1 seed x 2 steps."""
    m = _script()
    from sero_mini_start import StartConfig, build_start

    build_start(StartConfig(out=str(tmp_path / "start"), variants=m.Config.variants, bc_steps=10, every=5))
    cfg = m.Config(out=str(tmp_path / "out"), start=str(tmp_path / "start"), seeds=(0,), steps=2, eval_every=1,
                   eval_episodes=1, final_eval_episodes=1, gate_steps=3, tasks_per_step=3, jobs=2,
                   bootstrap=100, skip_failed_gates=False)  # fmt: skip
    result = m.main(cfg)
    saved = json.loads((tmp_path / "out" / m.JSON_NAME).read_text())
    assert result["complete"] and saved["complete"]
    assert set(saved["variants"]) == {"word", "readable_end"}
    assert saved["verdict"]["positive_control"].get("variant", "readable_end") == "readable_end"
    assert all(v["gate"]["steps"] == 3 and v["gate"]["lr"] == cfg.lr for v in saved["variants"].values())
    for name, v in saved["variants"].items():
        assert {"p_back_wrong", "p_buy_right", "p_click_right"} <= set(v["gate"])
        runs = {r["arm"]: r for r in v["runs"]}
        assert set(runs) == set(m.DEFAULT_ARMS)
        start = runs["GraphGPO"]["evals"][0]
        for run in runs.values():
            assert run["evals"][0] == start  # one start for every arm
            assert [e["step"] for e in run["evals"]] == [0, 1, 2] and len(run["curves"]) == 2
            assert len(run["evals"][-1]["heldout_per_task"]) == 192 and len(run["evals"][-1]["train_per_task"]) == 24
            assert all(0.0 <= e[k] <= 1.0 for e in run["evals"] for k in ("heldout_p_back_wrong",
                       "heldout_p_buy_right", "heldout_p_click_right"))  # fmt: skip
        assert all(c["sero_succeeded"] > 0 for c in runs["GraphGPO + SERO"]["curves"])
        for arm in ("GraphGPO + SERO", "GraphGPO + supervised oracle rows"):  # per-step policy / oracle gradient norms
            assert all(c["grad_norm_oracle"] > 0 and c["grad_norm_policy"] >= 0 for c in runs[arm]["curves"])
            assert all(0 < c["oracle_token_share"] < 1 for c in runs[arm]["curves"])
        assert all("grad_norm_oracle" not in c for c in runs["GraphGPO"]["curves"])
        assert runs["GraphGPO + matched steps"]["env_steps"] > runs["GraphGPO"]["env_steps"]
        read = saved["verdict"]["variants"][name]
        assert read["verdict"] in ("SUPPORT", "REFUTATION", "INCONCLUSIVE", "VOID", "CANNOT TEST SERO")
        assert set(read["contrasts"]) == {"GraphGPO", "GraphGPO + matched steps", "GraphGPO + supervised oracle rows"}
    assert (tmp_path / "out" / m.PNG_NAME).stat().st_size > 10_000
