"""MiniShop: WebShop's shape in miniature, with numbered actions and one deciding word.

Pages (every page lists its commands, each followed by its label, and the action is one label, as in WebShop's
numbered view `envkit.envs.numbered`):

    results   <noun> $<price> <attribute> opt1 .. opt4 (4 items)  -> that item's page
    item      buy <item> opt1 (commits: the episode ends)         ;  back to results opt2
    done      reward 1.0 when the bought item shows the instruction's word, else 0.0

Every observation ENDS with the instruction (``find the mug that is amber``): it names one attribute word, and
exactly one listed item shows it, right before its label (``mug $30 amber opt3``). So the deciding fact is one
word, and a model that learned to copy the label that follows the instruction's last word in the listing (an
induction-style lookup, blind to which word it is) solves tasks whose words it never saw. The label follows its
command (``... amber opt3``, not ``opt3 ... amber``) for that reason.

A wrong pick is recoverable until ``buy``: ``back to results`` and another click cost two steps, so from any
state the right item can still be bought within ``max_steps`` (8) unless the budget is spent (the shortest
finish from the worst state, a wrong item's page, is 3 steps). Only ``buy`` commits; a wrong buy ends the
episode with reward 0.

Hostile input: anything that is not exactly a listed label (``opt3`` on a page with 2 commands, ``opt0``, junk
text, a command's text, non-ASCII digits) is an invalid action: it costs a step, changes nothing else, gives
reward 0, and the observation starts with ``invalid action: answer with a listed label``. Non-string or
over-long actions are refused before the env sees them (`envkit.snapshot.SnapshotEnvBase`).

``info``: ``admissible_actions`` (the labels), ``commands``, ``instruction``, ``page``, ``won`` / ``success``,
``invalid``, ``step``, ``task_id`` and ``state_key`` (`state_key`: the exact state for GiGPO / GraphGPO).

Tasks (`envkit.envs.minishop.tasks`): ``reset(seed=s)`` plays task ``s % len(tasks)`` of the env's split
(``options={"task": k}`` picks task k). Snapshots are native: the whole state is a small tuple.
"""

from __future__ import annotations

import re
from typing import Any, SupportsFloat

from envkit.credit.state_keys import digest
from envkit.envs.minishop.tasks import ATTRIBUTES, NOUNS, MiniTask, make_tasks
from envkit.snapshot import Snapshot, SnapshotEnvBase

LABEL_RE = re.compile(r"^\s*opt([0-9]+)\s*$", re.ASCII)
#: words of the env's own texts (pages, commands, feedback)
FIXED_WORDS: tuple[str, ...] = (
    "find", "the", "that", "is", "page", "results", "item", "done", "choose", "one", "back",
    "to", "buy", "now", "you", "bought", "reward", "invalid", "action", "answer", "with", "a", "listed", "label",
    *(f"opt{k}" for k in range(1, 9)),
)  # fmt: skip
#: the item page's verdict in the readable variant (``readable=True``): the right item's page shows ``match``
READABLE_WORDS: tuple[str, ...] = ("match", "nomatch")
#: where that word stands (`MiniShopEnv` ``marker``)
MARKERS: tuple[str, ...] = ("top", "end")


def vocabulary() -> set[str]:
    """Every word an observation or action of either split can contain (a word-level tokenizer's word list)."""
    return {
        *ATTRIBUTES,
        *NOUNS,
        *FIXED_WORDS,
        *READABLE_WORDS,
        *(str(p) for p in range(5, 100)),
        ":",
        ";",
        ",",
        "$",
        ".",
    }


class MiniShopEnv(SnapshotEnvBase):
    """See the module docstring.

    Args:
        split: ``train`` or ``heldout`` (`envkit.envs.minishop.tasks.make_tasks`).
        max_steps: Step budget of an episode (truncation after it).
        evaluation: Evaluation envs refuse oracles.
        readable: The readable variant (SERO's positive control, issue 32): an item page also shows ``match`` (the
            item shows the instruction's word) or ``nomatch``, so whether to buy or go back is one fixed word to
            read, not a comparison of two words the policy may never have seen. The results page is unchanged.
        rotations: 1, or 4: every task in all four rotations of its listing (`make_tasks`).
        marker: Where the readable variant's ``match`` / ``nomatch`` stands: ``top`` (after the page's name, the
            v2 positive control) or ``end`` (the observation's last word, after the instruction: right where the
            policy answers; issue 32's v3 positive control).
    """

    #: env steps taken by every MiniShop env of this process (policy and oracle alike; never part of a state):
    #: `scripts/compare_sero_mini.py` measures each arm's env steps per training step with it
    steps_in_process = 0

    reset_options = frozenset({"task"})

    def __init__(
        self, split: str = "train", max_steps: int = 8, evaluation: bool = False, readable: bool = False,
        rotations: int = 1, marker: str = "top",
    ) -> None:  # fmt: skip
        super().__init__(evaluation=evaluation, max_action_length=256)
        if max_steps < 3:
            raise ValueError(f"MiniShopEnv: max_steps must be >= 3 (the finish from a wrong item), got {max_steps}")
        if marker not in MARKERS:
            raise ValueError(f"MiniShopEnv: marker must be one of {MARKERS}, got {marker!r}")
        self.split, self.max_steps, self.readable, self.marker = split, int(max_steps), bool(readable), marker
        self.tasks: tuple[MiniTask, ...] = make_tasks(split, rotations)
        self.metadata = {**type(self).metadata, "action_format": "numbered"}
        self._task = 0
        self._page = "results"
        self._item = -1
        self._t = 0
        self._bought = -1
        self._feedback = ""

    def state_settings(self) -> dict[str, Any]:
        return {"split": self.split, "max_steps": self.max_steps, "readable": self.readable, "marker": self.marker,
                "tasks": len(self.tasks)}  # fmt: skip

    # ----- state, read by the oracle ---------------------------------------------------------------------
    @property
    def task(self) -> MiniTask:
        return self.tasks[self._task]

    @property
    def page(self) -> str:
        return self._page

    @property
    def item(self) -> int:
        """The item whose page is shown (-1 off the item page)."""
        return self._item

    @property
    def steps_left(self) -> int:
        return self.max_steps - self._t

    def state_key(self) -> str:
        """``info["state_key"]`` (`envkit.credit.state_keys`): a digest of the split, task, page, shown item and bought
        item; not of the step count or of an invalid action's feedback (an invalid action leaves the state as it was)."""
        return digest("minishop", self.split, self._task, self._page, self._item, self._bought)

    def item_text(self, k: int) -> str:
        """Item k as listed: ``<noun> $<price> <attribute>`` (the deciding word last, right before its label)."""
        task = self.task
        return f"{task.noun} ${task.prices[k]} {task.items[k]}"

    def commands(self) -> tuple[str, ...]:
        """The commands of the current page, in label order."""
        if self._page == "results":
            return tuple(self.item_text(k) for k in range(len(self.task.items)))
        if self._page == "item":
            return (f"buy {self.item_text(self._item)}", "back to results")
        return ()

    # ----- rendering -------------------------------------------------------------------------------------
    def _won(self) -> bool:
        return self._page == "done" and self._bought == self.task.answer

    def _render(self) -> tuple[str, dict[str, Any]]:
        task = self.task
        parts = [f"page: {self._page}"]
        verdict = READABLE_WORDS[0] if self._item == task.answer else READABLE_WORDS[1]
        shows = self.readable and self._page == "item"
        if shows and self.marker == "top":
            parts.append(verdict)
        cmds = self.commands()
        labels = [f"opt{k + 1}" for k in range(len(cmds))]
        if cmds:
            parts.append("choose one: " + " , ".join(f"{c} {lab}" for c, lab in zip(cmds, labels, strict=True)))
        if self._page == "done":
            parts.append(f"you bought {self.item_text(self._bought)} ; reward {float(self._won()):.1f}")
        if self._feedback:
            parts.insert(0, self._feedback)
        parts.append(task.instruction)
        if shows and self.marker == "end":
            parts.append(verdict)
        won = self._won()
        info = {
            "admissible_actions": labels, "commands": list(cmds), "instruction": task.instruction,
            "page": self._page, "won": won, "success": won, "invalid": bool(self._feedback), "step": self._t,
            "task_id": f"minishop-{self.split}-{self._task}", "state_key": self.state_key(),
        }  # fmt: skip
        return " ; ".join(parts), info

    # ----- SnapshotEnvBase -------------------------------------------------------------------------------
    def _reset(self, *, seed: int | None, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        if "task" in options:
            k = options["task"]
            if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < len(self.tasks):
                raise ValueError(f"MiniShop option task must be an int in 0..{len(self.tasks) - 1}, got {k!r}")
        else:
            k = (seed if seed is not None else int(self.np_random.integers(0, 2**31 - 1))) % len(self.tasks)
        self._task, self._page, self._item, self._t, self._bought, self._feedback = int(k), "results", -1, 0, -1, ""
        return self._render()

    def _step(self, action: str) -> tuple[str, SupportsFloat, bool, bool, dict[str, Any]]:
        MiniShopEnv.steps_in_process += 1
        self._t += 1
        cmds = self.commands()
        m = LABEL_RE.match(action)
        k = int(m.group(1)) - 1 if m else -1
        self._feedback = ""
        if not 0 <= k < len(cmds):
            self._feedback = f"invalid action: answer with a listed label opt1 to opt{len(cmds)}"
        elif self._page == "results":
            self._page, self._item = "item", k
        elif self._page == "item":
            if k == 0:
                self._page, self._bought = "done", self._item
            else:
                self._page, self._item = "results", -1
        obs, info = self._render()
        terminated = self._page == "done"
        truncated = not terminated and self._t >= self.max_steps
        return obs, float(info["won"]), terminated, truncated, info

    def _snapshot(self) -> Any:
        return (self._task, self._page, self._item, self._t, self._bought, self._feedback)

    def _restore(self, payload: Any, snapshot: Snapshot) -> tuple[str, dict[str, Any]]:
        self._task, self._page, self._item, self._t, self._bought, self._feedback = payload
        return self._render()


class MiniShopHeldoutEnv(MiniShopEnv):
    """`MiniShopEnv` on the held-out tasks, an evaluation env by default (oracles refused); ``envkit/MiniShopHeldout-v0``."""

    def __init__(self, split: str = "heldout", max_steps: int = 8, evaluation: bool = True, readable: bool = False,
                 rotations: int = 1, marker: str = "top") -> None:  # fmt: skip
        super().__init__(split=split, max_steps=max_steps, evaluation=evaluation, readable=readable,
                         rotations=rotations, marker=marker)  # fmt: skip


class MiniShopHeldoutRotatedEnv(MiniShopHeldoutEnv):
    """The held-out tasks in all four rotations of their listing (192 tasks; a positional policy scores exactly
    1/4); ``envkit/MiniShopHeldoutRotated-v0``."""

    def __init__(self, max_steps: int = 8, evaluation: bool = True) -> None:
        super().__init__(max_steps=max_steps, evaluation=evaluation, rotations=4)


class MiniShopReadableEnv(MiniShopEnv):
    """The readable variant on the train tasks (item pages show ``match`` / ``nomatch``);
    ``envkit/MiniShopReadable-v0``."""

    def __init__(self, max_steps: int = 8, evaluation: bool = False) -> None:
        super().__init__(max_steps=max_steps, evaluation=evaluation, readable=True)


class MiniShopReadableHeldoutRotatedEnv(MiniShopHeldoutEnv):
    """The readable variant on the held-out tasks in all four rotations; ``envkit/MiniShopReadableHeldoutRotated-v0``."""

    def __init__(self, max_steps: int = 8, evaluation: bool = True) -> None:
        super().__init__(max_steps=max_steps, evaluation=evaluation, readable=True, rotations=4)


class MiniShopReadableEndEnv(MiniShopEnv):
    """The readable variant with ``match`` / ``nomatch`` as the observation's last word (after the instruction);
    ``envkit/MiniShopReadableEnd-v0``."""

    def __init__(self, max_steps: int = 8, evaluation: bool = False) -> None:
        super().__init__(max_steps=max_steps, evaluation=evaluation, readable=True, marker="end")


class MiniShopReadableEndHeldoutRotatedEnv(MiniShopHeldoutEnv):
    """`MiniShopReadableEndEnv` on the held-out tasks in all four rotations;
    ``envkit/MiniShopReadableEndHeldoutRotated-v0``."""

    def __init__(self, max_steps: int = 8, evaluation: bool = True) -> None:
        super().__init__(max_steps=max_steps, evaluation=evaluation, readable=True, rotations=4, marker="end")
