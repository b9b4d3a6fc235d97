"""``envkit/WebShop-v0``: the WebShop text env with native snapshots.

Usage::

    import gymnasium, envkit
    env = gymnasium.make("envkit/WebShop-v0")                   # embedded generated catalog, text observations
    obs, info = env.reset(seed=0)                               # a random train goal
    obs, info = env.reset(seed=0, options={"goal_index": 3})    # goal 3 of the (shuffled) goal list
    obs, r, terminated, truncated, info = env.step("search[lavender shampoo]")
    s = env.snapshot(); ...; env.restore(s)

Constructor keywords (all optional): ``data_dir`` (WebShop's data files; default ``$WEBSHOP_DATA`` when it holds
a product file, else the embedded catalog), ``observation_mode`` (``text`` | ``text_rich`` | ``html``),
``split`` (``train`` | ``test`` | ``all``: which goals a reset without ``goal_index`` draws from; test = the first
500 goals as in verl-agent), ``test_goals``, ``human_goals``, ``num_products``, ``max_steps`` (15, verl-agent's
limit; the step that reaches it is truncated), ``catalog_seed``, ``evaluation``, ``reward_mode`` (``upstream``,
the default: upstream's ``get_reward``; ``legacy``: envkit's earlier score, see `envkit.envs.webshop.reward_legacy`).

Reward: 0 on every step except ``click[buy now]``, which ends the episode with WebShop's score in [0, 1]
(`envkit.envs.webshop.reward`). ``info``: ``admissible_actions``, ``success``/``won`` (score == 1.0), ``invalid``,
``task_id``, ``score``, ``goal_index``, ``instruction``, ``page``, ``url``, ``step``, ``feedback``, ``state_key``
(the exact state: goal + session, `state_key`), and on the done page ``reward_info`` (the score's parts). Invalid actions cost a step, change nothing and prefix the
observation with ``Invalid action: <why>.``.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any, SupportsFloat

from envkit.capability import SnapshotCapability
from envkit.envs.webshop.catalog import load_catalog
from envkit.envs.webshop.products import DEFAULT_TEST_GOALS, Catalog, WebShopGoal
from envkit.envs.webshop.render import OBSERVATION_MODES, render_html, to_text, to_text_rich
from envkit.envs.webshop.scoring import DEFAULT_REWARD_MODE, REWARD_MODES, get_reward
from envkit.envs.webshop.search import SearchEngine, engine_for
from envkit.envs.webshop.shop import (
    Element,
    ShopState,
    admissible_actions,
    click,
    clickables,
    page_elements,
    relative_href,
    search_query,
    state_path,
    transition,
)
from envkit.snapshot import Snapshot, SnapshotEnvBase


@dataclass(frozen=True)
class WebShopConfig:
    """Options of the WebShop envs (see the module docstring for each field)."""

    data_dir: str | None = None
    observation_mode: str = "text"
    split: str = "train"
    test_goals: int = DEFAULT_TEST_GOALS
    human_goals: bool = False
    num_products: int | None = None
    max_steps: int = 15
    catalog_seed: int = 0
    reward_mode: str = DEFAULT_REWARD_MODE

    def __post_init__(self) -> None:
        if self.reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {self.reward_mode!r}")
        if self.observation_mode not in OBSERVATION_MODES:
            raise ValueError(f"observation_mode must be one of {OBSERVATION_MODES}, got {self.observation_mode!r}")
        if self.split not in ("train", "test", "all"):
            raise ValueError(f"split must be 'train', 'test' or 'all', got {self.split!r}")
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.test_goals < 0:
            raise ValueError(f"test_goals must be >= 0, got {self.test_goals}")


@dataclass(frozen=True)
class EpisodeState:
    """Everything that defines the env's state (the native snapshot payload; immutable)."""

    goal_index: int
    shop: ShopState
    t: int = 0
    history: tuple[str, ...] = ()
    feedback: str | None = None
    truncated: bool = field(default=False)


@dataclass(frozen=True)
class WebShopPayload:
    """The text env's native snapshot: the state, plus the observation and info it showed (restore is a lookup)."""

    state: EpisodeState
    mode: str
    obs: str
    info: tuple[tuple[str, Any], ...]


def state_key(state: EpisodeState) -> str:
    """``info["state_key"]``: a digest of the goal and the session state (`ShopState`: page, query, result page,
    results, product, chosen options, sub-page, visited products, score); not the step count or the last
    action's feedback, so the same page with the same session is the same state whatever led there."""
    shop = state.shop
    parts = (state.goal_index, shop.page, shop.query, shop.page_num, shop.results, shop.asin, tuple(sorted(shop.options)),
             shop.sub, tuple(sorted(shop.visited)), shop.score)  # fmt: skip
    # repr of str / int / float / None tuples is stable across processes and ~10x cheaper than JSON
    return hashlib.blake2b(repr(parts).encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


class WebShopCore:
    """Catalog, search engine and observation rendering shared by the text and browser envs."""

    def __init__(self, config: WebShopConfig):
        self.config = config
        self.catalog: Catalog = load_catalog(
            config.data_dir,
            human_goals=config.human_goals,
            num_products=config.num_products,
            seed=config.catalog_seed,
        )
        if not self.catalog.goals:
            raise ValueError(
                f"the catalog {self.catalog.source!r} has no goals (no product has instruction attributes)"
            )
        self.engine: SearchEngine = engine_for(self.catalog)
        self.indices = self.catalog.split_indices(config.split, config.test_goals)

    def goal(self, index: int) -> WebShopGoal:
        return self.catalog.goals[index]

    def check_goal_index(self, value: Any) -> int:
        n = len(self.catalog.goals)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < n:
            raise ValueError(f"reset option goal_index must be an int in 0..{n - 1}, got {value!r}")
        return value

    def observation(self, state: EpisodeState, elements: tuple[Element, ...]) -> str:
        mode = self.config.observation_mode
        if mode == "text":
            page = to_text(elements)
        elif mode == "text_rich":
            page = to_text_rich(elements)
        else:
            goal = self.goal(state.goal_index)
            page = render_html(
                state.shop,
                elements,
                lambda key: relative_href(
                    state_path(click(state.shop, key, self.catalog, goal, self.config.reward_mode))
                ),
                "search",
            )
        if state.feedback:
            sep = " [SEP] " if mode == "text" else "\n"
            return f"Invalid action: {state.feedback}.{sep}{page}"
        return page

    def info(self, state: EpisodeState, elements: tuple[Element, ...]) -> dict[str, Any]:
        goal = self.goal(state.goal_index)
        shop = state.shop
        score = float(shop.score) if shop.score is not None else 0.0
        info: dict[str, Any] = {
            "admissible_actions": admissible_actions(shop, elements) if shop.page != "done" else [],
            "success": shop.page == "done" and score == 1.0,
            "won": shop.page == "done" and score == 1.0,
            "invalid": state.feedback is not None,
            "task_id": f"webshop/{state.goal_index}",
            "score": score,
            "goal_index": state.goal_index,
            "instruction": goal.instruction_text,
            "page": shop.page,
            "url": state_path(shop),
            "step": state.t,
            "feedback": state.feedback or "",
            "state_key": state_key(state),
        }
        if shop.page == "done":
            p = self.catalog.by_asin[shop.asin or ""]
            price, opts = self.catalog.prices[p.asin], shop.options_dict()
            info["reward_info"] = get_reward(p, goal, price, opts, self.config.reward_mode).as_dict()
        return info


class WebShopEnvBase(SnapshotEnvBase):
    """What the text and browser envs share: the config and `WebShopCore`, the goal draw, the step bookkeeping.

    Args:
        config: The env's options; or pass them one by one as `options` (the fields of `WebShopConfig`, e.g.
            ``split="test", max_steps=30``: what ``gymnasium.make("envkit/WebShop-v0", **options)`` passes).
        evaluation: Evaluation env (oracles refuse to run).
    """

    metadata = {"render_modes": [], **SnapshotCapability().metadata()}
    reset_options = frozenset({"goal_index"})
    config_class = WebShopConfig

    def __init__(self, config: WebShopConfig | None = None, *, evaluation: bool = False, **options: Any):
        super().__init__(evaluation=evaluation)
        if config is not None and options:
            raise TypeError(f"pass either config= or WebShopConfig's fields, not both (got {sorted(options)})")
        self.config = config if config is not None else WebShopConfig(**options)
        self.core = WebShopCore(self.config)
        self._state = EpisodeState(0, ShopState())

    @property
    def catalog(self) -> Catalog:
        return self.core.catalog

    def state_settings(self) -> dict[str, Any]:
        """The config's fields and the catalog actually loaded (``data_dir=None`` depends on ``$WEBSHOP_DATA``)."""
        return {**super().state_settings(), "catalog": self.catalog.source}

    #: ``search_query(text)``: a valid search argument from free text (`envkit.envs.webshop.shop.search_query`).
    search_query = staticmethod(search_query)

    @property
    def goal(self) -> WebShopGoal:
        """The current goal (privileged: for oracles and analysis)."""
        return self.core.goal(self._state.goal_index)

    @property
    def state(self) -> EpisodeState:
        """The current state (immutable; the browser env reads it back from its URL and the server session)."""
        return self._state

    def _draw_goal(self, options: dict[str, Any]) -> int:
        """The reset's goal: ``options["goal_index"]``, else one of the split's goals drawn from the seed."""
        if "goal_index" in options:
            return self.core.check_goal_index(options["goal_index"])
        idx = self.core.indices
        return idx[int(self.np_random.integers(len(idx)))]

    def _advance(self, action: str, shop: ShopState, why: str | None) -> tuple[bool, bool]:
        """Record a step that led to `shop` (`why`: why the action was refused); returns (terminated, truncated)."""
        st = self._state
        t = st.t + 1
        terminated = shop.page == "done" and why is None
        truncated = not terminated and t >= self.config.max_steps
        self._state = EpisodeState(st.goal_index, shop, t, (*st.history, action), why, truncated)
        return terminated, truncated


class WebShopEnv(WebShopEnvBase):
    """WebShop as text; see the module docstring."""

    def __init__(self, config: WebShopConfig | None = None, *, evaluation: bool = False, **options: Any):
        super().__init__(config, evaluation=evaluation, **options)
        self._elements: tuple[Element, ...] = ()
        self._elements_of: ShopState | None = None
        self._last: tuple[str, dict[str, Any]] = ("", {})

    # ----- helpers -----------------------------------------------------------------------------------------
    def _page(self, shop: ShopState) -> tuple[Element, ...]:
        if self._elements_of is not shop:
            self._elements = page_elements(shop, self.core.catalog, self.core.goal(self._state.goal_index))
            self._elements_of = shop
        return self._elements

    def _observe(self) -> tuple[str, dict[str, Any]]:
        elements = self._page(self._state.shop)
        self._last = (self.core.observation(self._state, elements), self.core.info(self._state, elements))
        return self._last

    # ----- SnapshotEnvBase ---------------------------------------------------------------------------------
    def _reset(self, *, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        self._state = EpisodeState(self._draw_goal(options), ShopState())
        return self._observe()

    def _step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        st = self._state
        core = self.core
        shop, why = transition(
            st.shop, action, core.catalog, core.goal(st.goal_index), core.engine, core.config.reward_mode
        )
        terminated, truncated = self._advance(action, shop, why)
        obs, info = self._observe()
        reward = float(shop.score or 0.0) if terminated else 0.0
        return obs, reward, terminated, truncated, info

    def _snapshot(self) -> WebShopPayload:
        info = dict(self._last[1])
        info["admissible_actions"] = tuple(info["admissible_actions"])
        if "reward_info" in info:
            info["reward_info"] = tuple(info["reward_info"].items())
        return WebShopPayload(self._state, self.config.observation_mode, self._last[0], tuple(info.items()))

    def _restore(self, payload: Any, snapshot: Snapshot) -> tuple[str, dict[str, Any]]:
        if not isinstance(payload, WebShopPayload):
            raise TypeError(f"not a WebShop snapshot payload: {type(payload).__name__}")
        self.core.check_goal_index(payload.state.goal_index)
        self._state = payload.state
        if payload.mode != self.config.observation_mode:
            return self._observe()
        info = dict(payload.info)
        info["admissible_actions"] = list(info["admissible_actions"])
        if "reward_info" in info:
            info["reward_info"] = dict(info["reward_info"])
        self._last = (payload.obs, info)
        return payload.obs, info

    def valid_clicks(self) -> tuple[str, ...]:
        """The ``click[...]`` names on the current page."""
        return clickables(self._page(self._state.shop))
