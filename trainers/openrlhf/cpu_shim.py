"""CPU mode of the OpenRLHF backend (``envkit-train openrlhf --cpu``): what OpenRLHF 0.11.2 needs to train without CUDA.

Loaded ONLY when ``--cpu`` is given (`BackendConfig.cpu`): the driver calls `activate`, and every Ray worker runs it
as Ray's ``worker_process_setup_hook`` (`ray_init_kwargs`); the vLLM engine process loads its half through the
worker extension `envkit.trainers.openrlhf.cpu_engine.CpuWorkerWrap`. Each activation prints one
``[envkit cpu-shim]`` line. Nothing here is imported on a GPU run. OpenRLHF itself is not changed: each item below
replaces one call or value, and says why.

Replaced (trainer side, this module):

- ``torch.cuda.set_device`` -> no-op: OpenRLHF's ``DeepspeedStrategy.setup_distributed`` and
  ``init_device_mesh("cuda")`` call it (``AttributeError: module 'torch._C' has no attribute '_cuda_setDevice'``);
- ``torch.cuda.current_device`` -> ``"cpu"``: the PPO actor, launcher and strategy move tensors to it;
- ``torch.cuda.synchronize`` -> no-op (``torch_dist_barrier_and_cuda_sync`` after every broadcast/fit);
- ``torch.cuda.current_stream`` -> None (the broadcast passes it as ``stream=``; a gloo group ignores it);
- ``NaiveReplayBuffer.target_device`` -> ``cpu`` (it is ``torch.device(f"cuda:{current_device()}")``, which
  would read ``cuda:cpu``: ``Invalid device string``);
- ``openrlhf.trainer.ray.ppo_actor.stateless_init_process_group`` -> `gloo_group`: OpenRLHF builds vLLM's
  ``PyNcclCommunicator``, which is silently DISABLED without CUDA (its ``broadcast`` returns at once and the
  engines load uninitialised memory); ``--vllm.sync_with_ray`` with gloo fails (group world size, a collective
  outside an actor). A stateless gloo group (vLLM's ``stateless_init_torch_distributed_process_group``) works;
- ``flash_attn``: an import stub (OpenRLHF imports ``flash_attn.bert_padding`` and
  ``flash_attn.utils.distributed`` at module level; calling them raises). Packing (``--ds.packing_samples``) and
  ring attention are therefore unavailable on a CPU;
- environment: ``DS_ACCELERATOR=cpu`` (DeepSpeed's CPU accelerator, gloo collectives, ZeRO on CPU tensors),
  ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache; else vLLM reserves a fraction of the machine's RAM).

Flags (`cpu_flags`): ``--vllm.sync_backend gloo`` (not ``nccl``: with ``--train.colocate_all`` nccl means the CUDA
IPC path) and ``--ds.attn_implementation eager`` (flash_attention_2 is the default) are added unless given; flags
that cannot work on a CPU (sleep modes, packing, another sync backend) are refused with the reason. The Ray
cluster is private (`ray_init_kwargs`: one logical GPU, because OpenRLHF places every actor on ``{"GPU": 1}``
bundles; its own temp dir). Use ``--actor.lr_warmup_ratio 0`` for a visible first update (with warm-up the first
step's learning rate is 0).
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import types
from typing import Any

from envkit.trainers.openrlhf.argv import ArgvError, flag_present, flag_value

#: Set in every process of a ``--cpu`` run (driver and Ray workers).
CPU_ENV = "ENVKIT_OPENRLHF_CPU"
HOOK = "envkit.trainers.openrlhf.cpu_shim.activate"
_ACTIVE = False


def log(msg: str) -> None:
    print(f"[envkit cpu-shim pid={os.getpid()}] {msg}", file=sys.stderr, flush=True)


def stub_flash_attn() -> None:
    """Put a ``flash_attn`` import stub in ``sys.modules`` unless a real one imports (see the module doc)."""
    try:
        import flash_attn  # noqa: F401

        return
    except ImportError:
        pass

    def cuda_only(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError(
            "flash_attn is import-stubbed in envkit's CPU mode (it needs CUDA): drop --ds.packing_samples and "
            "ring attention on a CPU"
        )

    from einops import rearrange  # flash_attn.bert_padding re-exports it; OpenRLHF imports it from there

    names: dict[str, dict[str, Any]] = {
        "flash_attn": {"__version__": "0.0.0-envkit-cpu-stub", "ENVKIT_STUB": True},
        "flash_attn.bert_padding": {
            "index_first_axis": cuda_only,
            "pad_input": cuda_only,
            "unpad_input": cuda_only,
            "rearrange": rearrange,
        },
        "flash_attn.utils": {},
        "flash_attn.utils.distributed": {"all_gather": cuda_only},
    }
    for name, attrs in names.items():
        mod = types.ModuleType(name)
        mod.__dict__.update(attrs)
        mod.__path__ = []  # a package, so submodules resolve from sys.modules
        mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)  # find_spec() works on it
        sys.modules[name] = mod


def env_defaults() -> dict[str, str]:
    """Environment of every process of a CPU run (the caller's own values win)."""
    return {
        CPU_ENV: "1",
        "DS_ACCELERATOR": os.environ.get("DS_ACCELERATOR", "cpu"),
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "VLLM_TARGET_DEVICE": "cpu",
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
    }


class GlooBroadcaster:
    """What OpenRLHF calls as ``_model_update_group`` (``broadcast(tensor, src=0, stream=...)``), on a gloo group."""

    def __init__(self, group: Any, rank: int, world_size: int) -> None:
        self.group, self.rank, self.world_size = group, rank, world_size

    def broadcast(self, tensor: Any, src: int = 0, stream: Any = None) -> None:
        self.group.broadcast(tensor, src).wait()


def gloo_group(master_address: str, master_port: int, rank: int, world_size: int, device: Any = None) -> Any:
    """A stateless gloo group between DeepSpeed rank 0 (rank 0) and the engines' workers (same signature as
    OpenRLHF's ``stateless_init_process_group``; ``device`` is ignored)."""
    from vllm.distributed.utils import stateless_init_torch_distributed_process_group

    group = stateless_init_torch_distributed_process_group(master_address, master_port, rank, world_size, "gloo")
    log(f"weight-sync group: gloo, rank {rank} of {world_size} at {master_address}:{master_port}")
    return GlooBroadcaster(group, rank, world_size)


def _patch_torch_cuda() -> None:
    import torch

    setattr(torch.cuda, "set_device", lambda *a, **k: None)  # noqa: B010 (deliberate replacements, see above)
    setattr(torch.cuda, "current_device", lambda: "cpu")  # noqa: B010
    setattr(torch.cuda, "synchronize", lambda *a, **k: None)  # noqa: B010
    setattr(torch.cuda, "current_stream", lambda *a, **k: None)  # noqa: B010


def _patch_openrlhf() -> None:
    import torch
    from openrlhf.trainer.ppo_utils import replay_buffer
    from openrlhf.trainer.ray import ppo_actor

    init = replay_buffer.NaiveReplayBuffer.__init__
    if not getattr(init, "envkit_cpu", False):

        def cpu_init(self: Any, *args: Any, **kwargs: Any) -> None:
            current = torch.cuda.current_device
            setattr(torch.cuda, "current_device", lambda: 0)  # noqa: B010  (only so that "cuda:{n}" parses)
            try:
                init(self, *args, **kwargs)
            finally:
                setattr(torch.cuda, "current_device", current)  # noqa: B010
            self.target_device = torch.device("cpu")

        cpu_init.envkit_cpu = True  # type: ignore[attr-defined]
        replay_buffer.NaiveReplayBuffer.__init__ = cpu_init
    ppo_actor.stateless_init_process_group = gloo_group


def activate() -> None:
    """Apply the trainer-side replacements in this process (idempotent; see the module doc). Refuses on CUDA."""
    global _ACTIVE
    if _ACTIVE:
        return
    for key, value in env_defaults().items():
        os.environ.setdefault(key, value)
    import torch

    if torch.cuda.is_available():
        raise RuntimeError(
            "envkit-train openrlhf --cpu was given on a machine with CUDA: the CPU shim replaces torch.cuda calls "
            "and must not run on a GPU. Drop --cpu"
        )
    stub_flash_attn()
    _patch_torch_cuda()
    _patch_openrlhf()
    _ACTIVE = True
    log(
        "ACTIVE: torch.cuda.set_device/current_device/synchronize/current_stream replaced, replay buffer on cpu, "
        "weight sync over a stateless gloo group, flash_attn stubbed, DS_ACCELERATOR="
        f"{os.environ['DS_ACCELERATOR']}"
    )


REFUSED = {
    "--vllm.enable_sleep": "vLLM's sleep mode needs CUDA memory pools",
    "--ds.enable_sleep": "DeepSpeed's offload/reload sleep needs CUDA",
    "--ds.packing_samples": "packing needs flash_attn (stubbed on a CPU)",
    "--vllm.sync_with_ray": "ray.util.collective with gloo fails here (group world size); the CPU mode uses a "
    "stateless gloo group",
}


def cpu_flags(flags: list[str]) -> list[str]:
    """OpenRLHF's flags for a CPU run: refuses what cannot work, adds the gloo sync backend and eager attention."""
    for flag, why in REFUSED.items():
        if flag_present(flags, flag):
            raise ArgvError(f"{flag} cannot run with --cpu: {why}; drop it")
    backend = flag_value(flags, "--vllm.sync_backend")
    if backend not in (None, "gloo"):
        raise ArgvError(f"--vllm.sync_backend {backend} cannot run with --cpu: use gloo (or leave it out)")
    attn = flag_value(flags, "--ds.attn_implementation")
    if attn not in (None, "eager", "sdpa"):
        raise ArgvError(f"--ds.attn_implementation {attn} needs CUDA: use eager or sdpa with --cpu (or leave it out)")
    out = list(flags)
    if backend is None:
        out += ["--vllm.sync_backend", "gloo"]
    if attn is None:
        out += ["--ds.attn_implementation", "eager"]
    return out


def ray_init_kwargs(runtime_env: dict[str, Any]) -> dict[str, Any]:
    """``ray.init`` arguments of a CPU run: a private local cluster with one logical GPU, its own temp dir
    (``$ENVKIT_RAY_TMPDIR`` or a fresh one), the shim as every worker's setup hook, the CPU env vars."""
    import tempfile

    env = {**runtime_env, "env_vars": {**runtime_env.get("env_vars", {}), **env_defaults()}}
    env["worker_process_setup_hook"] = HOOK
    tmp = os.environ.get("ENVKIT_RAY_TMPDIR") or tempfile.mkdtemp(prefix="envkit-ray-")
    return {
        "runtime_env": env,
        "num_gpus": 1,
        "num_cpus": int(os.environ.get("ENVKIT_RAY_NUM_CPUS", "4")),
        "include_dashboard": False,
        "_temp_dir": tmp,
        "address": "local",
    }


def start_ray(kwargs: dict[str, Any], attempts: int = 3) -> None:
    """``ray.init(**kwargs)``, retried: on a busy machine Ray's raylet can miss its fixed 30 s start-up window
    ("The current node timed out during startup")."""
    import ray

    for attempt in range(1, attempts + 1):
        try:
            ray.init(**kwargs)
            return
        except Exception as exc:  # Ray raises a bare Exception for this
            if "timed out during startup" not in str(exc) or attempt == attempts:
                raise
            log(f"Ray did not start in time (attempt {attempt} of {attempts}); retrying")
            ray.shutdown()
