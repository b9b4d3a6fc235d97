"""MiniShop's tasks: a goal word, a noun, and the attribute words of the listed items (train and held-out splits).

The deciding fact of a task is one ATTRIBUTE word: the instruction names it (``find the mug that is amber``) and
exactly one listed item shows it (``amber mug``). The attribute words are split once: every third word of
`ATTRIBUTES` is held out, the rest are train words, so no held-out goal word (nor any word on a held-out item)
ever appears in a train task, and held-out success measures whether the policy learned to match the instruction's
word rather than which words were right in training. Nouns are shared by both splits (they decide nothing).

Tasks are generated from a fixed seed, so the lists are the same on every machine.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ATTRIBUTES: tuple[str, ...] = (
    "red", "blue", "green", "yellow", "purple", "orange", "pink", "brown", "black", "white", "grey", "silver",
    "golden", "beige", "ivory", "maroon", "navy", "teal", "olive", "coral", "crimson", "amber", "violet", "indigo",
    "cyan", "magenta", "turquoise", "lavender", "khaki", "wooden", "metal", "glass", "plastic", "leather", "cotton",
    "woolen", "silk", "linen", "denim", "velvet", "bamboo", "ceramic", "marble", "stone", "paper", "rubber", "steel",
    "copper", "bronze", "brass", "striped", "dotted", "checkered", "floral", "glossy", "matte", "rustic", "modern",
    "vintage", "tiny", "huge", "round", "square", "oval", "fluffy", "plaid", "sturdy", "folding", "compact",
    "padded", "quilted", "knitted",
)  # fmt: skip
NOUNS: tuple[str, ...] = (
    "mug", "lamp", "chair", "bag", "shirt", "hat", "bottle", "vase", "clock", "pillow", "rug", "sofa", "table",
    "jacket", "scarf", "bowl", "plate", "candle", "basket", "towel",
)  # fmt: skip
HELDOUT_ATTRIBUTES: tuple[str, ...] = ATTRIBUTES[2::3]
TRAIN_ATTRIBUTES: tuple[str, ...] = tuple(w for w in ATTRIBUTES if w not in HELDOUT_ATTRIBUTES)
#: items listed on a results page
ITEMS_PER_TASK = 4
#: tasks per split
SPLIT_SIZES = {"train": 160, "heldout": 48}


@dataclass(frozen=True)
class MiniTask:
    """One task.

    Attributes:
        goal: The attribute word the instruction names (the right item shows it).
        noun: The item noun (the same for every listed item).
        items: The attribute word of each listed item, in listing order (exactly one equals `goal`).
        prices: Each item's price in dollars (shown, decides nothing).
    """

    goal: str
    noun: str
    items: tuple[str, ...]
    prices: tuple[int, ...]

    @property
    def answer(self) -> int:
        """Position (0-based) of the right item in `items`."""
        return self.items.index(self.goal)

    @property
    def instruction(self) -> str:
        return f"find the {self.noun} that is {self.goal}"


def rotate(task: MiniTask, r: int) -> MiniTask:
    """`task` with its listing rotated left by `r` places (items and prices together): the right item moves from
    position ``answer`` to ``(answer - r) % 4``; nothing else changes."""
    n = len(task.items)
    return MiniTask(task.goal, task.noun, tuple(task.items[(i + r) % n] for i in range(n)),
                    tuple(task.prices[(i + r) % n] for i in range(n)))  # fmt: skip


def make_tasks(split: str, rotations: int = 1) -> tuple[MiniTask, ...]:
    """The tasks of `split` (``train`` or ``heldout``); the same tuple on every call.

    Args:
        rotations: 1 (default): the split's tasks as generated. ``ITEMS_PER_TASK`` (4): every task in all four
            rotations of its listing, task ``r * n + k`` being base task k rotated by r (n = the split's size), so
            the right item sits at every position exactly once per base task: a policy that picks by position
            alone succeeds on exactly 1/4 of them (the held-out set with no positional shortcut, issue 32).
    """
    if split not in SPLIT_SIZES:
        raise ValueError(f"MiniShop split must be one of {sorted(SPLIT_SIZES)}, got {split!r}")
    if rotations not in (1, ITEMS_PER_TASK):
        raise ValueError(f"MiniShop rotations must be 1 or {ITEMS_PER_TASK} (all of them), got {rotations!r}")
    base = _base_tasks(split)
    return tuple(rotate(t, r) for r in range(rotations) for t in base)


def _base_tasks(split: str) -> tuple[MiniTask, ...]:
    words = TRAIN_ATTRIBUTES if split == "train" else HELDOUT_ATTRIBUTES
    rng = np.random.default_rng([2026, 12, 2, 0 if split == "train" else 1])
    tasks = []
    for k in range(SPLIT_SIZES[split]):
        goal = words[k % len(words)]  # every word is a goal equally often; also a distractor elsewhere
        others = [w for w in words if w != goal]
        picked = [str(w) for w in rng.choice(others, size=ITEMS_PER_TASK - 1, replace=False)]
        items = [*picked]
        items.insert(int(rng.integers(0, ITEMS_PER_TASK)), goal)
        noun = NOUNS[int(rng.integers(0, len(NOUNS)))]
        prices = tuple(int(p) for p in rng.integers(5, 100, size=ITEMS_PER_TASK))
        tasks.append(MiniTask(goal, noun, tuple(items), prices))
    return tuple(tasks)
