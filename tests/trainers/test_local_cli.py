"""`envkit-train`: `local` options from the config dataclasses, `openrlhf` arguments passed through raw."""

from __future__ import annotations

import sys
import types

import pytest

pytest.importorskip("tyro")

from trainers import cli


def test_local_help_lists_every_option_with_its_default(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["local", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    for option in (
        "--task",
        "--model.path",
        "--loss.kl-coef",
        "--eden.rho",
        "--xrpo.n0",
        "--agent.max-context-tokens",
        "--resume",
        "--explorer",
    ):
        assert option in text
    assert "(default: tiny:arith)" in text and "(default: 0.12)" in text


def test_local_rejects_bad_values_with_a_message(capsys):
    with pytest.raises(SystemExit):
        cli.main(["local", "--explorer", "nope"])
    assert "nope" in capsys.readouterr().err


def test_openrlhf_gets_the_raw_arguments_including_the_separator(monkeypatch):
    seen: list[list[str]] = []
    fake = types.ModuleType("trainers.openrlhf.entry")

    def fake_main(argv: list[str]) -> int:
        seen.append(argv)
        return 3

    fake.main = fake_main  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "trainers.openrlhf.entry", fake)
    with pytest.raises(SystemExit) as exc:
        cli.main(["openrlhf", "--explorer", "eden", "--", "--algo.advantage.estimator", "group_norm"])
    assert exc.value.code == 3
    assert seen == [["--explorer", "eden", "--", "--algo.advantage.estimator", "group_norm"]]


def test_top_level_help_names_both_backends(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "local" in out and "openrlhf" in out
