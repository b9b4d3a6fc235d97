"""Split ``envkit-train openrlhf`` argv into ours and OpenRLHF's, and rewrite OpenRLHF's.

``envkit-train openrlhf [our options] -- [any openrlhf.cli.train_ppo_ray flag]``: everything after the first
``--`` goes to OpenRLHF unchanged, except that

- ``--algo.advantage.estimator group_norm`` is forced (OpenRLHF then needs no critic and checks
  ``n_samples_per_prompt > 1``; envkit's experience maker replaces the computation itself);
- ``--train.agent_func_path`` is forced to envkit's Gymnasium agent executor;
- flags that would silently bypass envkit are refused with a message saying what to do instead
  (``--train.async_enable``, another estimator, another agent file, ``--reward.remote_url``, and dynamic
  filtering with XRPO's variable groups).

Example:
    >>> ours, theirs = split_argv(["--explorer", "eden", "--", "--rollout.n_samples_per_prompt", "16"])
    >>> ours, theirs
    (['--explorer', 'eden'], ['--rollout.n_samples_per_prompt', '16'])
    >>> flag_value(theirs, "--rollout.n_samples_per_prompt")
    '16'
"""

from __future__ import annotations

from collections.abc import Sequence

from envkit.trainers.openrlhf.explorers.registry import explorer_class

FORCED_ESTIMATOR = "group_norm"


class ArgvError(ValueError):
    """The command line asks for something this backend cannot do; the message says what to change."""


#: Sections of envkit's own dotted options (`BackendConfig`'s nested configs: ``--adv.gamma``, ``--eden.rho``).
OUR_SECTIONS = ("adv", "sero-opts", "sero_opts", "eden", "xrpo", "branch")


def _is_openrlhf_flag(token: str) -> bool:
    """OpenRLHF 0.11.2's flags are dotted (``--rollout.batch_size``); envkit's dotted ones are `OUR_SECTIONS`."""
    if not token.startswith("--") or "." not in token[2:].split("=", 1)[0]:
        return False
    return token[2:].split(".", 1)[0] not in OUR_SECTIONS


def split_argv(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """Split into (our options, OpenRLHF's flags).

    At the first ``--`` when there is one; otherwise at the first dotted ``--section.name`` flag whose section is
    not one of envkit's (`OUR_SECTIONS`), for a caller that consumed the ``--`` (click does). OpenRLHF's two
    undotted flags (``--local_rank``, ``--use_ms``) must then follow a dotted one or a ``--``.
    """
    args = list(argv)
    if "--" in args:
        i = args.index("--")
        return args[:i], args[i + 1 :]
    for i, token in enumerate(args):
        if _is_openrlhf_flag(token):
            return args[:i], args[i:]
    return args, []


def _matches(token: str, flag: str) -> bool:
    return token == flag or token.startswith(flag + "=")


def flag_present(flags: Sequence[str], flag: str) -> bool:
    """Whether ``flag`` (or ``flag=value``) is among ``flags``."""
    return any(_matches(t, flag) for t in flags)


def flag_value(flags: Sequence[str], flag: str) -> str | None:
    """The value of the last ``flag VALUE`` / ``flag=VALUE`` in ``flags`` (None when absent)."""
    value = None
    for i, token in enumerate(flags):
        if token == flag and i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            value = flags[i + 1]
        elif token.startswith(flag + "="):
            value = token.split("=", 1)[1]
    return value


def drop_flag(flags: Sequence[str], flag: str) -> list[str]:
    """``flags`` without every ``flag VALUE`` / ``flag=VALUE`` / bare ``flag``."""
    out: list[str] = []
    skip = False
    for i, token in enumerate(flags):
        if skip:
            skip = False
            continue
        if token == flag:
            skip = i + 1 < len(flags) and not flags[i + 1].startswith("--")
            continue
        if token.startswith(flag + "="):
            continue
        out.append(token)
    return out


ASYNC_REFUSAL = (
    "--train.async_enable is not supported by envkit's OpenRLHF backend yet: OpenRLHF's async trainer "
    "(PPOTrainerAsync) runs its own sample queue and experience pipeline, which envkit does not replace, so the "
    "EDEN/XRPO rollout plans and the GiGPO/GraphGPO/SERO advantages would be silently skipped. Remove "
    "--train.async_enable (and --train.partial_rollout_enable) to train synchronously."
)


def openrlhf_argv(flags: Sequence[str], *, executor_path: str, explorer: str) -> list[str]:
    """OpenRLHF's argv with envkit's forced flags, after refusing what would bypass envkit.

    Args:
        flags: The user's flags after ``--``.
        executor_path: Path of envkit's agent executor file (``trainers/openrlhf/agent_executor.py``).
        explorer: Our ``--explorer`` (one with groups of different sizes, XRPO's, refuses dynamic filtering).

    Raises:
        ArgvError: with what to change.
    """
    flags = list(flags)
    if flag_present(flags, "--train.async_enable") or flag_present(flags, "--train.partial_rollout_enable"):
        raise ArgvError(ASYNC_REFUSAL)
    estimator = flag_value(flags, "--algo.advantage.estimator")
    if estimator is not None and estimator != FORCED_ESTIMATOR:
        raise ArgvError(
            f"--algo.advantage.estimator {estimator}: envkit computes the advantages itself; choose them with "
            "'--advantage grpo|gigpo|graphgpo' before '--' and drop the OpenRLHF flag"
        )
    agent = flag_value(flags, "--train.agent_func_path")
    if agent is not None and agent != executor_path:
        raise ArgvError(
            f"--train.agent_func_path {agent}: envkit runs its own Gymnasium agent executor; choose the env with "
            "'--env ID' before '--' (a task's label may name another env) and drop the OpenRLHF flag"
        )
    if flag_present(flags, "--reward.remote_url"):
        raise ArgvError(
            "--reward.remote_url: rewards come from the envkit env's own verifier through the agent executor; "
            "drop the flag"
        )
    if explorer_class(explorer).variable_groups and flag_present(flags, "--algo.dynamic_filtering_enable"):
        raise ArgvError(
            f"--algo.dynamic_filtering_enable with --explorer {explorer}: it hands out a variable number of "
            "rollouts per prompt, which OpenRLHF's dynamic filtering cannot regroup; drop one of the two"
        )
    flags = drop_flag(flags, "--algo.advantage.estimator")
    flags = drop_flag(flags, "--train.agent_func_path")
    return [*flags, "--algo.advantage.estimator", FORCED_ESTIMATOR, "--train.agent_func_path", executor_path]


def int_flag(flags: Sequence[str], flag: str, default: int) -> int:
    """An integer flag's value (OpenRLHF's default when absent)."""
    raw = flag_value(flags, flag)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ArgvError(f"{flag} {raw!r}: expected an integer") from exc
