"""EDEN's anchor bank: candidate tokens, scoring, greedy complementary selection (docs/methods.md section 5, ours).

API summary (numpy; no torch needed):
    decoded_vocab(tokenizer) -> list[str]                     the text of each token id (HF tokenizer)
    candidate_tokens(embeddings (V, d), vocab, percentiles=(25, 75)) -> (C,) token ids
        single-word alphabetic tokens whose embedding norm is within the percentiles of those tokens' norms
    AnchorScore(validity, accuracy, rescue_rate)              one candidate's measured behaviour
    anchor_score(valid (P, n), correct (P, n), clean_solved (P,)) -> AnchorScore   from rollouts on P prompts
    select_anchors(embeddings, candidate_ids, score_fn, *, k=8, max_cos=0.5, ...) -> AnchorBank
    AnchorBank(token_ids (K,), vectors (K, d), scores)        frozen; .save(path) / AnchorBank.load(path)
    AnchorBank.from_tokens(embeddings, token_ids)             a bank without selection (ablations, tests)

Selection (ours, docs/methods.md section 5): score each candidate with ``score_fn(token_id) -> AnchorScore`` (the caller
runs noisy rollouts with that token's embedding as the anchor on ~200 training prompts), rank by
``w_v * validity + w_a * accuracy + w_r * rescue_rate`` among candidates with validity >= ``min_validity``, and
take them greedily while the new anchor's cosine similarity to every chosen one stays below ``max_cos``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import tokenizers
    from transformers import PreTrainedTokenizerBase

__all__ = [
    "AnchorBank",
    "AnchorScore",
    "anchor_score",
    "candidate_tokens",
    "decoded_vocab",
    "select_anchors",
]

_WORD_PREFIXES = ("Ġ", "▁", " ")  # byte-level BPE / sentencepiece word-start markers


def decoded_vocab(tokenizer: PreTrainedTokenizerBase | tokenizers.Tokenizer) -> list[str]:
    """The text of every token id of a HF tokenizer or a ``tokenizers.Tokenizer`` (one entry per id).

    Uses the raw token strings (``convert_ids_to_tokens``: fast, word-start markers such as ``Ġ``/``▁`` kept and
    understood by `candidate_tokens`; WordPiece continuations ``##x`` are never words), else ``batch_decode``.
    """
    if hasattr(tokenizer, "id_to_token") and hasattr(tokenizer, "get_vocab_size"):  # a `tokenizers.Tokenizer`
        return [str(tokenizer.id_to_token(i) or "") for i in range(tokenizer.get_vocab_size(with_added_tokens=True))]
    n = len(tokenizer)
    if hasattr(tokenizer, "convert_ids_to_tokens"):
        return [str(t) if t is not None else "" for t in tokenizer.convert_ids_to_tokens(list(range(n)))]
    return [str(s) for s in tokenizer.batch_decode([[i] for i in range(n)])]


def _is_word(text: str) -> bool:
    word = text
    while word[:1] in _WORD_PREFIXES and word:
        word = word[1:]
    return len(word) >= 2 and word.isascii() and word.isalpha()


def candidate_tokens(
    embeddings: np.ndarray, vocab: Sequence[str], percentiles: tuple[float, float] = (25.0, 75.0)
) -> np.ndarray:
    """Ids of single-word alphabetic tokens whose embedding norm is between the given percentiles.

    Args:
        embeddings: (V, d) input-embedding matrix of the model (rows may outnumber ``vocab``: padding rows).
        vocab: Decoded text of each token id (`decoded_vocab`); a word is >= 2 ASCII letters after an optional
            word-start marker or leading space.
        percentiles: Norm band, computed over the word tokens' norms.

    Returns:
        (C,) int64 token ids, ascending.

    Raises:
        ValueError: no token qualifies (wrong vocab for these embeddings?).
    """
    emb = np.asarray(embeddings, dtype=np.float64)
    if emb.ndim != 2 or emb.shape[0] < len(vocab):
        raise ValueError(f"embeddings must be (V, d) with V >= len(vocab)={len(vocab)}, got {emb.shape}")
    lo_p, hi_p = percentiles
    if not 0.0 <= lo_p < hi_p <= 100.0:
        raise ValueError(f"percentiles must satisfy 0 <= low < high <= 100, got {percentiles}")
    words = np.array([i for i, text in enumerate(vocab) if _is_word(text)], dtype=np.int64)
    if len(words) == 0:
        raise ValueError("no single-word alphabetic token in the vocabulary; pass the decoded vocab of this model")
    norms = np.linalg.norm(emb[words], axis=1)
    lo, hi = np.percentile(norms, [lo_p, hi_p])
    return words[(norms >= lo) & (norms <= hi)]


@dataclass(frozen=True)
class AnchorScore:
    """How a candidate anchor behaves in noisy rollouts on the selection prompts (each in [0, 1]).

    Attributes:
        validity: Share of noisy rollouts whose output is well-formed (parsable answer).
        accuracy: Share of noisy rollouts that are correct.
        rescue_rate: Among prompts with no clean success, the share that some noisy rollout solves.
    """

    validity: float
    accuracy: float
    rescue_rate: float

    def __post_init__(self) -> None:
        for name in ("validity", "accuracy", "rescue_rate"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"AnchorScore.{name} must be in [0, 1], got {v}")

    def combined(self, weights: tuple[float, float, float] = (1.0, 1.0, 1.0)) -> float:
        """``w_v * validity + w_a * accuracy + w_r * rescue_rate``."""
        return weights[0] * self.validity + weights[1] * self.accuracy + weights[2] * self.rescue_rate


def anchor_score(valid: Any, correct: Any, clean_solved: Any) -> AnchorScore:
    """AnchorScore from noisy-rollout outcomes on P selection prompts with n noisy rollouts each.

    Args:
        valid: (P, n) bool, the noisy rollout's output was well-formed.
        correct: (P, n) bool, the noisy rollout was correct.
        clean_solved: (P,) bool, some clean (un-perturbed) rollout solved the prompt.

    Returns:
        AnchorScore; rescue_rate is 0 when every prompt had a clean success.
    """
    v = np.asarray(valid, dtype=bool)
    c = np.asarray(correct, dtype=bool)
    s = np.asarray(clean_solved, dtype=bool)
    if v.shape != c.shape or v.ndim != 2 or s.shape != (v.shape[0],):
        raise ValueError(f"need valid/correct (P, n) and clean_solved (P,); got {v.shape}, {c.shape}, {s.shape}")
    unsolved = ~s
    rescue = float(np.mean(c[unsolved].any(axis=1))) if unsolved.any() else 0.0
    return AnchorScore(float(v.mean()) if v.size else 0.0, float(c.mean()) if c.size else 0.0, rescue)


@dataclass(frozen=True, eq=False)
class AnchorBank:
    """K anchors: vocabulary tokens and their input-embedding rows, fixed during training.

    Attributes:
        token_ids: (K,) int64 token ids.
        vectors: (K, d) float32 embedding rows (copies, read-only).
        scores: The AnchorScore of each anchor (empty when built without scoring).
    """

    token_ids: np.ndarray
    vectors: np.ndarray
    scores: tuple[AnchorScore, ...] = field(default=())

    def __post_init__(self) -> None:
        ids = np.asarray(self.token_ids, dtype=np.int64).reshape(-1)
        vec = np.array(self.vectors, dtype=np.float32, copy=True)
        if vec.ndim != 2 or vec.shape[0] != len(ids) or len(ids) == 0:
            raise ValueError(
                f"AnchorBank needs (K,) token_ids and (K, d) vectors with K >= 1; got {ids.shape}, {vec.shape}"
            )
        if self.scores and len(self.scores) != len(ids):
            raise ValueError("AnchorBank.scores must have one AnchorScore per anchor (or be empty)")
        vec.flags.writeable = False
        ids.flags.writeable = False
        object.__setattr__(self, "token_ids", ids)
        object.__setattr__(self, "vectors", vec)

    def __len__(self) -> int:
        return len(self.token_ids)

    @property
    def dim(self) -> int:
        return int(self.vectors.shape[1])

    @classmethod
    def from_tokens(cls, embeddings: np.ndarray, token_ids: Sequence[int]) -> AnchorBank:
        """A bank of the given tokens' embedding rows (no selection)."""
        ids = np.asarray(token_ids, dtype=np.int64)
        return cls(ids, np.asarray(embeddings)[ids])

    def cosine_matrix(self) -> np.ndarray:
        """(K, K) pairwise cosine similarities of the anchors."""
        unit = self.vectors / np.linalg.norm(self.vectors, axis=1, keepdims=True).clip(min=1e-12)
        return unit.astype(np.float64) @ unit.T.astype(np.float64)

    def save(self, path: str | Path) -> None:
        """Write the bank to an ``.npz`` file."""
        sc = np.array([[s.validity, s.accuracy, s.rescue_rate] for s in self.scores], dtype=np.float64).reshape(-1, 3)
        np.savez(Path(path), token_ids=self.token_ids, vectors=self.vectors, scores=sc)

    @classmethod
    def load(cls, path: str | Path) -> AnchorBank:
        """Read a bank written by `save`."""
        with np.load(Path(path)) as z:
            scores = tuple(AnchorScore(*map(float, row)) for row in z["scores"])
            return cls(z["token_ids"], z["vectors"], scores)


def select_anchors(
    embeddings: np.ndarray,
    candidate_ids: Sequence[int] | np.ndarray,
    score_fn: Callable[[int], AnchorScore],
    *,
    k: int = 8,
    max_cos: float = 0.5,
    max_scored: int | None = 64,
    min_validity: float = 0.5,
    weights: tuple[float, float, float] = (1.0, 1.0, 1.0),
    rng: np.random.Generator | None = None,
) -> AnchorBank:
    """Greedy complementary anchor selection.

    Args:
        embeddings: (V, d) input-embedding matrix.
        candidate_ids: Candidate token ids (`candidate_tokens`).
        score_fn: Measures one candidate (noisy rollouts on the selection prompts) -> AnchorScore.
        k: Number of anchors (8).
        max_cos: Every pair of chosen anchors has cosine similarity < max_cos (0.5).
        max_scored: Score at most this many candidates, drawn uniformly with ``rng`` (None: all).
        min_validity: Candidates below this validity are never chosen.
        weights: Weights of (validity, accuracy, rescue_rate) in the ranking.
        rng: Generator for the candidate subsample (default seed 0).

    Returns:
        AnchorBank ordered by selection (best first).

    Raises:
        ValueError: fewer than k candidates pass the validity and cosine constraints (lower k, raise max_cos
            or max_scored).
    """
    emb = np.asarray(embeddings, dtype=np.float64)
    cands = np.asarray(candidate_ids, dtype=np.int64)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    rng = rng if rng is not None else np.random.default_rng(0)
    if max_scored is not None and len(cands) > max_scored:
        cands = np.sort(rng.choice(cands, size=max_scored, replace=False))
    scored = [(int(t), score_fn(int(t))) for t in cands]
    ranked = sorted(
        ((t, s) for t, s in scored if s.validity >= min_validity), key=lambda ts: (-ts[1].combined(weights), ts[0])
    )
    chosen: list[int] = []
    chosen_scores: list[AnchorScore] = []
    units: list[np.ndarray] = []
    for tok, sc in ranked:
        u = emb[tok] / max(float(np.linalg.norm(emb[tok])), 1e-12)
        if all(float(u @ v) < max_cos for v in units):
            chosen.append(tok)
            chosen_scores.append(sc)
            units.append(u)
            if len(chosen) == k:
                break
    if len(chosen) < k:
        raise ValueError(
            f"only {len(chosen)} of {len(scored)} scored candidates pass validity >= {min_validity} and pairwise "
            f"cosine < {max_cos}; need k={k}: lower k, raise max_cos, or score more candidates (max_scored)"
        )
    return AnchorBank(np.asarray(chosen), emb[chosen], tuple(chosen_scores))
