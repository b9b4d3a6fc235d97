"""``max_oracle_share`` means one thing in both trainers (docs/methods.md 4.6): oracle rows are at most that share
of the rows the update sees; `oracle_row_cap` is the one rule, told only whether oracle rows join by being added
(the local trainer) or by replacing failed rollouts (OpenRLHF, whose batch keeps its size)."""

from __future__ import annotations

import pytest

from envkit.trainers.sero_options import TrainerSeroOptions, oracle_row_cap


@pytest.mark.parametrize(
    ("share", "rows", "added", "replaced"),
    [
        (0.0, 8, 0, 0),
        (0.25, 8, 2, 2),  # 2 added to 8: 2/10 <= 25% (3 would be 3/11 > 25%); 2 of 8 replaced: 25%
        (0.25, 12, 4, 3),  # 4 added: 4/16; 3 of 12 replaced
        (0.5, 3, 3, 1),  # 3 added: 3/6; 1 of 3 replaced (2 would be 67%)
        (0.2, 8, 2, 1),
        (0.29, 100, 40, 29),  # 29 of 100: the float product 28.999999999999996 is not floored to 28
        (1.0, 4, None, 4),  # share 1: every added row is allowed; every row may be replaced
    ],
)
def test_oracle_rows_stay_within_the_share_of_the_batch_the_update_sees(share, rows, added, replaced):
    add = oracle_row_cap(share, rows, replace=False)
    assert add == added if added is not None else add > rows * 100
    assert oracle_row_cap(share, rows, replace=True) == replaced
    if added is not None:  # the defining inequality, and the next row would break it
        assert add <= share * (rows + add) + 1e-9 and (add + 1) > share * (rows + add + 1) + 1e-9
    assert replaced <= share * rows + 1e-9 and (replaced == rows or replaced + 1 > share * rows + 1e-9)
    opts = TrainerSeroOptions(max_oracle_share=share)
    assert (opts.max_oracle_rows(rows), opts.max_oracle_rows(rows, replace=True)) == (add, replaced)


def test_a_share_outside_0_1_is_refused():
    with pytest.raises(ValueError, match=r"max_oracle_share must be in \[0, 1\], got 1.5"):
        oracle_row_cap(1.5, 8, replace=True)
