"""Shared fixtures: real data locations (skip with the reason when absent) and a one-thread torch default."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = Path(os.environ.get("ENVKIT_SHARED_DATA", REPO.parent / "shared" / "data"))

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _data_dir(var: str, sub: str) -> Path | None:
    if os.environ.get(var):
        p = Path(os.environ[var])
        return p if p.exists() else None
    p = SHARED_DATA / sub
    return p if p.exists() else None


# Resolved once, before any test imports a domain package: importing `alfworld` sets $ALFWORLD_DATA to
# ~/.cache/alfworld when it is unset, which would hide the real data from later fixtures.
DATA_DIRS = {
    "ALFWORLD_DATA": _data_dir("ALFWORLD_DATA", "alfworld"),
    "WEBSHOP_DATA": _data_dir("WEBSHOP_DATA", "webshop"),
}
for _var, _path in DATA_DIRS.items():
    if _path is not None:
        os.environ[_var] = str(_path)


@pytest.fixture(scope="session")
def alfworld_data() -> Path:
    """The ALFWorld data dir ($ALFWORLD_DATA, else ../shared/data/alfworld); skips when absent."""
    p = DATA_DIRS["ALFWORLD_DATA"]
    if p is None:
        pytest.skip("ALFWorld data not found: set ALFWORLD_DATA to a dir made by alfworld-download")
    return p


@pytest.fixture(scope="session")
def webshop_data() -> Path:
    """The WebShop data dir ($WEBSHOP_DATA, else ../shared/data/webshop); skips when absent."""
    p = DATA_DIRS["WEBSHOP_DATA"]
    if p is None:
        pytest.skip("WebShop data not found: set WEBSHOP_DATA to a dir with items_ins_v2_1000.json")
    return p
