"""Files envkit reads back do not run code.

- A planted trainer checkpoint (a pickle whose loading runs code) is refused on resume, and so is a ``latest``
  pointer that leads outside the run's ``checkpoints/``; the trainer's own checkpoints (safetensors + JSON)
  round-trip exactly (optimizer state with int keys, numpy arrays, tuples, RNG state) and resume still works.
- A planted ALFWorld asset-cache pickle (world-writable, owned by another user, or private to this user but
  without this install's HMAC tag, or another game's genuine entry renamed) is never unpickled: the env rebuilds
  the entry and keeps serving.
"""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch


class _Payload:
    """Unpickling this creates the marker directory (the stand-in for arbitrary code)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (str(self.marker),))


def _tiny():
    from envkit.runtime.models import ModelConfig, load_model

    return load_model(ModelConfig(path="tiny:arith", hidden_size=16, layers=1, heads=2, device="cpu"))


def test_a_planted_checkpoint_pickle_does_not_run(tmp_path):
    from envkit.trainers.local.checkpoint import latest_checkpoint, load_state

    marker = tmp_path / "PWNED"
    ckpt = tmp_path / "run" / "checkpoints" / "step_000009"
    ckpt.mkdir(parents=True)
    torch.save({"step": 9, "x": _Payload(marker)}, ckpt / "trainer_state.pt")
    (ckpt.parent / "latest").write_text("step_000009")
    found = latest_checkpoint(tmp_path / "run")
    assert found == ckpt
    with pytest.raises(ValueError, match="old-format checkpoint"):  # CheckpointError
        load_state(found)
    assert not marker.exists()
    # the run keeps working: the trainer's next checkpoint is the one resume loads
    from envkit.trainers.local.checkpoint import save_checkpoint

    model, tok = _tiny()
    save_checkpoint(tmp_path / "run", 10, model, tok, {"optimizer": {}})
    assert load_state(latest_checkpoint(tmp_path / "run"))["step"] == 10


def test_latest_must_stay_inside_checkpoints(tmp_path):
    from envkit.trainers.local.checkpoint import latest_checkpoint, save_checkpoint

    model, tok = _tiny()
    outside = tmp_path / "elsewhere"
    save_checkpoint(outside, 7, model, tok, {})
    run = tmp_path / "run"
    save_checkpoint(run, 1, model, tok, {})
    for planted in ("../../elsewhere/checkpoints/step_000007", str(outside / "checkpoints" / "step_000007")):
        (run / "checkpoints" / "latest").write_text(planted)
        with pytest.raises(ValueError, match="inside"):  # CheckpointError
            latest_checkpoint(run)
    (run / "checkpoints" / "latest").unlink()  # the run keeps working: the newest step_<N> inside it
    os.symlink(outside / "checkpoints" / "step_000007", run / "checkpoints" / "step_000008")
    assert latest_checkpoint(run) == run / "checkpoints" / "step_000001"


def test_trainer_state_round_trips_without_pickle(tmp_path):
    from envkit.trainers.local.checkpoint import latest_checkpoint, load_state, save_checkpoint

    model, tok = _tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()
    state = {
        "optimizer": opt.state_dict(),
        "explorer": {"token_ids": np.arange(5), "vectors": np.ones((2, 3), dtype=np.float32), "k": (1, 2)},
        "config": {"seed": 3, "lr": 1e-3, "names": ("a", "b"), "none": None},
    }
    path = save_checkpoint(tmp_path, 2, model, tok, state)
    assert not list(path.glob("*.pt"))
    got = load_state(latest_checkpoint(tmp_path))
    assert got["step"] == 2 and got["torch_rng"].dtype == torch.uint8 and got["torch_rng"].numel() > 0
    assert got["config"] == state["config"]
    assert got["explorer"]["k"] == (1, 2)
    np.testing.assert_array_equal(got["explorer"]["token_ids"], np.arange(5))
    assert got["explorer"]["vectors"].dtype == np.float32
    want = opt.state_dict()
    assert got["optimizer"]["param_groups"] == want["param_groups"]
    assert sorted(got["optimizer"]["state"]) == sorted(want["state"])
    for k, v in want["state"].items():
        for name, t in v.items():
            assert torch.equal(got["optimizer"]["state"][k][name], t)
    opt2 = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt2.load_state_dict(got["optimizer"])  # what resume does


def _planted_entry(env, game: int, marker: Path) -> Path:
    from envkit.envs.alfworld.assets import _versions

    g = env.games[game]
    raw = Path(g.gamefile()).resolve().read_bytes()
    digest = hashlib.sha256(raw + _versions().encode()).hexdigest()[:32]
    pkl = g.cache_dir / "assets" / f"{digest}.pkl"
    pkl.parent.mkdir(parents=True, exist_ok=True)
    pkl.write_bytes(pickle.dumps(_Payload(marker)))
    return pkl


@pytest.mark.slow
def test_a_planted_alfworld_asset_cache_does_not_run(alfworld_data, tmp_path):
    pytest.importorskip("textworld")
    from envkit.envs.alfworld import assets as assets_mod
    from envkit.envs.alfworld.env import ALFWorldEnv

    env = ALFWorldEnv(data_dir=alfworld_data, cache_dir=tmp_path / "cache", asset_cache_size=1)
    try:
        marker = tmp_path / "PWNED"
        pkl = _planted_entry(env, 0, marker)
        os.chmod(pkl, 0o666)  # writable by others
        assets_mod._ASSETS.clear()
        with pytest.warns(RuntimeWarning, match="others may write it"):
            obs, _ = env.reset(options={"game": 0})
        assert not marker.exists() and "Your task is to" in obs
        if os.geteuid() == 0:  # owned by another user
            pkl = _planted_entry(env, 0, marker)
            os.chmod(pkl, 0o600)
            os.chown(pkl, 65534, 65534)
            assets_mod._ASSETS.clear()
            with pytest.warns(RuntimeWarning, match="owned by uid 65534"):
                obs, _ = env.reset(options={"game": 0})
            assert not marker.exists() and "Your task is to" in obs
        # private to this user (0600, our uid), as code running as the trainer's user could plant it: no tag
        pkl = _planted_entry(env, 0, marker)
        os.chmod(pkl, 0o600)
        assets_mod._ASSETS.clear()
        with pytest.warns(RuntimeWarning, match="HMAC tag"):
            obs, _ = env.reset(options={"game": 0})
        assert not marker.exists() and "Your task is to" in obs
        # a pickle behind a forged header and a guessed tag, and another game's genuine entry renamed
        body = pickle.dumps(_Payload(marker))
        pkl.write_bytes(assets_mod._MAGIC + hashlib.sha256(body).digest() + body)
        assets_mod._ASSETS.clear()
        with pytest.warns(RuntimeWarning, match="HMAC tag"):
            env.reset(options={"game": 0})
        assert not marker.exists()
        if len(env.games) > 1:
            env.reset(options={"game": 1})
            other = [p for p in pkl.parent.glob("*.pkl") if p != pkl]
            assert other
            os.replace(other[0], pkl)
            assets_mod._ASSETS.clear()
            with pytest.warns(RuntimeWarning, match="HMAC tag"):
                obs3, _ = env.reset(options={"game": 0})
            assert obs3 == obs
        # the rebuilt entry is ours and is used: a fresh process-level cache loads it without warnings
        assets_mod._ASSETS.clear()
        obs2, _ = env.reset(options={"game": 0})
        assert obs2 == obs
        assert env.step("look")[0]
    finally:
        env.close()
