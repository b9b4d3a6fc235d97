"""A single-turn task over a vocabulary of words: continue an ordered list (EDEN / XRPO comparisons).

``"tuesday thursday then"`` -> ``"saturday monday"``: the prompt shows 2 or 3 items of an ordered list (days,
months, numbers one..twenty, planets, rainbow colours, the NATO alphabet) with stride 1 or 2, forwards or
backwards; the answer is the next two items (days and months wrap around). Every token is a whole word, so
EDEN's anchor candidates (`envkit.trainers.explorers.anchors.candidate_tokens`: single-word alphabetic tokens) are
words with a meaning (``march``, ``violet``, ``seven``), not answer digits.

The problems (about 500) are split once, by a hash of their id, into train problems (`sample` draws from them)
and held-out problems (`heldout`), so held-out accuracy measures whether the model learned each list's order,
not the particular prompts it saw.

`word_tokenizer` builds the word-level tokenizer (specials + every word), `save_word_model` a randomly
initialised tiny Llama on it as a Hugging Face folder that `envkit.runtime.models.ModelConfig(path=...)` loads.

Example:
    >>> import numpy as np
    >>> task = WordSequenceTask()
    >>> p = task.sample(np.random.default_rng(0), 1)[0]
    >>> task.score([p], [p.answer])
    [1.0]
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from envkit.trainers.local.tasks import Problem


def _w(text: str) -> tuple[str, ...]:
    return tuple(text.split())


#: name -> (items, wraps around)
LISTS: dict[str, tuple[tuple[str, ...], bool]] = {
    "days": (_w("monday tuesday wednesday thursday friday saturday sunday"), True),
    "months": (_w("january february march april may june july august september october november december"), True),
    "numbers": (
        _w(
            "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
            "seventeen eighteen nineteen twenty"
        ),
        False,
    ),
    "planets": (_w("mercury venus earth mars jupiter saturn uranus neptune"), False),
    "rainbow": (_w("red orange yellow green blue indigo violet"), False),
    "nato": (
        _w(
            "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa "
            "quebec romeo sierra tango uniform victor whiskey xray yankee zulu"
        ),
        False,
    ),
}
PROMPT_WORD = "then"


def _items(name: str, start: int, stride: int, n: int) -> list[str] | None:
    """n items of list `name` from `start` with `stride` (None when a non-wrapping list runs out)."""
    items, wraps = LISTS[name]
    idx = [start + k * stride for k in range(n)]
    if not wraps and not all(0 <= i < len(items) for i in idx):
        return None
    return [items[i % len(items)] for i in idx]


@dataclass(frozen=True)
class WordSequenceTask:
    """Continue an ordered list of words (see the module docstring).

    Attributes:
        shown: How many items a prompt may show (each problem uses one of them).
        answer_len: Items to continue with.
        strides: Step sizes (negative ones are added: backwards).
        heldout_share: Share of the problems held out of `sample` (by a hash of the problem id).
        name: Task name in the logs.
        raw_prompts: Prompts are fed as-is (no chat template).
    """

    shown: tuple[int, ...] = (2, 3)
    answer_len: int = 2
    strides: tuple[int, ...] = (1, 2)
    heldout_share: float = 0.2
    name: str = "words"
    raw_prompts: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.heldout_share < 1.0:
            raise ValueError(f"WordSequenceTask.heldout_share must be in [0, 1), got {self.heldout_share}")
        if min(self.shown) < 2 or self.answer_len < 1:
            raise ValueError("WordSequenceTask: shown items must be >= 2 (stride and direction) and answer_len >= 1")

    @cached_property
    def problems(self) -> tuple[Problem, ...]:
        """Every problem, in a fixed order."""
        out = []
        for name, (items, _) in LISTS.items():
            for n_shown in self.shown:
                for stride in (*self.strides, *(-s for s in self.strides)):
                    for start in range(len(items)):
                        words = _items(name, start, stride, n_shown + self.answer_len)
                        if words is None:
                            continue
                        pid = f"{name}:{start}:{stride}:{n_shown}"
                        prompt = " ".join([*words[:n_shown], PROMPT_WORD])
                        out.append(Problem(task_id=pid, prompt=prompt, answer=" ".join(words[n_shown:])))
        return tuple(out)

    def _held_out(self, p: Problem) -> bool:
        h = int(hashlib.sha256(p.task_id.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        return h < self.heldout_share

    @cached_property
    def train(self) -> tuple[Problem, ...]:
        """The problems `sample` draws from."""
        return tuple(p for p in self.problems if not self._held_out(p))

    @cached_property
    def heldout(self) -> tuple[Problem, ...]:
        """The problems never sampled for training (evaluation)."""
        return tuple(p for p in self.problems if self._held_out(p))

    @cached_property
    def words(self) -> tuple[str, ...]:
        """Every word of the task (sorted, without duplicates)."""
        return tuple(sorted({w for items, _ in LISTS.values() for w in items} | {PROMPT_WORD}))

    def sample(self, rng: np.random.Generator, n: int) -> list[Problem]:
        idx = rng.integers(0, len(self.train), size=n)
        return [self.train[i] for i in idx.tolist()]

    def check(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[tuple[float, bool]]:
        """(reward: exact answer, well-formed: `answer_len` list words) per completion."""
        vocab = set(self.words) - {PROMPT_WORD}
        out = []
        for p, c in zip(problems, completions, strict=True):
            words = c.split()
            ok = len(words) == self.answer_len and all(w in vocab for w in words)
            out.append((float(words == str(p.answer).split()), ok))
        return out

    def score(self, problems: Sequence[Problem], completions: Sequence[str]) -> list[float]:
        return [r for r, _ in self.check(problems, completions)]


def word_tokenizer(words: Sequence[str]) -> Any:
    """A word-level tokenizer: ``<pad> <bos> <eos> <unk>`` then `words`; splits on whitespace and punctuation,
    decodes by joining words with spaces."""
    import tokenizers
    import transformers

    vocab = {w: i for i, w in enumerate(("<pad>", "<bos>", "<eos>", "<unk>", *dict.fromkeys(words)))}
    tok = tokenizers.Tokenizer(tokenizers.models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    return transformers.PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
        padding_side="left",
    )  # fmt: skip


def save_word_model(folder: Path, words: Sequence[str], *, hidden_size: int = 128, layers: int = 4, heads: int = 4,
                    init_seed: int = 0) -> Path:  # fmt: skip
    """A randomly initialised tiny Llama (tied embeddings) on `word_tokenizer(words)`, saved as a Hugging Face folder.

    Llama, not Qwen2 as in `envkit.runtime.models.tiny_model`: transformers 5's ``AutoTokenizer`` forces its Qwen2
    tokenizer class on a qwen2 folder (which drops the word-level model), but honours ``TokenizersBackend`` for
    llama, so `envkit.runtime.models.load_model` gets this tokenizer back.
    """
    import torch
    import transformers

    tok = word_tokenizer(words)
    config = transformers.LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden_size, intermediate_size=hidden_size * 3, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=2 if heads % 2 == 0 else 1, max_position_embeddings=8192,
        tie_word_embeddings=True, pad_token_id=tok.pad_token_id, bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(init_seed)
    model = transformers.LlamaForCausalLM(config)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder
