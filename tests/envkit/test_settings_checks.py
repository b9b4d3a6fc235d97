"""Refusals that keep a run from going silently wrong: a snapshot restored into an env built with other settings,
an unknown reset option, an unknown constructor keyword; each message names the fix (the closest valid name)."""

from __future__ import annotations

import pickle

import gymnasium
import pytest

import envkit
from envkit.errors import SnapshotError, UnknownOptionError, check_names, closest


def test_closest_name_is_by_edit_distance_over_the_whole_name():
    assert closest("goal_idx", ["goal_index", "game"]) == "goal_index"
    assert closest("catalog_sed", ["catalog_seed", "split", "config"]) == "catalog_seed"
    assert closest("zzzz", ["goal_index"]) is None
    with pytest.raises(
        UnknownOptionError, match=r"unknown thing 'lenght'\. Did you mean 'length'\? Valid: goal, length"
    ):
        check_names(["lenght"], ["goal", "length"], "thing")


def test_snapshot_refuses_an_env_built_with_other_settings_and_names_them():
    a = envkit.make("envkit/Toy-v0", max_steps=20)
    a.reset(seed=0, options={"goal": 3})
    s = a.snapshot()
    b = envkit.make("envkit/Toy-v0", max_steps=5)
    b.reset(seed=0)
    with pytest.raises(SnapshotError, match=r"built with max_steps=20; this env has max_steps=5.*max_steps=20"):
        b.restore(pickle.loads(pickle.dumps(s)))
    c = envkit.make("envkit/Toy-v0", max_steps=20)  # same settings: restores, also after a pickle round trip
    assert c.restore(pickle.loads(pickle.dumps(s)))[0] == a.restore(s)[0]


def test_webshop_snapshot_refuses_another_catalog_seed():
    pytest.importorskip("bm25s", reason="WebShop extra not installed: pip install -e '.[webshop]'")
    a = gymnasium.make("envkit/WebShop-v0", data_dir=None)
    a.reset(seed=0)
    s = a.snapshot()
    b = gymnasium.make("envkit/WebShop-v0", data_dir=None, catalog_seed=5)
    b.reset(seed=0)
    with pytest.raises(SnapshotError, match=r"catalog_seed=0; this env has catalog_seed=5"):
        b.restore(s)  # before: restored silently, and the next step raised a raw KeyError


def test_unknown_reset_option_names_the_closest_one():
    env = envkit.make("envkit/Toy-v0")
    with pytest.raises(UnknownOptionError, match=r"ToyEnv reset option 'gaol'\. Did you mean 'goal'\?"):
        env.reset(seed=0, options={"gaol": 3})
    env.reset(seed=0, options={"goal": 3, "length": 8})  # the valid ones still work


def test_webshop_goal_idx_is_refused_not_ignored():
    pytest.importorskip("bm25s", reason="WebShop extra not installed: pip install -e '.[webshop]'")
    env = gymnasium.make("envkit/WebShop-v0", data_dir=None)
    with pytest.raises(UnknownOptionError, match=r"'goal_idx'\. Did you mean 'goal_index'\?"):
        env.reset(seed=0, options={"goal_idx": 3})
    with pytest.raises(
        UnknownOptionError, match=r"WebShopEnv keyword argument 'catalog_sed'\. Did you mean 'catalog_seed'"
    ):
        gymnasium.make("envkit/WebShop-v0", catalog_sed=5)


def test_unknown_constructor_keyword_names_the_closest_one():
    with pytest.raises(UnknownOptionError, match=r"ToyEnv keyword argument 'max_step'\. Did you mean 'max_steps'\?"):
        gymnasium.make("envkit/Toy-v0", max_step=5)
    from envkit.envs.minishop.env import MiniShopHeldoutEnv

    with pytest.raises(UnknownOptionError, match=r"'splt'\. Did you mean 'split'"):
        MiniShopHeldoutEnv(splt="heldout")
    assert MiniShopHeldoutEnv(max_steps=5).max_steps == 5  # a subclass passing valid keywords up is untouched
