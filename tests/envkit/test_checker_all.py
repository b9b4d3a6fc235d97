"""`check_snapshot_env` on every registered id.

An env whose requirements (`envkit.registration.missing`: extra, programs, root, data) are absent skips with
those reasons, like every other test (under CI=true the skip is a failure). An env that `missing` reports as
usable must really start: any missing-extra / missing-system-tool / missing-data error then fails the test,
so ``envkit-oracle envs`` never calls an env usable that cannot start.
"""

from __future__ import annotations

import pytest

import envkit
from envkit.registration import missing

MARKS = {
    "envkit/Toy-v0": (),
    "envkit/MiniShop-v0": (),
    "envkit/MiniShopHeldout-v0": (),
    "envkit/MiniShopHeldoutRotated-v0": (),
    "envkit/MiniShopReadable-v0": (),
    "envkit/MiniShopReadableHeldoutRotated-v0": (),
    "envkit/MiniShopReadableEnd-v0": (),
    "envkit/MiniShopReadableEndHeldoutRotated-v0": (),
    "envkit/WebShopBrowser-v0": (pytest.mark.browser,),
}


@pytest.mark.parametrize(
    "env_id", [pytest.param(i, marks=MARKS.get(i, (pytest.mark.slow,))) for i in sorted(envkit.ENVS)]
)
def test_snapshot_contract(env_id, request):
    entry = envkit.ENVS[env_id]
    if entry.needs_data:
        fixture = {"ALFWORLD_DATA": "alfworld_data"}.get(entry.needs_data)
        if fixture:
            request.getfixturevalue(fixture)  # skips with the reason when the data is absent
    why = missing(entry)
    if why:
        pytest.skip(f"{env_id} cannot start here: " + "; ".join(why))
    try:
        env = envkit.make(env_id)
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("envs."):
            pytest.fail(f"{env_id} is registered but its module {exc.name} does not exist")
        raise
    try:
        report = envkit.check_snapshot_env(env)
    finally:
        env.close()
    assert sorted(report.rules) == [1, 2, 3, 4, 5, 6]
