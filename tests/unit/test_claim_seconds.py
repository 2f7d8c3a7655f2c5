"""scripts/check/claim_seconds.py: the claim table of docs/testing.md names tests that exist, and reads their seconds
from the lanes' --durations lines (setup + call + teardown, parametrized cases summed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("claim_seconds", REPO / "scripts" / "check" / "claim_seconds.py")
claim_seconds = importlib.util.module_from_spec(spec)
spec.loader.exec_module(claim_seconds)


def test_every_listed_test_exists(tmp_path, capsys):
    assert claim_seconds.main([str(tmp_path)]) == 0  # no logs: every time is "-", and no test is missing
    table = capsys.readouterr().out
    assert table.count("\n") == len(claim_seconds.CLAIMS) + 2


def test_seconds_are_summed_per_test_and_over_its_cases(tmp_path, capsys):
    node = "tests/integration/test_fault_runs.py::test_usr1_and_ctrl_c_save_upload_and_stop_in_one_line"
    (tmp_path / "main.log").write_text(
        f"12.50s call     {node}[SIGUSR1]\n3.00s setup    {node}[SIGUSR1]\n10.25s call     {node}[SIGINT]\n"
        "7.00s call     tests/unit/test_other.py::test_x\n")
    assert claim_seconds.read_seconds(tmp_path)[f"{node}[SIGUSR1]"] == 15.5
    sharded = "tests/integration/test_sharded_cpu.py::test_zero3_on_two_processes_matches_one_process"
    (tmp_path / "main2.log").write_text(f"41.00s call     {sharded}\n")  # the main lane's second slice
    assert claim_seconds.read_seconds(tmp_path)[sharded] == 41.0
    assert claim_seconds.main([str(tmp_path)]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if "SIGUSR1 and Ctrl-C" in line)
    assert "(2 cases)" in row and row.endswith("| 26 + - |")


def test_a_listed_test_that_is_gone_fails(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(claim_seconds, "CLAIMS", [("x", ["tests/unit/test_claim_seconds.py::test_no_such_test"])])
    assert claim_seconds.main([str(tmp_path)]) == 1
    assert "no such test any more" in capsys.readouterr().err
