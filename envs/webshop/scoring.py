"""The purchase score the shop pays, by ``reward_mode``: upstream's (`envkit.envs.webshop.reward`, the default) or
envkit's earlier one (`envkit.envs.webshop.reward_legacy`, kept to reproduce old runs).

This module sits above both scores, so the legacy score can reuse upstream's parts without the upstream module
importing it back.
"""

from __future__ import annotations

from collections.abc import Mapping

from envkit.envs.webshop.products import Product, WebShopGoal
from envkit.envs.webshop.reward import RewardInfo, upstream_reward

REWARD_MODES = ("upstream", "legacy")
DEFAULT_REWARD_MODE = "upstream"


def get_reward(
    product: Product, goal: WebShopGoal, price: float, options: Mapping[str, str], mode: str = DEFAULT_REWARD_MODE
) -> RewardInfo:
    """Score a purchase of `product` at `price` with the chosen `options` (option group -> value) for `goal`.

    Args:
        mode: ``"upstream"`` (default; `envkit.envs.webshop.reward`) or ``"legacy"`` (envkit's earlier score).
    """
    if mode == "legacy":
        from envkit.envs.webshop.reward_legacy import legacy_reward

        return legacy_reward(product, goal, price, options)
    if mode != "upstream":
        raise ValueError(f"reward_mode must be one of {REWARD_MODES}, got {mode!r}")
    return upstream_reward(product, goal, price, options)
