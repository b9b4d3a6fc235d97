"""The layer store's admission rule (`envkit.envs.swe.store_quota.Budgets`): exact values, no file system."""

from __future__ import annotations

import pytest

from envkit.envs.swe.store_quota import Account, Budgets, OwnerUsage

MiB = 1 << 20


def budgets() -> Budgets:
    b = Budgets(100 * MiB, 1000, 40 * MiB, 400, 10 * MiB, 100)
    b.owners["a"] = OwnerUsage(open=1)
    b.owners["b"] = OwnerUsage(open=1)
    return b


def test_floors_are_committed_for_open_owners_only():
    b = budgets()
    assert b.committed() == (20 * MiB, 200)
    b.owners["c"] = OwnerUsage(bytes=3 * MiB, inodes=5)  # closed: what it holds, no floor
    assert b.committed() == (23 * MiB, 205)
    assert b.promised_to_others("a") == (10 * MiB, 100)


def test_each_budget_refuses_with_its_name():
    b = budgets()
    acct = Account("a", 30 * MiB, 300)
    assert b.refusal(acct, 30 * MiB, 300) is None
    assert "Limits.snapshot_mb" in (b.refusal(acct, 30 * MiB + 1, 1) or "")
    b.charge(Account("a", 40 * MiB, 400), 35 * MiB, 10)  # another episode of the same owner
    assert "owner 'a'" in (b.refusal(acct, 6 * MiB, 1) or "")
    assert b.refusal(acct, 5 * MiB, 1) is None


def test_one_owner_cannot_take_another_owners_floor():
    b = Budgets(100 * MiB, 1000, 95 * MiB, 950, 10 * MiB, 100)
    b.owners["a"], b.owners["b"] = OwnerUsage(open=1), OwnerUsage(open=1)
    big = Account("a", 1 << 40, 1 << 30)
    assert b.refusal(big, 90 * MiB, 1) is None  # 90 + b's floor of 10 = 100: fits exactly
    b.charge(big, 90 * MiB, 1)
    assert "store is full" in (b.refusal(big, 1, 1) or "")  # the last 10 MiB are b's
    honest = Account("b", 1 << 40, 1 << 30)
    assert b.refusal(honest, 10 * MiB, 99) is None  # b within its floor: always admitted
    assert "store is full" in (b.refusal(honest, 10 * MiB + 1, 1) or "")
    b.uncharge(big, 90 * MiB, 1)
    assert b.owners["a"].bytes == 0 and "a" in b.owners  # still open: its floor stays


def test_the_disk_must_hold_the_others_floors():
    b = budgets()
    assert b.disk_refusal("a", 10 * MiB, 100) is None
    assert "file system" in (b.disk_refusal("a", 10 * MiB - 1, 100) or "")
    b.charge(Account("b", 1 << 40, 1 << 30), 4 * MiB, 40)  # b used part of its floor: less is kept for it
    assert b.disk_refusal("a", 6 * MiB, 60) is None


@pytest.mark.parametrize("bad", [(0, 1, 1, 1, 0, 0), (1, 1, 1, 1, -1, 0)])
def test_budgets_must_be_positive(bad):
    with pytest.raises(ValueError, match="positive"):
        Budgets(*bad)


def test_copy_layer_reports_the_real_disk_use_of_the_copy(tmp_path):
    import os

    from envkit.envs.swe.layer_files import copy_layer, usage

    src, dst = tmp_path / "src", tmp_path / "dst"
    (src / "pkg" / "empty").mkdir(parents=True)
    for i in range(300):
        (src / "pkg" / f"d{i}").mkdir()  # directories take blocks too
    (src / "pkg" / "m.py").write_text("x = 1\n" * 3000)
    with open(src / "sparse", "wb") as f:
        f.truncate(50 << 20)  # a hole: no blocks
        f.write(b"tail")
    os.symlink("pkg/m.py", src / "link")
    dst.mkdir()
    assert copy_layer(str(src), str(dst)) == usage(str(dst))[1:]
    assert usage(str(dst))[1] < 4 << 20  # the 50 MiB hole stayed a hole
