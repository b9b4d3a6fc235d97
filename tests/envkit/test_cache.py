"""One cache root: $ENVKIT_CACHE, else $XDG_CACHE_HOME/envkit, else ~/.cache/envkit (what .ci/run redirects)."""

from __future__ import annotations

from pathlib import Path

from envkit.cache import cache_root


def test_cache_root_follows_envkit_cache_then_xdg_then_home(monkeypatch, tmp_path):
    monkeypatch.setenv("ENVKIT_CACHE", str(tmp_path / "e"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_root() == tmp_path / "e"
    monkeypatch.delenv("ENVKIT_CACHE")
    assert cache_root() == tmp_path / "x" / "envkit"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "h"))
    assert cache_root() == Path(tmp_path / "h" / ".cache" / "envkit")


def test_alfworld_games_and_converted_models_live_under_it(monkeypatch, tmp_path):
    from envkit.envs.alfworld.data import default_cache_dir

    monkeypatch.setenv("ENVKIT_CACHE", str(tmp_path))
    monkeypatch.delenv("ENVKIT_MODEL_CACHE", raising=False)
    assert default_cache_dir() == tmp_path / "alfworld"
    from envkit.runtime.models import model_cache  # imports no torch at module level

    assert model_cache() == tmp_path / "models"
    monkeypatch.setenv("ENVKIT_MODEL_CACHE", str(tmp_path / "m"))
    assert model_cache() == tmp_path / "m"
