"""Device checks of the local trainer's CUDA path on the lent GPU machine (no vllm, ray, deepspeed or openrlhf).

Needs only torch, transformers, numpy and envkit's own light dependencies (gymnasium; WebShop: rapidfuzz,
bm25s, PyStemmer), which `scripts/device_check.sh` installs from carried wheels when they are missing. Checks,
each timed, each recorded (passed / error) in ONE JSON file:

1. ``eden_inputs_embeds``: EDEN's engine on CUDA, `model.generate(inputs_embeds=...)`: with rho = 0 the prompt's
   embedding rows + the anchor row give exactly the greedy output of the token prompt + anchor token;
   `envkit.trainers.local.generation.sample` runs a mixed clean/noisy batch (extra rows from `envkit.trainers.explorers.eden.perturb`);
   time of 16 x 8 rows x 256 tokens from embeddings relative to the same batch from token ids.
2. ``train_*``: `envkit.trainers.local.trainer.train` (what ``envkit-train local`` runs) on CUDA for a few steps each: GRPO, EDEN
   and XRPO on ``envkit/Toy-v0``; GraphGPO + SERO on Toy-v0 and on ``envkit/WebShop-v0`` (embedded catalog);
   the last step's metrics and the median step time.
3. ``bench_explorers``: ``scripts/bench_explorers.py`` on CUDA at 16 prompts x 8 rollouts with 256-token
   responses (XRPO's and EDEN's step time relative to GRPO where generation is compute-bound).

The model is a randomly initialised Qwen2 with Qwen2.5-0.5B's layer shape (hidden 896, MLP 4864, 14 heads,
2 key/value heads) and 32 layers with envkit's byte-level tokenizer (259 tokens): ~0.48B parameters, no
download. ``--tiny`` shrinks the model and the workloads to check this script itself on a CPU in a few minutes.

Usage:
    python scripts/device_check.py --out "$OUT/device_check.json"            # the GPU machine
    python scripts/device_check.py --tiny --device cpu --out /tmp/dc.json     # this script, on a CPU
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

SHAPE_05B = {"hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 32, "num_attention_heads": 14,
             "num_key_value_heads": 2}  # fmt: skip
SHAPE_TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2}  # fmt: skip


def build_model(folder: Path, shape: dict[str, int], dtype: str) -> dict[str, Any]:
    """A random Qwen2 of `shape` with envkit's byte tokenizer, saved as a model folder."""
    import torch
    import transformers

    from envkit.runtime.models import byte_tokenizer

    tok = byte_tokenizer()
    cfg = transformers.Qwen2Config(
        vocab_size=len(tok), max_position_embeddings=8192, tie_word_embeddings=True, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, **shape,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.Qwen2ForCausalLM(cfg).to(getattr(torch, dtype))
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return {"params": sum(p.numel() for p in model.parameters()), "dtype": dtype, **shape, "vocab": len(tok)}


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def check_eden_embeds(folder: Path, device: str, dtype: str, rows: int, new: int) -> dict[str, Any]:
    """rho = 0 reproduces token prompt + anchor; a mixed clean/noisy batch; embeds vs ids generation time."""
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from envkit.trainers.explorers.eden import perturb
    from envkit.trainers.local.generation import sample

    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).to(device).eval()
    table = model.get_input_embeddings().weight
    prompts = [tok(t, add_special_tokens=False)["input_ids"] for t in ("What is 17 + 25?", "Go to the goal cell.")]
    anchor = tok(" a", add_special_tokens=False)["input_ids"][-1]
    same = []
    with torch.no_grad():
        for ids in prompts:
            tid = torch.tensor([[*ids, anchor]], device=device)
            ref = model.generate(tid, attention_mask=torch.ones_like(tid), max_new_tokens=24, do_sample=False,
                                 eos_token_id=None)[0, tid.shape[1]:]  # fmt: skip
            extra = torch.as_tensor(perturb(table[anchor].float().cpu().numpy(), 1, 0.0, np.random.default_rng(0))[0])
            emb = torch.cat([table[ids], extra.to(device, table.dtype)[None]], 0)[None]
            got = model.generate(inputs_embeds=emb, attention_mask=torch.ones(emb.shape[:2], device=device,
                                 dtype=torch.long), max_new_tokens=24, do_sample=False, eos_token_id=None)[0]  # fmt: skip
            same.append(got.tolist() == ref.tolist())
        batch = [prompts[i % 2] for i in range(rows)]
        rng = np.random.default_rng(1)
        noisy = [
            torch.as_tensor(perturb(table[anchor].float().cpu().numpy(), 1, 0.12, rng)[0]) if i % 4 == 3 else None
            for i in range(rows)
        ]
        temps = [1.0] * rows
        sample(model, tok, batch, temps, max_new_tokens=4, seed=0)  # warm-up
        _sync()
        t_ids, t_emb = [], []
        for _ in range(3):
            t = time.perf_counter()
            plain = sample(model, tok, batch, temps, max_new_tokens=new, seed=0)
            _sync()
            t_ids.append(time.perf_counter() - t)
            t = time.perf_counter()
            mixed = sample(model, tok, batch, temps, max_new_tokens=new, seed=0, extra_rows=noisy)
            _sync()
            t_emb.append(time.perf_counter() - t)
    n_plain = sum(len(x) for x in plain.tokens)
    n_mixed = sum(len(x) for x in mixed.tokens)
    ok = all(same) and len(mixed.tokens) == rows and n_mixed > 0
    return {
        "passed": ok, "rho0_same_as_token_prompt": same, "rows": rows, "new_tokens": new,
        "ids_s": statistics.median(t_ids), "embeds_mixed_s": statistics.median(t_emb),
        "embeds_vs_ids": statistics.median(t_emb) / statistics.median(t_ids),
        "tokens_ids": n_plain, "tokens_mixed": n_mixed,
    }  # fmt: skip


def check_train(folder: Path, device: str, dtype: str, task: str, explorer: str, agent: dict, tiny: bool,
                run_dir: Path, steps: int) -> dict[str, Any]:  # fmt: skip
    """`envkit.trainers.local.trainer.train` on `device` for `steps` steps; the last record and the median step time."""
    from envkit.runtime.models import ModelConfig
    from envkit.trainers.explorers.eden import EdenBankConfig
    from envkit.trainers.explorers.xrpo import XrpoConfig
    from envkit.trainers.local.multi_turn import AgentConfig
    from envkit.trainers.local.trainer import TrainConfig, train

    eden = EdenBankConfig(n_noisy=2, n_anchors=4, candidate_percentiles=(0.0, 100.0), n_selection_prompts=8,
                      max_scored=None)  # fmt: skip
    cfg = TrainConfig(
        task=task, model=ModelConfig(path=str(folder), device=device, dtype=dtype), run_dir=str(run_dir),
        steps=steps, prompts_per_step=2 if tiny else 4, group_size=4 if tiny else 8, max_new_tokens=8 if tiny else 24,
        explorer=explorer, eden=eden, xrpo=XrpoConfig(n0=2 if tiny else 4, icl_backend="tfidf"), lr=1e-5,
        agent=AgentConfig(**{"max_turns": 4 if tiny else 6, "max_context_tokens": 1500 if tiny else 4096, **agent}),
        tensorboard=False, plot=False, progress=False,
    )  # fmt: skip
    t = time.perf_counter()
    records = train(cfg)
    wall = time.perf_counter() - t
    last = records[-1]
    times = [r["time_step_s"] for r in records if "time_step_s" in r]
    keys = ("step", "reward_mean", "success_rate", "zero_adv_fraction", "entropy", "response_length", "clip_fraction",
            "kl", "sero_oracle_share", "sero_weight_mean", "eden_noisy_share", "xrpo_rollouts_max")  # fmt: skip
    finite = all(isinstance(last.get(k), (int, float)) for k in ("reward_mean", "entropy"))
    return {
        "passed": len(records) == steps and finite, "wall_s": wall,
        "median_step_s": statistics.median(times) if times else None, "last": {k: last[k] for k in keys if k in last},
    }  # fmt: skip


def check_bench(folder: Path, device: str, tiny: bool, log: Path) -> dict[str, Any]:
    """scripts/bench_explorers.py at 16 x 8 rollouts, 256-token responses (tiny: 4 x 4, 16 tokens)."""
    cmd = [
        sys.executable, str(REPO / "scripts" / "bench_explorers.py"), "--model", str(folder), "--device", device,
        "--task", "arith", "--warmup-steps", "0", "--max-new-tokens", "16" if tiny else "256",
        "--prompts-per-step", "4" if tiny else "16", "--group-size", "4" if tiny else "8",
        "--steps", "2" if tiny else "4", "--skip", "1", "--arms", "none", "eden", "xrpo",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    with open(log, "w") as err:
        res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, timeout=420, check=False)
    if res.returncode != 0:
        return {"passed": False, "rc": res.returncode, "error": log.read_text()[-1500:]}
    out = json.loads(res.stdout.strip().splitlines()[-1])  # bench_explorers prints one JSON line last
    return {"passed": True, **out}


def _webshop_adv() -> Any:
    """WebShop's GraphGPO discount (METHODS: 0.20) on the local trainer's advantage options."""
    from envkit.credit.advantage_options import AdvantageOptions

    return AdvantageOptions(gamma_g=0.2, terminal_reward=10.0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "device_check.json"))
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default=None, help="model dtype (default: bfloat16 on cuda, float32 on cpu)")
    ap.add_argument("--tiny", action="store_true", help="a tiny model and workloads (checks this script on a CPU)")
    ap.add_argument("--steps", type=int, default=2, help="training steps per trainer check")
    ap.add_argument("--only", nargs="*", default=None, help="run only these checks (names as in the JSON)")
    args = ap.parse_args()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("device_check: torch sees no CUDA device; pass --device cpu --tiny to check on a CPU")
    if args.device == "cpu":
        torch.set_num_threads(1)
    dtype = args.dtype or ("bfloat16" if args.device == "cuda" else "float32")
    work = Path(tempfile.mkdtemp(prefix="device_check_"))
    folder = work / "qwen2-random"
    t0 = time.perf_counter()
    out: dict[str, Any] = {
        "env": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "cuda": torch.version.cuda,
            "device": args.device,
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "tiny": args.tiny,
        },
        "model": build_model(folder, SHAPE_TINY if args.tiny else SHAPE_05B, dtype),
        "checks": {},
    }
    rows, new = (8, 16) if args.tiny else (128, 256)
    toy = {"estimator": "grpo"}
    from envkit.credit.sero import SeroOptions

    graph = {"estimator": "graphgpo", "sero": True}
    plan: list[tuple[str, Any]] = [
        ("eden_inputs_embeds", lambda: check_eden_embeds(folder, args.device, dtype, rows, new)),
        ("train_toy_grpo", lambda: check_train(folder, args.device, dtype, "envkit/Toy-v0", "none", toy, args.tiny,
                                               work / "grpo", args.steps)),
        ("train_toy_eden", lambda: check_train(folder, args.device, dtype, "envkit/Toy-v0", "eden", toy, args.tiny,
                                               work / "eden", args.steps)),
        ("train_toy_xrpo", lambda: check_train(folder, args.device, dtype, "envkit/Toy-v0", "xrpo", toy, args.tiny,
                                               work / "xrpo", args.steps)),
        ("train_toy_graphgpo_sero", lambda: check_train(folder, args.device, dtype, "envkit/Toy-v0", "none", graph,
                                                        args.tiny, work / "toy_sero", args.steps)),
        ("train_webshop_graphgpo_sero", lambda: check_train(folder, args.device, dtype, "envkit/WebShop-v0", "none",
                                                            # a smoke check with a short turn cap: roots may have 2
                                                            # steps left (WebShop's registered root budget is 8)
                                                            {**graph, "adv": _webshop_adv(),
                                                             "sero_opts": SeroOptions(min_budget=2)},
                                                            args.tiny, work / "ws_sero",
                                                            args.steps)),
        ("bench_explorers", lambda: check_bench(folder, args.device, args.tiny, work / "bench_explorers.log")),
    ]  # fmt: skip
    for name, fn in plan:
        if args.only and name not in args.only:
            continue
        t = time.perf_counter()
        try:
            res = fn()
        except Exception as exc:  # one failing check must not hide the others' results
            res = {
                "passed": False,
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-3000:],
            }
        res["seconds"] = time.perf_counter() - t
        out["checks"][name] = res
        print(f"device_check: {name}: {'ok' if res['passed'] else 'FAILED'} ({res['seconds']:.0f} s)", flush=True)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1, default=str))  # partial results survive a timeout
    if torch.cuda.is_available():
        out["env"]["max_memory_allocated_gib"] = torch.cuda.max_memory_allocated() / 2**30
    out["env"]["third_party_modules"] = sorted(
        {m.split(".")[0] for m in sys.modules} - set(sys.stdlib_module_names) - {"envkit"}
    )
    out["wall_s"] = time.perf_counter() - t0
    out["passed"] = all(c["passed"] for c in out["checks"].values())
    Path(args.out).write_text(json.dumps(out, indent=1, default=str))
    print(json.dumps({"passed": out["passed"], "wall_s": round(out["wall_s"]),
                      "checks": {k: v["passed"] for k, v in out["checks"].items()}}))  # fmt: skip
    sys.exit(0 if out["passed"] else 1)


if __name__ == "__main__":
    main()
