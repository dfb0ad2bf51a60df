"""Issue 13: nothing lost, nothing silent. A campaign of bad inputs and faults.

``docs/reliability.md`` lists each promise with the test that checks it.
Together with ``tests/test_cli_safety.py`` (the ``--out`` cases) this is the
campaign: every bad input ends in one line, ``error: ...``, naming the file,
row and column or the option; exit status 2; no traceback; no partial
output; nothing the user had is changed.

Commands run in-process (their ``main``) where the path under test returns
before any sampling.
"""

from __future__ import annotations

import errno
import gzip
import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bayes_energy.schema import CONFIG_COLUMNS, REQUIRED, SchemaError, validate
from tests.test_schema import good_table

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "cpu_sweep.csv"
SHIPPED = DATA.read_bytes()


def _error_line(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith("warning: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def fit_main(*args):
    from bayes_energy.fit import main

    return main([str(a) for a in args])


def predict_main(*args):
    from bayes_energy.predict import main

    return main([str(a) for a in args])


# --------------------------------------------------------------------------- files fed to fit
def _csv_variants(tmp: Path) -> dict[str, tuple[Path, str | None]]:
    """name -> (file, words of the error, or None when the file must be read correctly)."""
    header = SHIPPED.split(b"\n", 1)[0] + b"\n"
    files = {
        "empty file": (b"", "empty"),
        "header only": (header, "no rows"),
        "binary file": (b"\x00\x01\x02\xff" * 64, "a binary file, not a CSV"),
        "semicolon separated": (SHIPPED.replace(b",", b";"), "semicolons"),
        "tab separated": (SHIPPED.replace(b",", b"\t"), "tabs"),
        "BOM": (b"\xef\xbb\xbf" + SHIPPED, None),
        "CRLF line ends": (SHIPPED.replace(b"\n", b"\r\n"), None),
    }
    out = {}
    for name, (content, words) in files.items():
        p = tmp / (name.replace(" ", "_") + ".csv")
        p.write_bytes(content)
        out[name] = (p, words)
    gz = tmp / "sweep.csv.gz"
    gz.write_bytes(gzip.compress(SHIPPED))
    out["gzip"] = (gz, None)
    out["missing path"] = (tmp / "nope.csv", "no such file")
    out["directory path"] = (tmp, "is a folder")
    return out


CSV_CASES = ["empty file", "header only", "binary file", "semicolon separated", "tab separated", "BOM",
             "CRLF line ends", "gzip", "missing path", "directory path"]


@pytest.mark.parametrize("case", CSV_CASES)
def test_fit_reads_or_refuses_each_kind_of_file(case, tmp_path, capsys):
    src = tmp_path / "in"
    src.mkdir()
    path, words = _csv_variants(src)[case]
    out = tmp_path / "fit"
    rc = fit_main("--data", path, "--model", "ols", "--out", out)
    if words is None:  # read correctly: the same 96 runs as the plain file
        assert rc == 0
        assert "data: 96 runs" in capsys.readouterr().out
        assert json.loads((out / "diagnostics.json").read_text())["n"] == 96
    else:
        assert rc == 2
        line = _error_line(capsys)
        assert words in line and (str(path) in line or path.name in line)
        assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".fit-")]


# --------------------------------------------------------------------------- absurd and tiny values through the CLI
@pytest.mark.parametrize("col,value", [("energy_j", 1e300), ("energy_j", 1e-300), ("time_s", 0.0),
                                       ("tokens", -5), ("seq_len", 0), ("n_gpus", 10_000_000)])
def test_fit_refuses_absurd_values_naming_row_and_column(col, value, tmp_path, capsys):
    df = pd.read_csv(DATA)
    df[col] = df[col].astype(float)
    df.loc[4, col] = value
    path = tmp_path / "edited.csv"
    df.to_csv(path, index=False)
    assert fit_main("--data", path, "--model", "ols", "--out", tmp_path / "fit") == 2
    line = _error_line(capsys)
    assert "edited.csv: row 6" in line and f"column '{col}'" in line
    assert not (tmp_path / "fit").exists()


# --------------------------------------------------------------------------- predict arguments and candidates
def _candidates(path, **kw):
    base = {"hardware": "NVIDIA A100-SXM4-80GB", "family": "bert", "num_layers": 12, "hidden_size": 768, "heads": 12,
            "ff": 3072, "seq_len": 128, "batch_size": 16, "tokens": 1e6, "strategy": "ddp", "n_gpus": 2}
    pd.DataFrame([base | kw]).to_csv(path, index=False)
    return path


@pytest.mark.parametrize("prob", ["0", "1", "1.5", "-0.1", "nan"])
def test_predict_prob_outside_0_1_is_refused(prob, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        predict_main("--posterior", "x.nc", "--configs", _candidates(tmp_path / "c.csv"), "--out", tmp_path / "p.csv",
                     "--prob", prob)
    assert e.value.code == 2 and "--prob" in _error_line(capsys)


@pytest.mark.parametrize("kw,col", [({"seq_len": 0}, "seq_len"), ({"tokens": -5}, "tokens"),
                                    ({"batch_size": "eight"}, "batch_size"), ({"strategy": "zero3"}, "strategy")])
def test_predict_bad_candidates_name_row_and_column(kw, col, tmp_path, capsys):
    out = tmp_path / "p.csv"
    assert predict_main("--posterior", "x.nc", "--configs", _candidates(tmp_path / "c.csv", **kw), "--out", out) == 2
    line = _error_line(capsys)
    assert "c.csv: row 2" in line and f"column '{col}'" in line and not out.exists()


def test_predict_missing_posterior_and_truncated_posterior(small_fit_dir, tmp_path, capsys):
    configs = _candidates(tmp_path / "c.csv")
    out = tmp_path / "p.csv"
    assert predict_main("--posterior", tmp_path / "none.nc", "--configs", configs, "--out", out) == 2
    assert "no such file" in _error_line(capsys)
    whole = (small_fit_dir / "posterior.nc").read_bytes()
    cut = tmp_path / "cut.nc"
    cut.write_bytes(whole[: len(whole) // 2])
    assert predict_main("--posterior", cut, "--configs", configs, "--out", out) == 2
    assert "not a readable netCDF posterior" in _error_line(capsys)
    assert not out.exists()


def test_predict_huge_device_count_warns_extrapolation(small_fit_dir, tmp_path, capsys):
    out = tmp_path / "p.csv"
    configs = _candidates(tmp_path / "c.csv", hardware="NVIDIA A100-SXM4-40GB", family="gpt", strategy="fsdp",
                          n_gpus=10_000)
    from bayes_energy.predict import ExtrapolationWarning

    with pytest.warns(ExtrapolationWarning, match="n_gpus 10000.*extrapolated"):
        assert predict_main("--posterior", small_fit_dir / "posterior.nc", "--configs", configs, "--out", out,
                            "--seed", "0") == 0
    assert "Traceback" not in capsys.readouterr().err
    assert pd.read_csv(out)["energy_j_median"].notna().all()


# --------------------------------------------------------------------------- report and plan
def test_report_of_a_folder_without_posterior_and_of_a_missing_folder(tmp_path, capsys):
    from bayes_energy.report import main

    (tmp_path / "empty").mkdir()
    assert main([str(tmp_path / "empty")]) == 2
    assert "posterior.nc" in _error_line(capsys)
    assert main([str(tmp_path / "nope")]) == 2
    assert "no such folder" in _error_line(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"] and not any((tmp_path / "empty").iterdir())


@pytest.mark.parametrize("args,words", [(["--n-gpus", "0"], "--n-gpus"), (["--energy-budget-j", "-1"], "--energy-budget-j"),
                                        (["--seq-len", "0"], "--seq-len"), (["--p", "-0.5"], "--p")])
def test_plan_bad_numbers_are_refused_at_once(args, words, capsys):
    from bayes_energy.plan import main

    base = ["--posterior", "x.nc", "--arch", "bert-base", "--seq-len", "128", "--batch-size", "8", "--tokens", "1e6"]
    with pytest.raises(SystemExit) as e:
        main(base + args)
    assert e.value.code == 2 and words in _error_line(capsys)


def test_plan_workload_heads_must_divide_hidden_size():
    from bayes_energy.plan import Workload

    with pytest.raises(ValueError, match="--hidden-size 770 is not a multiple of --heads 12"):
        Workload(family="bert", num_layers=2, hidden_size=770, ff=64, heads=12, seq_len=8, batch_size=2, tokens=1e5)


# --------------------------------------------------------------------------- property-based: the validators
def _frames(columns: dict[str, str]):
    cell = st.one_of(
        st.none(), st.booleans(), st.integers(-10, 10**7),
        st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["", " ", "x", "ddp", "single", "1e3", "nan"]),
    )
    good = good_table()

    @st.composite
    def frame(draw):
        df = good[[c for c in columns if c in good.columns]].copy().astype(object)
        n = draw(st.integers(0, 3))
        for _ in range(n):
            col = draw(st.sampled_from(list(df.columns)))
            row = draw(st.integers(0, len(df) - 1))
            df.loc[row, col] = draw(cell)
        if draw(st.booleans()):
            df = df.drop(columns=draw(st.sampled_from(list(df.columns))))
        if draw(st.booleans()):
            df = df.iloc[: draw(st.integers(0, len(df)))]
        return df

    return frame()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_frames(REQUIRED))
def test_validate_returns_a_clean_table_or_raises_schema_error(df):
    try:
        out = validate(df, source="gen.csv")
    except SchemaError as err:
        assert str(err).startswith("gen.csv")
        return
    assert len(out) == len(df) > 0
    assert not out[list(REQUIRED)].isna().any().any()
    numeric = [c for c, k in REQUIRED.items() if k != "str"]
    assert np.isfinite(out[numeric].to_numpy(float)).all() and (out[numeric].to_numpy(float) > 0).all()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_frames(CONFIG_COLUMNS))
def test_check_candidates_returns_a_clean_table_or_raises_schema_error(df):
    from bayes_energy.predict import check_candidates

    try:
        out = check_candidates(df, source="cands.csv")
    except SchemaError as err:
        assert str(err).startswith("cands.csv")
        return
    assert len(out) == len(df) > 0
    assert not out[list(CONFIG_COLUMNS)].isna().any().any()
    assert (out.loc[out["strategy"] == "single", "n_gpus"] == 1).all()


# --------------------------------------------------------------------------- sweeps under faults
FAKE_SWEEP = r"""
import random, sys, time
import bayes_energy.runner.sweep as sw
from bayes_energy.runner.plan import parse_plan

def fake_launch(cfg, node, workdir, timeout_s, measured_by="per-rank", extra=(), log_name="run"):
    time.sleep(random.uniform(0.0, 0.03))
    return {"status": "ok", "tokens": cfg.batch_size * cfg.seq_len * 3, "time_s": 0.5 + cfg.batch_size / 100,
            "energy_j": 5.0 + cfg.batch_size, "energy_source": "estimate", "repeats": 1}

sw.launch = fake_launch
plan = parse_plan({"grid": [{"num_layers": 1, "hidden_size": 32, "heads": 2, "ff": 64, "seq_len": [8, 16],
                             "batch_size": list(range(1, 21)), "strategy": "single", "n_gpus": 1}]})
node = sw.Node(device="cpu", meter="estimate", tdp_w=20.0)
sw.run_sweep(plan, sys.argv[1], node, idle_s=0.0, no_progress=True)
"""


@pytest.mark.slow
def test_sweep_killed_five_times_at_random_points_has_every_row_exactly_once(tmp_path):
    """SIGKILL at random moments (mid-write included), resume each time: 40 rows, each once, no torn line."""
    script = tmp_path / "fake_sweep.py"
    script.write_text(FAKE_SWEEP)
    out = tmp_path / "sweep.csv"
    rng = random.Random(13)
    cmd = [sys.executable, str(script), str(out)]
    kills = 0
    while kills < 5:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        start = len(out.read_bytes().splitlines()) if out.exists() else 0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:  # wait for progress, then kill at random
            if out.exists() and len(out.read_bytes().splitlines()) > start + rng.randint(0, 3):
                break
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.03))
        if proc.poll() is not None:
            break  # finished before we could kill it
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        kills += 1
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert kills == 5
    text = out.read_bytes()
    assert text.endswith(b"\n")
    df = pd.read_csv(out)
    assert len(df) == 40 and not df.duplicated(["seq_len", "batch_size"]).any()
    assert (df["status"] == "ok").all() and df["energy_j"].notna().all()
    header = text.split(b"\n", 1)[0]
    assert text.count(header) == 1


def test_two_sweeps_on_one_file_never_interleave(tmp_path):
    """The second sweep on the same output refuses at once (exit 2) while the first one holds it."""
    from bayes_energy.runner.sweep import SweepTable

    out = tmp_path / "s.csv"
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from bayes_energy.runner.sweep import SweepTable; "
                               f"t = SweepTable({str(out)!r}); print('locked', flush=True); time.sleep(30)"],
                              cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        plan = tmp_path / "p.toml"
        plan.write_text('[[grid]]\nnum_layers = 1\nhidden_size = 32\nheads = 2\nff = 64\nseq_len = 8\n'
                        'batch_size = 2\nstrategy = "single"\nn_gpus = 1\n')
        r = subprocess.run([sys.executable, "-m", "bayes_energy.runner.sweep", str(plan), "--out", str(out), "--device", "cpu",
                            "--meter", "estimate", "--idle-s", "0"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "another sweep is writing this file" in r.stderr and "Traceback" not in r.stderr
        with pytest.raises(Exception, match="another sweep"):
            SweepTable(out)
    finally:
        holder.kill()
        holder.wait()
    assert out.read_bytes().count(b"\n") == 1  # the header the holder wrote, nothing else


def test_device_lost_mid_window_is_a_failed_row_never_ok(tmp_path, monkeypatch):
    """NVML reports GPU_IS_LOST at the end of a window: the worker fails, the sweep writes a failed row."""
    pynvml = pytest.importorskip("pynvml")
    from bayes_energy.runner import sweep
    from bayes_energy.runner import meters, worker
    from bayes_energy.runner.plan import RunConfig
    from tests.test_meters import HOPPER, FakeNVML

    cfg = RunConfig(1, 32, 2, 64, 8, 2, "single", 1)
    result = tmp_path / "run.json"
    monkeypatch.setenv("RANK", "0")
    with mock.patch("bayes_energy.runner.meters.pynvml", autospec=True) as nv:
        fake = FakeNVML(nv, [HOPPER])
        reads = {"n": 0}

        def energy(h):
            reads["n"] += 1
            if reads["n"] > 2:  # probe and window start succeed, then the device is gone
                raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
            return fake.energy_mj[h]

        nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = energy
        monkeypatch.setattr(worker, "_make_monitor", lambda *a: (meters.NVMLMonitor(meters.nvml_gpus()), True,
                                                                 "per-rank", None))
        monkeypatch.setattr(worker, "_die_with_parent", lambda: None)
        rc = worker.main(["--config", json.dumps(cfg.to_dict()), "--result", str(result), "--device", "cpu"])
    assert rc == 1 and not result.exists()
    message = sweep._failure_message(1, result, tmp_path / "run.log")
    assert "lost" in message.lower() or "nvml" in message.lower()
    node = sweep.Node(device="cpu", meter="estimate", tdp_w=20.0)
    row = sweep.check_row(sweep.make_row(cfg, {"status": "failed", "error": message}, node, "p", "0/1"))
    assert row["status"] == "failed" and row["energy_j"] is None and row["error"] == message


def test_disk_full_while_saving_a_posterior_keeps_the_previous_file(small_fit, tmp_path, monkeypatch):
    import arviz as az

    from bayes_energy.models.io import load, save

    idata, _ = small_fit
    path = tmp_path / "posterior.nc"
    save(idata, path)
    before = path.read_bytes()

    def full(self, filename, *a, **kw):
        Path(filename).write_bytes(b"\x89HDF partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(az.InferenceData, "to_netcdf", full)
    with pytest.raises(OSError, match="No space left"):
        save(idata, path)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["posterior.nc"]
    monkeypatch.undo()
    load(path)


# --------------------------------------------------------------------------- security
def test_loading_a_posterior_never_unpickles_or_evaluates(small_fit_dir, tmp_path, monkeypatch):
    import arviz as az

    from bayes_energy.models.io import PosteriorFileError, load

    canary = tmp_path / "PWNED"
    payload = f"__import__('pathlib').Path({str(canary)!r}).write_text('x')"
    idata = az.from_netcdf(small_fit_dir / "posterior.nc")
    idata.load()
    idata.posterior.attrs["bayes_energy_config"] = payload  # code where JSON is expected
    idata.posterior.attrs["pickled"] = pickle.dumps(payload).hex()
    evil = tmp_path / "evil.nc"
    idata.to_netcdf(evil)

    def forbidden(*a, **kw):
        raise AssertionError("pickle used on a posterior file")

    monkeypatch.setattr(pickle, "loads", forbidden)
    monkeypatch.setattr(pickle, "load", forbidden)
    with pytest.raises(PosteriorFileError, match="not valid JSON"):
        load(evil)
    load(small_fit_dir / "posterior.nc")  # a good one loads with pickle forbidden
    assert not canary.exists()


HOSTILE = "x; touch {canary} && $(touch {canary}) `touch {canary}`"


def test_plan_toml_and_candidates_cannot_start_a_shell_or_write_elsewhere(tmp_path, monkeypatch, capsys):
    from bayes_energy.runner.plan import PlanError, load_plan
    from bayes_energy.runner.sweep import Node, worker_command

    canary = tmp_path / "PWNED"
    bad = HOSTILE.format(canary=canary)
    plan = tmp_path / "p.toml"
    plan.write_text(f'[sweep]\nname = "{bad}"\n[[grid]]\nnum_layers = 1\nhidden_size = 32\nheads = 2\nff = 64\n'
                    f'seq_len = 8\nbatch_size = 2\nstrategy = "single"\nn_gpus = 1\nfamily = "{bad}"\n')
    try:
        configs = load_plan(plan).configs
    except PlanError:
        configs = []
    popen = []
    monkeypatch.setattr(subprocess, "Popen", lambda *a, **kw: popen.append((a, kw)) or pytest.fail("no launch in a test"))
    for cfg in configs:  # if the plan is accepted, the hostile text is one argv element, never a shell line
        argv = worker_command(cfg, tmp_path / "r.json", Node(device="cpu", meter="estimate", tdp_w=20.0), "per-rank")
        assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
        assert not any(a in ("sh", "bash", "-c") for a in argv)
    # candidates with hostile text and paths: refused or predicted, written only to --out
    cands = _candidates(tmp_path / "c.csv", hardware=bad, family="../../etc/passwd")
    out = tmp_path / "o" / "p.csv"
    assert predict_main("--posterior", tmp_path / "x.nc", "--configs", cands, "--out", out) == 2
    capsys.readouterr()
    assert not canary.exists() and not popen
    src = (ROOT / "bayes_energy" / "runner" / "sweep.py").read_text() + (ROOT / "bayes_energy" / "runner" / "worker.py").read_text()
    assert "shell=True" not in src and "os.system" not in src
