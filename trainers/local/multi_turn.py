"""Multi-turn (agent env) rollouts for the local trainer, token-in/token-out (credit: `envkit.trainers.local.agent_source`).

Each episode keeps ONE growing list of token ids: the encoded first prompt, then for every turn the sampled
action ids exactly as generated, then the ids of only the NEW text that follows (the turn separator of the
chat template and the next observation). Earlier turns are never decoded and re-encoded, so the ids the loss
scores are the ids the model sampled. An episode whose context would exceed `max_context_tokens` stops there
(``context_truncated``); an action that hits `max_new_tokens` without EOS counts as ``action_truncated``; both
are logged.

`play` plays G episodes per task seed; `play_specs` plays any list of `EpisodeSpec`s (XRPO's phases, EDEN's
noisy first turns), one batched `generate` call per turn over the live episodes, keeping their KV cache between
turns (`envkit.trainers.local.turn_cache`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from envkit.errors import SessionLostError, SnapshotLostError, WorkerCrashedError
from envkit.fleet.config import FleetConfig
from envkit.lifetime import discard_many
from envkit.recorder import EpisodeRecorder
from envkit.registration import make
from envkit.snapshot import snapshot_env
from envkit.trainers.local.episode import Episode
from envkit.trainers.local.generation import sample
from envkit.trainers.local.options import AgentConfig
from envkit.trainers.local.prompt_encoding import decode, encode_prompt, encode_text
from envkit.trainers.local.turn_cache import TurnCache

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase


def turn_suffix_text(tokenizer: PreTrainedTokenizerBase, observation: str, raw: bool) -> tuple[str, str]:
    """(closing text after an assistant turn, text that opens the next user turn + generation prompt).

    Derived by rendering the chat template with a marker answer, so it works for any template.
    """
    if raw or not getattr(tokenizer, "chat_template", None):
        return "\n", observation + "\n"
    marker = "\x00MARK\x00"
    msgs = [{"role": "user", "content": "q"}, {"role": "assistant", "content": marker}]
    two = str(tokenizer.apply_chat_template(msgs, tokenize=False))  # tokenize=False: the rendered text
    three = str(
        tokenizer.apply_chat_template(
            [*msgs, {"role": "user", "content": observation}], tokenize=False, add_generation_prompt=True
        )
    )
    closing = two[two.index(marker) + len(marker) :]
    return closing, three[len(two) :]


def continuation_ids(
    tokenizer: PreTrainedTokenizerBase, action_ids: list[int], observation: str, raw: bool
) -> list[int]:
    """Ids of the text that follows a sampled action (template closing, next observation, generation prompt).

    When the action ended with EOS and the template's closing text starts with EOS's text, that part is already
    in the context and is not added twice.
    """
    closing, opening = turn_suffix_text(tokenizer, observation, raw)
    eos_text = tokenizer.eos_token or ""
    if action_ids and action_ids[-1] == tokenizer.eos_token_id and eos_text and closing.startswith(eos_text):
        closing = closing[len(eos_text) :]
    return encode_text(tokenizer, closing + opening)


_ENV_CACHE: dict[str, list[Any]] = {}

#: Errors that mean an episode's env is gone (its fleet actor or node was lost, its session released): the
#: episode ends `lost` with the reason, and the step goes on without it (`play_specs`).
LOST_ENV_ERRORS = (WorkerCrashedError, SessionLostError, SnapshotLostError)


def shared_envs(env_id: str, n: int, fleet: FleetConfig | None = None) -> list[Any]:
    """The first `n` envs of this process's envs of `env_id` (on `fleet`'s actors when given), made on demand."""
    pool = _ENV_CACHE.setdefault(env_id if fleet is None else f"{env_id}@{fleet!r}", [])
    while len(pool) < n:
        pool.append(make(env_id).unwrapped if fleet is None else make(env_id, fleet=fleet))
    return pool[:n]


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to play.

    Attributes:
        group: Task group (index of the step's task).
        index: Episode index within its group.
        seed: Task seed passed to `reset`.
        prompt_text: First prompt text instead of the env's first observation (XRPO's ICL-prefixed prompt).
        temperature: Sampling temperature of every turn (None: the run's).
        first_extra: EDEN: one [d] embedding appended after the first prompt for the FIRST turn only; later turns
            see the token context alone.
        clean_loss_prompt: With a `prompt_text`: the loss sees the env's first observation as the prompt instead
            (``Episode.loss_prompt_ids``; XRPO's ``icl_loss_prompt="clean"``).
    """

    group: int
    index: int
    seed: int
    prompt_text: str | None = None
    temperature: float | None = None
    first_extra: Any = None
    clean_loss_prompt: bool = False


def play(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    env_id: str,
    seeds: list[int],
    group_size: int,
    cfg: AgentConfig,
    *,
    max_new_tokens: int,
    temperature: float,
    seed: int,
    record: bool = False,
) -> list[Episode]:
    """Play `group_size` episodes of each task seed, batching one `generate` call per turn over live episodes.

    Each episode keeps its `envkit.core.Step`s in ``episode.recorder`` (its final observation too, which the
    step table needs); with `record`, each step also has a snapshot of the state before it, and the final
    state one by the recorder's rule (SERO's roots); the caller discards them in ``episode.env`` once the group is
    credited (``envkit.lifetime.discard_many(e.env, e.snapshots())``; `envkit.trainers.local.sero.sero_credit` does).
    """
    specs = [EpisodeSpec(g, k, int(s)) for g, s in enumerate(seeds) for k in range(group_size)]
    return play_specs(
        model, tokenizer, env_id, specs, cfg, max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
        record=record,
    )  # fmt: skip


def play_specs(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    env_id: str,
    specs: list[EpisodeSpec],
    cfg: AgentConfig,
    *,
    max_new_tokens: int,
    temperature: float,
    seed: int,
    record: bool = False,
    env_offset: int = 0,
    return_logprobs: bool = False,
    started: list[Episode] | None = None,
    envs: list[Any] | None = None,
) -> list[Episode]:
    """Play one episode per spec (see `play`); env instances ``env_offset ..`` of the env's pool are used (or
    `envs`, one per spec), so
    episodes played earlier in the same step keep theirs (SERO restores into them). With EDEN's first-turn rows
    every turn re-prefills the token context (no turn cache: later turns must not see the noise position).
    `started`: one episode per spec already under way in its own env (a branch restored from a snapshot,
    `envkit.trainers.local.explorers.branch`); they are played on from their context instead of reset, each until
    `cfg.max_turns` actions in all.

    An episode whose env is lost mid-way (`LOST_ENV_ERRORS`: its fleet actor or node died) ends with
    ``Episode.lost`` set to the reason; the others play on. Episodes from reset are then played again from reset,
    in the same env objects (a fleet env reopens on a live actor), up to ``cfg.retries`` times; one still lost
    is left for the caller to drop (`envkit.trainers.local.agent_source`)."""
    kw: dict[str, Any] = dict(max_new_tokens=max_new_tokens, temperature=temperature, record=record)
    kw["return_logprobs"] = return_logprobs
    if envs is None and started is None:
        envs = shared_envs(env_id, env_offset + len(specs), cfg.fleet)[env_offset:]
    episodes = _play_round(model, tokenizer, env_id, specs, cfg, seed=seed, envs=envs or [], started=started, **kw)
    for attempt in range(cfg.retries if started is None else 0):
        lost = [i for i, e in enumerate(episodes) if e.lost]
        if not lost:
            break
        again = _play_round(
            model, tokenizer, env_id, [specs[i] for i in lost], cfg, seed=seed + 7919 * (attempt + 1),
            envs=[episodes[i].env for i in lost], started=None, **kw,
        )  # fmt: skip
        for i, e in zip(lost, again, strict=True):
            discard_many(episodes[i].env, episodes[i].snapshots())  # best effort: mostly gone with their actor
            e.retries = episodes[i].retries + 1
            episodes[i] = e
    return episodes


def _play_round(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    env_id: str,
    specs: list[EpisodeSpec],
    cfg: AgentConfig,
    *,
    max_new_tokens: int,
    temperature: float,
    seed: int,
    record: bool,
    return_logprobs: bool,
    envs: list[gym.Env[str, str]],
    started: list[Episode] | None,
) -> list[Episode]:
    """One try of `play_specs` (no retries)."""
    if cfg.max_turns is None:
        raise ValueError("play: agent.max_turns is None; resolve the settings with cfg.for_env(env_id) first")
    if started is not None and len(started) != len(specs):
        raise ValueError(f"play_specs: {len(started)} started episodes for {len(specs)} specs; give one per spec")
    episodes = [] if started is None else list(started)
    for spec, env in zip(specs if started is None else [], envs, strict=True):
        try:
            obs, info0 = _reset(env, int(spec.seed))
        except LOST_ENV_ERRORS as exc:
            episodes.append(lost_episode(spec.group, spec.index, env, int(spec.seed), exc))
            continue
        text = str(obs) if spec.prompt_text is None else spec.prompt_text
        ids = encode_prompt(tokenizer, text, raw=False, system=cfg.system)
        if len(ids) + max_new_tokens > cfg.max_context_tokens:
            raise ValueError(
                f"the first prompt of {env_id} has {len(ids)} tokens: raise agent.max_context_tokens above "
                f"{len(ids) + max_new_tokens}"
            )
        recorder = EpisodeRecorder(obs, info0, snapshots=record and _has_snapshots(env))  # the episode's one record
        icl, clean = spec.prompt_text is not None, spec.clean_loss_prompt
        loss_ids = encode_prompt(tokenizer, str(obs), raw=False, system=cfg.system) if icl and clean else None
        ep = Episode(spec.group, spec.index, env, ids, list(ids), [], [], recorder, seed=int(spec.seed), icl=icl,
                     noisy=spec.first_extra is not None, loss_prompt_ids=loss_ids)  # fmt: skip
        episodes.append(ep)
    for e in episodes if started is not None else []:  # a branch records from where it starts (its own recorder)
        if e.recorder is None and not e.lost:
            raise ValueError(
                f"play_specs: started episode {e.group}/{e.index} has no recorder; make it with "
                "envkit.trainers.local.explorers.branch.fork (or give it an EpisodeRecorder at its start state)"
            )
    temp_of = {id(e): temperature if sp.temperature is None else sp.temperature for e, sp in zip(episodes, specs)}
    extra_of = {id(e): sp.first_extra for e, sp in zip(episodes, specs)}
    noisy_start = any(x is not None for x in extra_of.values())
    cache = TurnCache(model, tokenizer) if cfg.reuse_kv_cache and not noisy_start else None
    cached: list[Episode] = []  # the cache's rows
    for turn in range(cfg.max_turns):
        live = [e for e in episodes if not e.done]
        if not live:
            break
        contexts, temps = [e.context for e in live], [temp_of[id(e)] for e in live]
        if turn == 0 and noisy_start:
            out = sample(
                model, tokenizer, contexts, temps, max_new_tokens=max_new_tokens, seed=seed * 131 + turn,
                return_logprobs=return_logprobs, extra_rows=[extra_of[id(e)] for e in live],
            )  # fmt: skip
        elif cache is not None:
            if cached:
                cache.keep([next(k for k, c in enumerate(cached) if c is e) for e in live])
            cached = live
            out = cache.sample(
                contexts, temps, max_new_tokens=max_new_tokens, seed=seed * 131 + turn, return_logprobs=return_logprobs
            )
        else:
            out = sample(
                model, tokenizer, contexts, temps, max_new_tokens=max_new_tokens, seed=seed * 131 + turn,
                return_logprobs=return_logprobs,
            )  # fmt: skip
        for i, (e, act_ids, trunc) in enumerate(zip(live, out.tokens, out.truncated, strict=True)):
            if out.logprobs is not None:
                e.logprobs += out.logprobs[i]
            e.context += act_ids
            e.flags += [1] * len(act_ids)
            e.turn_of_token += [e.turns] * len(act_ids)
            e.action_truncated += int(trunc)
            text = decode(tokenizer, act_ids).strip()
            rec = e.recorder
            try:
                snap = snapshot_env(e.env).snapshot() if rec is not None and rec.snapshots_on else None
                obs, reward, terminated, truncated, info = e.env.step(text)
            except LOST_ENV_ERRORS as exc:
                _lose(e, exc)
                continue
            if rec is not None:
                rec.step(snap, text, obs, reward, terminated, truncated, info)
            if terminated or truncated or e.turns >= cfg.max_turns:
                e.done = True
                _stop(e)
                continue
            more = continuation_ids(tokenizer, act_ids, str(obs), raw=False)
            if len(e.context) + len(more) + max_new_tokens > cfg.max_context_tokens:
                # The next turn would not fit: stop here (the observation is not appended).
                e.done, e.context_truncated = True, True
                _stop(e)
                continue
            e.context += more
            e.flags += [0] * len(more)
            e.turn_of_token += [-1] * len(more)
    for e in episodes:  # a started episode already at the turn cap plays no turn
        if e.recorder is not None and not e.recorder.stopped:
            _stop(e)
    return episodes


def _has_snapshots(env: object) -> bool:
    """Whether `env` takes snapshots (without them SERO restores by verified replay)."""
    return callable(getattr(env, "snapshot", None))


def _stop(e: Episode) -> None:
    """End `e`'s record (with the final snapshot `envkit.recorder`'s rule asks for)."""
    if e.recorder is not None:
        try:
            final = snapshot_env(e.env).snapshot() if e.recorder.wants_final_snapshot else None
        except LOST_ENV_ERRORS as exc:
            _lose(e, exc)
            return
        e.recorder.stop(final)


def _reset(env: gym.Env[str, str], seed: int) -> tuple[str, dict[str, Any]]:
    """`env.reset`; once more when its env was lost before the episode began (a fleet env reopens on a live
    actor), so that only episodes under way are lost."""
    try:
        return env.reset(seed=seed)
    except LOST_ENV_ERRORS:
        return env.reset(seed=seed)


def lost_episode(
    group: int, index: int, env: gym.Env[str, str], seed: int | None, exc: BaseException, parent: Episode | None = None,
    fork_turn: int = 0,
) -> Episode:  # fmt: skip
    """An episode that lost its env before it could start (`Episode.lost`: the reason); `parent` and `fork_turn`:
    a branch's backbone and fork turn (its prefix), so that it counts no env step of its own."""
    return Episode(
        group, index, env, [], [], [], [], None, parent, fork_turn if parent is not None else 0, done=True,
        seed=seed, lost=_why(exc),
    )  # fmt: skip


def _why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


def _lose(e: Episode, exc: BaseException) -> None:
    """End `e` as lost (its env is gone): done, the reason kept, its record stopped as failed."""
    e.done, e.lost = True, _why(exc)
    if e.recorder is not None and not e.recorder.stopped:
        e.recorder.stop(failed=e.lost)
