"""Sweep plans, the durable sweep table, failures, and a sweep killed and resumed."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from bayes_energy.datasets import load_sweep
from bayes_energy.runner.plan import PlanError, RunConfig, config_key, load_plan, parse_plan, parse_shard, shard
from bayes_energy.schema import REQUIRED, validate
from bayes_energy.runner.sweep import COLUMNS, Node, SweepError, SweepTable, check_row, launch, make_row, run_sweep

ROOT = Path(__file__).resolve().parents[1]

TINY_PLAN = """
[sweep]
steps = 2
warmup = 1
vocab_size = 256
timeout_s = 120

[[grid]]
num_layers = 1
hidden_size = 32
heads = 2
ff_mult = 2
seq_len = 16
batch_size = [2, 3, 4]
strategy = "single"
n_gpus = 1
"""


def test_runner_never_imports_the_modelling_side():
    code = (
        "import sys\n"
        "import bayes_energy.runner.sweep, bayes_energy.runner\n"
        "import bayes_energy.runner.meters, bayes_energy.runner.plan, bayes_energy.runner.worker\n"
        "import bayes_energy.runner.workload\n"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('pymc', 'arviz', 'pytensor', 'nutpie')"
        " or m.startswith('bayes_energy.models')]\n"
        "assert 'pymc' not in sys.modules, bad\n"
        "assert not bad, bad\n"
        "print('clean')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "clean"


# ----------------------------------------------------------------------- plans
def test_grid_expands_skips_what_cannot_run_and_dedupes():
    plan = parse_plan(
        {
            "sweep": {"steps": 3, "vocab_size": 512},
            "grid": [
                {"num_layers": [1, 2], "hidden_size": 64, "heads": [2, 3], "ff_mult": 4, "seq_len": 32,
                 "batch_size": 4, "strategies": ["single", "ddp", "tp"], "n_gpus": [1, 2]},
                {"num_layers": 1, "hidden_size": 64, "heads": 2, "ff": 256, "seq_len": 32, "batch_size": 4,
                 "strategy": "ddp", "n_gpus": 2},
            ],
        }
    )
    labels = [c.label for c in plan.configs]
    assert all(c.ff == 256 and c.steps == 3 and c.vocab_size == 512 for c in plan.configs)
    assert not any(c.strategy == "single" and c.n_gpus > 1 for c in plan.configs)
    assert not any(c.heads == 3 for c in plan.configs)  # 64 is not a multiple of 3
    assert len(labels) == len(set(labels)) == 2 * (1 + 2 + 2)  # layers x (single1, ddp1, ddp2, tp1, tp2)
    assert any("listed before" in s for s in plan.skipped)
    assert any("single' runs on 1 device" in s for s in plan.skipped)


def test_explicit_config_must_be_valid():
    with pytest.raises(PlanError, match=r"\[\[config\]\] #1.*tp over 2 devices needs heads divisible"):
        parse_plan({"config": [{"num_layers": 1, "hidden_size": 63, "heads": 3, "ff": 128, "seq_len": 8,
                                "batch_size": 1, "strategy": "tp", "n_gpus": 2}]})


def test_plan_errors_name_the_file_and_field(tmp_path):
    p = tmp_path / "p.toml"
    p.write_text("[[grid]]\nnum_layerz = 1\n")
    with pytest.raises(PlanError, match=r"p.toml: \[\[grid\]\] #1: unknown field 'num_layerz'"):
        load_plan(p)
    p.write_text("[[grid]\n")
    with pytest.raises(PlanError, match="not valid TOML"):
        load_plan(p)
    with pytest.raises(PlanError, match="no such plan file"):
        load_plan(tmp_path / "missing.toml")


def test_sample_is_deterministic():
    grid = {"num_layers": [1, 2, 3, 4], "hidden_size": [32, 64], "heads": 2, "ff_mult": 4, "seq_len": [8, 16],
            "batch_size": [1, 2], "strategy": "ddp", "n_gpus": [1, 2], "sample": 7, "seed": 3}
    a = parse_plan({"grid": [grid]}).configs
    b = parse_plan({"grid": [grid]}).configs
    assert len(a) == 7 and a == b


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_shards_partition_the_plan(n):
    configs = [RunConfig(1, 32, 2, 64, 8, b, "single", 1) for b in range(1, 12)]
    parts = [shard(configs, i, n) for i in range(n)]
    flat = [c for p in parts for c in p]
    assert sorted(flat, key=lambda c: c.batch_size) == configs
    assert max(map(len, parts)) - min(map(len, parts)) <= 1


def test_parse_shard():
    assert parse_shard("2/4") == (2, 4)
    for bad in ("4/4", "1", "a/b", "-1/2"):
        with pytest.raises(PlanError):
            parse_shard(bad)


def test_shipped_plan_parses():
    plan = load_plan(ROOT / "data" / "plans" / "cpu_sweep.toml")
    strategies = {(c.strategy, c.n_gpus) for c in plan.configs}
    for s in ("ddp", "fsdp", "tp"):
        assert {(s, 1), (s, 2)} <= strategies
    assert ("single", 1) in strategies
    assert len(plan.configs) >= 80


# ----------------------------------------------------------------------- the table
def _row(b=2, status="ok", **kw):
    cfg = RunConfig(1, 32, 2, 64, 16, b, "single", 1, steps=2)
    row = {c: None for c in COLUMNS}
    row.update(cfg.to_dict(), hardware="Fake CPU", family="bert", status=status)
    if status == "ok":
        row.update(tokens=64.0, time_s=0.5, energy_j=3.0, energy_source="estimate", repeats=1)
    row.update(kw)
    return row


def test_table_appends_whole_lines_and_repairs_a_torn_tail(tmp_path):
    out = tmp_path / "s.csv"
    with SweepTable(out) as t:
        t.append(_row(2))
        t.append(_row(3, error="multi\nline, with comma"))
    good = out.read_bytes()
    with open(out, "ab") as fh:
        fh.write(b"Fake CPU,bert,1,32,2,64,16,4,1,64.0,sin")  # a killed writer's half line
    with SweepTable(out) as t:
        assert t.repaired_bytes > 0
        assert len(t.done_keys()) == 2
    assert out.read_bytes() == good
    df = pd.read_csv(out)
    assert list(df.columns) == list(COLUMNS) and len(df) == 2
    assert df["error"].iloc[1] == "multi line, with comma"


def test_torn_header_is_rewritten(tmp_path):
    out = tmp_path / "s.csv"
    out.write_text("hardware,fam")
    with SweepTable(out) as t:
        assert t.fieldnames == list(COLUMNS)
    assert out.read_text().splitlines()[0].split(",") == list(COLUMNS)


def test_a_second_sweep_on_the_same_file_is_refused(tmp_path):
    out = tmp_path / "s.csv"
    with SweepTable(out):
        with pytest.raises(SweepError, match="another sweep is writing"):
            SweepTable(out)


def test_foreign_csv_is_refused(tmp_path):
    out = tmp_path / "s.csv"
    out.write_text("a,b\n1,2\n")
    with pytest.raises(SweepError, match="lacks"):
        SweepTable(out)


def test_drop_failed_keeps_ok_rows(tmp_path):
    out = tmp_path / "s.csv"
    with SweepTable(out) as t:
        t.append(_row(2))
        t.append(_row(3, status="failed", error="boom"))
        assert t.drop_failed() == 1
        t.append(_row(3))
    assert pd.read_csv(out)["status"].tolist() == ["ok", "ok"]


def test_failed_rows_pass_the_schema_and_load_sweep_drops_them(tmp_path):
    node = Node(device="cpu", meter="estimate")
    cfg = RunConfig(1, 32, 2, 64, 16, 2, "ddp", 2)
    row = check_row(make_row(cfg, {"status": "failed", "error": "out of memory (OutOfMemoryError: CUDA)"}, node, "p", "0/1"))
    ok = check_row(_row(2, hardware=node.hardware(1)))
    out = tmp_path / "s.csv"
    with SweepTable(out) as t:
        t.append(ok)
        t.append(row)
    df = pd.read_csv(out)
    assert df.loc[1, "status"] == "failed" and pd.isna(df.loc[1, "energy_j"]) and pd.isna(df.loc[1, "time_s"])
    assert df.loc[1, "host"] and df.loc[1, "torch_version"]
    validate(df)
    assert len(load_sweep(out)) == 1
    assert len(load_sweep(out, include_failed=True)) == 2


def test_a_zero_energy_row_is_never_written_as_ok():
    row = check_row(_row(2, energy_j=0.0))
    assert row["status"] == "failed" and "invalid measurement" in row["error"]
    assert row["energy_j"] is None


# ----------------------------------------------------------------------- launches that fail
@pytest.fixture(scope="module")
def cpu_node():
    return Node(device="cpu", meter="estimate", tdp_w=20.0)


def test_worker_error_becomes_a_failed_result(cpu_node, tmp_path):
    bad = RunConfig(1, 30, 4, 64, 8, 2, "single", 1)  # 30 is not a multiple of 4 heads
    res = launch(bad, cpu_node, tmp_path, timeout_s=60)
    assert res["status"] == "failed"
    assert "ValueError" in res["error"] and "not a multiple of heads" in res["error"]


def test_timeouts_become_failed_rows_and_the_sweep_goes_on(cpu_node, tmp_path):
    plan = parse_plan({"grid": [{"num_layers": 1, "hidden_size": 32, "heads": 2, "ff": 64, "seq_len": 8,
                                 "batch_size": [1, 2], "strategy": "single", "n_gpus": 1}]})
    out = tmp_path / "s.csv"
    summary = run_sweep(plan, out, cpu_node, timeout_s=1.0, idle_s=0.1, no_progress=True)
    assert summary["failed"] == 2
    df = pd.read_csv(out)
    assert df["status"].tolist() == ["failed", "failed"]
    assert df["error"].str.startswith("timeout after 1 s").all()
    validate(df)


# ----------------------------------------------------------------------- kill and resume
def _our_processes(tag: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if tag in (d / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


@pytest.mark.slow
def test_sweep_killed_mid_run_resumes_without_lost_or_duplicated_rows(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(TINY_PLAN)
    out = tmp_path / "sweep.csv"
    logs = tmp_path / "logs"
    cmd = [sys.executable, "-m", "bayes_energy.runner.sweep", str(plan), "--out", str(out), "--device", "cpu",
           "--meter", "estimate", "--idle-s", "0.2", "--no-progress", "--log-dir", str(logs)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if out.exists() and len(out.read_bytes().splitlines()) >= 2:
            break
        assert proc.poll() is None, proc.stdout.read().decode()
        time.sleep(0.1)
    else:
        proc.kill()
        pytest.fail("no row within 90 s")
    os.kill(proc.pid, signal.SIGKILL)  # really killed, mid-way through the second configuration
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    first = out.read_bytes()
    lines_before = first.splitlines()
    assert 2 <= len(lines_before) <= 3  # header plus the row(s) that landed

    # the workers of the killed sweep go down with it (parent-death signal)
    deadline = time.monotonic() + 30
    while _our_processes(str(logs)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _our_processes(str(logs))

    with open(out, "ab") as fh:  # and a half-written line, as a kill during a write would leave
        fh.write(first.splitlines()[1][:25])
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "removed a partial last line" in done.stderr
    assert "already in" in done.stderr

    text = out.read_bytes()
    assert text.startswith(first)  # rows written before the kill are untouched
    assert text.endswith(b"\n")
    with open(out, newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert sorted(int(r["batch_size"]) for r in rows) == [2, 3, 4]  # none lost, none twice
    assert len({config_key(r, r["hardware"]) for r in rows}) == 3
    assert all(r["status"] == "ok" and r["energy_source"] == "estimate" for r in rows)
    table = load_sweep(out)
    assert len(table) == 3 and set(REQUIRED) <= set(table.columns)

    again = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and out.read_bytes() == text  # re-running a finished plan adds nothing


def test_cli_dry_run_lists_the_shard(tmp_path):
    plan = tmp_path / "plan.toml"
    plan.write_text(TINY_PLAN)
    out = tmp_path / "s.csv"
    runs = []
    for i in range(2):
        r = subprocess.run(
            [sys.executable, "-m", "bayes_energy.runner.sweep", str(plan), "--out", str(out), "--shard", f"{i}/2",
             "--device", "cpu", "--meter", "estimate", "--dry-run"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )
        assert r.returncode == 0, r.stderr
        assert "energy is an ESTIMATE" in r.stderr
        runs.append(r.stdout.split("\n")[:-1])
    assert sorted(runs[0] + runs[1]) == sorted(c.label for c in load_plan(plan).configs)
    bad = subprocess.run([sys.executable, "-m", "bayes_energy.runner.sweep", str(plan), "--out", str(out), "--shard", "2/2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--shard 2/2" in bad.stderr
