"""Record store: JSONL/Parquet output, datasets compatibility, resume after SIGKILL without duplicates."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from envkit.errors import EnvkitError
from envkit.io import RecordStore, read_records

WRITER = textwrap.dedent(
    """
    import sys, time
    from envkit.io import RecordStore
    out, delay = sys.argv[1], float(sys.argv[2])
    store = RecordStore(out, meta={"run": "demo"})
    for u in range(12):
        unit = f"task-{u}"
        if unit in store.done:
            continue
        time.sleep(delay)
        store.append(unit, [{"task": u, "step": k, "text": "x" * 2000} for k in range(50)])
        print(unit, flush=True)
    store.finalize()
    """
)


def _run_writer(out: Path, delay: float) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", WRITER, str(out), str(delay)], stdout=subprocess.PIPE, text=True)


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_resume_after_sigkill_never_duplicates_or_loses(tmp_path, suffix):
    ref = tmp_path / f"ref{suffix}"
    assert _run_writer(ref, 0).wait(60) == 0
    out = tmp_path / f"run{suffix}"
    for _ in range(3):  # kill it twice mid-run, then let it finish
        proc = _run_writer(out, 0.15)
        assert proc.stdout is not None
        proc.stdout.readline()
        time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert _run_writer(out, 0).wait(60) == 0
    assert out.read_bytes() == ref.read_bytes()
    recs = read_records(out)
    assert len(recs) == 12 * 50
    assert len({(r["task"], r["step"]) for r in recs}) == len(recs)


def test_torn_last_line_is_dropped(tmp_path):
    out = tmp_path / "x.jsonl"
    store = RecordStore(out)
    store.append("a", [{"v": 1}])
    with open(store.journal, "ab") as f:
        f.write(b'{"unit": "b", "records": [{"v"')  # a write cut by a kill
    again = RecordStore(out)
    assert again.dropped_torn_line and again.done == {"a"}
    again.append("b", [{"v": 2}])
    assert [r["v"] for r in RecordStore(out).records()] == [1, 2]


def test_duplicate_unit_and_changed_settings_are_refused(tmp_path):
    out = tmp_path / "x.parquet"
    store = RecordStore(out, meta={"seed": 1})
    store.append("a", [{"v": 1}])
    with pytest.raises(EnvkitError, match="already stored"):
        store.append("a", [{"v": 1}])
    with pytest.raises(EnvkitError, match="seed"):
        RecordStore(out, meta={"seed": 2})
    with pytest.raises(EnvkitError, match=r"\.jsonl or \.parquet"):
        RecordStore(tmp_path / "x.csv")


def test_parquet_loads_with_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    out = tmp_path / "x.parquet"
    store = RecordStore(out)
    store.append("t1", [{"obs": "a", "w": 0.5, "info": {"k": [1, 2]}}])
    store.append("t0", [{"obs": "b", "w": 1.0, "info": {"k": []}}])
    store.finalize()
    ds = datasets.load_dataset("parquet", data_files=str(out), split="train")
    assert ds["obs"] == ["b", "a"]  # units in sorted order
    assert json.loads(json.dumps(ds[0]["info"])) == {"k": []}


def test_last_line_cut_before_its_newline_is_dropped(tmp_path):
    """A kill between the JSON and its newline leaves a parseable but unterminated line: it must not be kept."""
    out = tmp_path / "x.jsonl"
    store = RecordStore(out)
    store.append("a", [{"v": 1}])
    with open(store.journal, "ab") as f:
        f.write(b'{"records": [{"v": 2}], "unit": "b"}')  # complete JSON, newline not yet written
    again = RecordStore(out)
    assert again.dropped_torn_line and again.done == {"a"}
    again.append("b", [{"v": 3}])
    assert [r["v"] for r in RecordStore(out).records()] == [1, 3]


def test_corrupt_middle_line_is_an_error_not_data_loss(tmp_path):
    out = tmp_path / "x.jsonl"
    store = RecordStore(out)
    store.append("a", [{"v": 1}])
    with open(store.journal, "ab") as f:
        f.write(b"garbage\n")
    store2_line = b'{"records": [{"v": 2}], "unit": "b"}\n'
    with open(store.journal, "ab") as f:
        f.write(store2_line)
    with pytest.raises(EnvkitError, match="corrupt at line 3"):
        RecordStore(out)
    assert store2_line in store.journal.read_bytes()  # nothing was truncated away
