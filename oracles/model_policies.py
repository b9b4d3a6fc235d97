"""Model-backed rollout policies (local transformers model, OpenAI-compatible chat endpoint) and policy specs.

All implement `envkit.policies.Policy` (a batch of `PolicyInput` -> one action each) and render turns with
`envkit.oracles.prompts` (the same prompt the scorer and the exported SFT data use). The random-admissible and scripted
policies are in `envkit.policies`.

Policy specs (``envkit-oracle rollout --policy SPEC``), parsed by `make_policy`:
    ``random``                         uniform over ``info["admissible_actions"]`` (seeded per episode)
    ``scripted:FILE``                  actions from FILE (a JSON list of strings, or one action per line), cycled
    ``hf:PATH[?k=v&...]``              local causal LM: PATH is a Hugging Face folder, a .gguf file, ``smollm2`` or
                                       ``tiny:bytes``; options ``mode=generate|choose`` (choose: sample among the
                                       admissible actions by their log-probs), ``temperature``, ``max_new_tokens``
    ``openai:URL#MODEL[?k=v&...]``     an OpenAI-compatible server (vLLM: ``openai:http://host:8000/v1#Qwen/...``);
                                       options ``temperature``, ``max_tokens``, ``concurrency``, ``timeout``; the API
                                       key comes from ``$OPENAI_API_KEY`` when set

Example:
    >>> make_policy("random").name
    'random'
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

import numpy as np

from envkit.errors import DataNotFoundError, EnvkitError, require
from envkit.oracles.prompts import PromptConfig, admissible, render, turn_messages
from envkit.policies import Policy, PolicyInput, RandomAdmissiblePolicy, ScriptedPolicy

if TYPE_CHECKING:  # transformers is heavy: imported only where a model is loaded
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def clean_action(text: str) -> str:
    """The first non-empty line of a model reply, stripped (models often add explanations after it)."""
    for line in text.strip().splitlines():
        if line.strip():
            return line.strip()
    return ""


class TransformersPolicy:
    """A local causal LM as a policy.

    Args:
        model: A model path (anything `envkit.runtime.models.ModelConfig.path` accepts) or a loaded causal LM.
        tokenizer: The tokenizer, when `model` is a loaded model.
        mode: ``generate`` (free text, first line of the reply) or ``choose`` (sample one of the admissible actions
            with probability softmax(sequence log-prob / temperature); falls back to generate without a list).
        temperature: Sampling temperature (0: greedy).
        max_new_tokens: Generation length limit.
        seed: Sampling seed (combined with each episode's key and step, so batches do not change the draws in
            ``choose`` mode; ``generate`` mode seeds torch once per batch).
        device: ``cpu``, ``cuda`` or ``auto``.
        prompt: How turns are rendered.
    """

    name = "hf"

    def __init__(
        self,
        model: str | PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase | None = None,
        *,
        mode: str = "generate",
        temperature: float = 1.0,
        max_new_tokens: int = 32,
        seed: int = 0,
        device: str = "auto",
        prompt: PromptConfig | None = None,
    ):
        from envkit.oracles.scorers import TransformersScorer

        if mode not in ("generate", "choose"):
            raise ValueError(f"mode must be 'generate' or 'choose', got {mode!r}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        self.torch = require("torch", "train", what="the transformers policy")
        self.scorer = TransformersScorer(model, tokenizer, device=device, prompt=prompt)
        self.model, self.tokenizer = self.scorer.model, self.scorer.tokenizer
        self.mode, self.temperature, self.max_new_tokens, self.seed = mode, temperature, max_new_tokens, seed
        self.prompt = prompt or PromptConfig()

    def _choose(self, x: PolicyInput, cands: list[str]) -> str:
        lp = np.asarray(self.scorer.sequence_logprobs(x, cands), dtype=np.float64)
        if self.temperature == 0:
            return cands[int(np.argmax(lp))]
        z = lp / self.temperature
        p = np.exp(z - z.max())
        rng = np.random.default_rng([self.seed, x.key, len(x.history)])
        return cands[int(rng.choice(len(cands), p=p / p.sum()))]

    def _generate(self, batch: Sequence[PolicyInput]) -> list[str]:
        torch = self.torch
        texts = [render(self.tokenizer, turn_messages(x, self.prompt)) for x in batch]
        self.tokenizer.padding_side = "left"
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        device = next(self.model.parameters()).device
        torch.manual_seed(hash((self.seed, *(x.key for x in batch), *(len(x.history) for x in batch))) & 0x7FFFFFFF)
        kwargs: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "do_sample": self.temperature > 0}
        if self.temperature > 0:
            kwargs["temperature"] = self.temperature
        with torch.no_grad():
            out = self.model.generate(**{k: v.to(device) for k, v in enc.items()}, **kwargs)
        new = out[:, enc["input_ids"].shape[1] :]
        return [clean_action(t) for t in self.tokenizer.batch_decode(new, skip_special_tokens=True)]

    def act(self, batch: Sequence[PolicyInput]) -> list[str]:
        out: list[str | None] = [None] * len(batch)
        gen = []
        for i, x in enumerate(batch):
            cands = admissible(x.info)
            if self.mode == "choose" and cands:
                out[i] = self._choose(x, cands)
            else:
                gen.append(i)
        if gen:
            for i, a in zip(gen, self._generate([batch[i] for i in gen]), strict=True):
                out[i] = a
        return [a or "" for a in out]


class OpenAIChatPolicy:
    """A policy served by an OpenAI-compatible ``/chat/completions`` endpoint (vLLM, llama.cpp, TGI, OpenAI).

    Requests of one batch run concurrently (``concurrency`` threads). The request seed is derived from `seed`, the
    episode key and the step, so servers that honour ``seed`` give reproducible rollouts.

    Args:
        base_url: The API base, e.g. ``http://localhost:8000/v1``.
        model: The served model name.
        temperature: Sampling temperature.
        max_tokens: Reply length limit.
        concurrency: Parallel requests.
        timeout: Seconds per request.
        seed: Base of the per-request seeds.
        api_key: Bearer token (default ``$OPENAI_API_KEY``; none sent when empty).
        prompt: How turns are rendered.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        temperature: float = 1.0,
        max_tokens: int = 64,
        concurrency: int = 8,
        timeout: float = 120.0,
        seed: int = 0,
        api_key: str | None = None,
        prompt: PromptConfig | None = None,
    ):
        if not base_url.startswith(("http://", "https://")):
            raise EnvkitError(f"the OpenAI-compatible endpoint must be an http(s) URL, got {base_url!r}")
        if not model:
            raise EnvkitError("name the served model: openai:URL#MODEL (e.g. openai:http://localhost:8000/v1#Qwen)")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.temperature, self.max_tokens = model, temperature, max_tokens
        self.concurrency, self.timeout, self.seed = max(1, concurrency), timeout, seed
        self.api_key = os.environ.get("OPENAI_API_KEY", "") if api_key is None else api_key
        self.prompt = prompt or PromptConfig()

    def _one(self, x: PolicyInput) -> str:
        body = {
            "model": self.model,
            "messages": turn_messages(x, self.prompt),
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "n": 1,
            "seed": int(np.random.SeedSequence([self.seed, x.key, len(x.history)]).generate_state(1)[0] & 0x7FFFFFFF),
        }
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, json.dumps(body).encode(), headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                data = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode(errors="replace")
            raise EnvkitError(f"{self.url} answered HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
            raise EnvkitError(
                f"cannot reach the OpenAI-compatible server at {self.url} ({exc}); start it (e.g. `vllm serve "
                f"{self.model}`) or fix the URL in --policy openai:URL#MODEL"
            ) from exc
        try:
            return clean_action(str(data["choices"][0]["message"]["content"] or ""))
        except (KeyError, IndexError, TypeError) as exc:
            raise EnvkitError(f"{self.url} returned no chat completion: {str(data)[:300]}") from exc

    def act(self, batch: Sequence[PolicyInput]) -> list[str]:
        with ThreadPoolExecutor(min(self.concurrency, max(1, len(batch)))) as ex:
            return list(ex.map(self._one, batch))


POLICY_SPECS = "random | scripted:FILE | hf:PATH[?mode=generate|choose&temperature=T] | openai:URL#MODEL"


def _options(text: str) -> tuple[str, dict[str, Any]]:
    base, _, query = text.partition("?")
    opts: dict[str, Any] = {}
    for k, v in parse_qsl(query, keep_blank_values=True):
        try:
            opts[k] = json.loads(v)
        except json.JSONDecodeError:
            opts[k] = v
    return base, opts


def _script(path: str) -> list[str]:
    p = Path(path).expanduser()
    if not p.is_file():
        raise DataNotFoundError(f"scripted policy file {str(p)!r} does not exist; pass scripted:FILE with a real file")
    text = p.read_text(encoding="utf-8")
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        data = [line.strip() for line in text.splitlines() if line.strip()]
    if not isinstance(data, list) or not data or not all(isinstance(a, str) for a in data):
        raise EnvkitError(f"{p}: a scripted policy file holds a JSON list of action strings or one action per line")
    return data


def make_policy(spec: str, *, seed: int = 0, device: str = "auto") -> Policy:
    """Build a policy from a spec (see the module docstring).

    Raises:
        EnvkitError: the spec is malformed (the message lists the valid forms).
    """
    kind, sep, rest = spec.partition(":")
    try:
        if spec == "random":
            return RandomAdmissiblePolicy(seed)
        if kind == "scripted" and rest:
            return ScriptedPolicy(_script(rest))
        if kind == "hf" and rest:
            path, opts = _options(rest)
            return TransformersPolicy(path, seed=seed, device=device, **opts)
        if kind == "openai" and rest:
            url, _, model_q = rest.partition("#")
            model, opts = _options(model_q)
            return OpenAIChatPolicy(url, model, seed=seed, **opts)
    except TypeError as exc:  # an unknown option name
        raise EnvkitError(f"bad options in policy spec {spec!r}: {exc}") from exc
    raise EnvkitError(f"unknown policy spec {spec!r}; use one of: {POLICY_SPECS}")
