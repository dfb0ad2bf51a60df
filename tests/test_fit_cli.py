"""python -m bayes_energy.fit: outputs, exit codes, and the save -> load -> predict round trip."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.test_schema import good_table

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "cpu_sweep.csv"


def run_fit(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "bayes_energy.fit", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_bad_input_exits_2_with_one_line_and_no_output(tmp_path):
    bad = tmp_path / "bad.csv"
    t = good_table()
    t.loc[1, "strategy"] = "zero3"
    t.to_csv(bad, index=False)
    out = tmp_path / "fit"
    r = run_fit("--data", bad, "--out", out, "--model", "ols")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "bad.csv: row 3, column 'strategy'" in lines[0]
    assert not out.exists() and not list(tmp_path.glob(".fit-*"))


def test_missing_file_exits_2(tmp_path):
    r = run_fit("--data", tmp_path / "nope.csv", "--out", tmp_path / "fit")
    assert r.returncode == 2 and "nope.csv: no such file" in r.stderr and "Traceback" not in r.stderr


def test_ols_writes_summary_and_diagnostics(tmp_path):
    out = tmp_path / "ols"
    r = run_fit("--data", DATA, "--out", out, "--model", "ols")
    assert r.returncode == 0, r.stderr
    summary = pd.read_csv(out / "summary.csv", index_col=0)
    assert {"log_compute", "log_memory", "log_eta"} <= set(summary.index)
    assert json.loads((out / "diagnostics.json").read_text())["model"] == "ols"


@pytest.fixture(scope="module")
def strict_fit(tmp_path_factory):
    """One short Bayesian fit of the shipped CPU sweep (too few draws to pass diagnostics)."""
    out = tmp_path_factory.mktemp("fit") / "pooled"
    r = run_fit("--data", DATA, "--out", out, "--model", "pooled", "--chains", 2, "--draws", 100,
                "--tune", 150, "--strict", "--no-report", "--quiet")
    return out, r


@pytest.mark.slow
def test_strict_exits_1_when_diagnostics_fail(strict_fit):
    out, r = strict_fit
    assert r.returncode == 1, r.stderr
    assert "diagnostics FAILED" in r.stdout
    diag = json.loads((out / "diagnostics.json").read_text())
    assert diag["passed"] is False and diag["min_ess_bulk"] < 400
    for key in ("divergences", "max_rhat", "min_ess_bulk", "min_ess_tail", "min_bfmi", "elpd_loo",
                "elpd_loo_se", "max_pareto_k", "n_pareto_k_gt_0_7"):
        assert key in diag
    summary = pd.read_csv(out / "summary.csv", index_col=0)
    assert {"mean", "sd", "ess_bulk", "ess_tail", "r_hat"} <= set(summary.columns)
    assert "E_mu[log_eta]" in summary.index


@pytest.mark.slow
def test_save_load_rebuild_predict_round_trip(strict_fit):
    from bayes_energy.datasets import load_sweep
    from bayes_energy.models.io import load
    from bayes_energy.predict import predict

    out, _ = strict_fit
    idata, spec, model = load(out / "posterior.nc", rebuild=True)
    assert spec.name == "pooled" and idata.posterior.attrs["bayes_energy_version"]
    for group in ("posterior", "log_likelihood", "posterior_predictive", "observed_data", "constant_data"):
        assert group in idata.groups()
    # the rebuilt model evaluates the saved draws to the same log-likelihood
    import pymc as pm

    few = idata.sel(draw=slice(0, 3))
    with model:
        again = pm.compute_log_likelihood(few, var_names=["log_energy"], extend_inferencedata=False, progressbar=False)
    np.testing.assert_allclose(again["log_energy"].to_numpy(), few.log_likelihood["log_energy"].to_numpy(), rtol=1e-8)
    table = load_sweep(DATA)
    pred = predict(idata, table.head(6), prob=0.9, seed=0)
    assert (pred["energy_j_lo"] < pred["energy_j_median"]).all() and (pred["energy_j_median"] < pred["energy_j_hi"]).all()
    # measured energies of these runs mostly fall inside their 90 % predictive intervals
    inside = (table.head(6)["energy_j"] >= pred["energy_j_lo"]) & (table.head(6)["energy_j"] <= pred["energy_j_hi"])
    assert inside.mean() >= 0.5
    np.testing.assert_allclose(pred["energy_kwh_median"] * 3.6e6, pred["energy_j_median"])


def test_load_refuses_other_files(tmp_path):
    from bayes_energy.models.io import PosteriorFileError, load

    junk = tmp_path / "x.nc"
    junk.write_text("not netcdf")
    with pytest.raises(PosteriorFileError):
        load(junk)
