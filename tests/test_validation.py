"""Smoke tests of the validation harness and the SBC script (real sampling, small).

The harness runs with ``--quick --splits 1`` (one split per setting, 2 chains
x 150 + 150 draws) and the SBC with ``--quick`` (5 replications): they check
that the tables have the expected shape and sane values, not exact numbers.
The reference dataset is read from outside the repository; without it these
tests skip locally and fail when ``CI=true`` (see ``tests/_data.py``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests._data import mayaki_path

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str, timeout: int = 400) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.slow
def test_harness_quick_table(tmp_path):
    data = mayaki_path()
    _run("validate_mayaki2026.py", "--quick", "--splits", "1", "--seed", "7", "--out", str(tmp_path),
         "--data", str(data))
    summary = pd.read_csv(tmp_path / "mayaki2026_seed7_quick.csv")
    rows = pd.read_csv(tmp_path / "mayaki2026_seed7_quick_splits.csv")
    assert (tmp_path / "mayaki2026_seed7_quick.md").read_text().count("\n| ") >= 20
    assert (tmp_path / "mayaki2026_seed7_quick_coverage.png").stat().st_size > 10_000  # coverage against level
    models = {"ols_post", "ols_pre", "gb_pre", "gb_post", "pooled_post", "pooled_pre",
              "hierarchical_post", "hierarchical_pre"}
    for setting in ("bert", "gpt", "pooled"):
        assert set(summary.loc[summary["setting"] == setting, "model"]) == models
    for setting in ("new_hw", "new_cell"):  # leave-one-hardware / leave-one-cell out
        assert {"ols_post", "hierarchical_pre"} <= set(summary.loc[summary["setting"] == setting, "model"])
    for col in ("r2", "r2_q25", "r2_q75", "rmse", "slope", "cov50", "cov80", "cov90", "cov95", "hw90", "hw95", "mlpd",
                "divergences", "max_rhat"):
        assert col in summary.columns
    grouped = summary[summary["setting"].isin(["bert", "gpt", "pooled"])]
    assert (grouped["r2"] > 0.7).all() and (grouped["r2"] <= 1).all()
    assert (grouped["rmse"] > 0).all() and (grouped["rmse"] < 0.6).all()
    assert grouped["slope"].between(0.7, 1.3).all()
    for c in ("cov50", "cov80", "cov90", "cov95"):
        assert summary[c].between(0, 1).all()
    assert (grouped["cov50"] <= grouped["cov95"] + 1e-9).all()
    # nested central intervals: coverage grows with the level, and so does the width
    assert (summary["cov80"] <= summary["cov90"] + 1e-9).all() and (summary["cov90"] <= summary["cov95"] + 1e-9).all()
    assert (summary["hw90"] <= summary["hw95"]).all()  # equal for a conformal quantile of few calibration rows
    assert (grouped["cov95"] > 0.75).all()
    assert (summary["hw95"] > 1).all()
    bayes = summary[summary["model"].str.startswith(("pooled", "hierarchical"))]
    assert np.isfinite(bayes["mlpd"]).all() and (bayes["max_rhat"] < 1.5).all()
    # the run time, predicted beside the energy: by the Bayesian models and gradient boosting, not by the
    # paper's energy law; in distribution the hierarchical model's ln s is nearly as good as its ln kWh
    timed = summary["model"].str.startswith(("pooled", "hierarchical", "gb"))
    assert summary.loc[timed, ["t_r2", "t_rmse", "t_cov90", "t_hw90"]].notna().all().all()
    assert summary.loc[~timed, "t_r2"].isna().all()
    assert summary.loc[timed, "t_cov90"].between(0, 1).all() and (summary.loc[timed, "t_hw90"] > 1).all()
    hier = grouped[grouped["model"].str.startswith("hierarchical")]
    assert (hier["t_r2"] > 0.9).all() and (hier["t_rmse"] < 0.2).all()
    fits = rows[rows["model"].str.endswith("_pre") & rows["max_rhat"].notna()]
    assert fits["minor_mode_chains"].between(0, 1).all()  # of two chains, at most one below the other
    assert "Bayesian split fits above R-hat 1.01: " in (tmp_path / "mayaki2026_seed7_quick.md").read_text()
    assert rows.loc[rows["setting"] != "new_hw", "split"].nunique() == 1 and (rows["n_test"] > 0).all()
    # one cell of the table has its hardware and its family in other cells: RTX 2080 Ti x GPT
    assert rows.loc[rows["setting"] == "new_cell", "n_test"].nunique() == 1


@pytest.mark.slow
def test_sbc_smoke(tmp_path):
    _run("sbc.py", "--quick", "--chains", "1", "--out", str(tmp_path))  # one chain: ranks need no more
    summary = pd.read_csv(tmp_path / "sbc_summary.csv")
    ranks = pd.read_csv(tmp_path / "sbc_ranks.csv")
    assert (tmp_path / "sbc_ranks.png").stat().st_size > 1000
    assert len(summary) >= 15 and (summary["reps"] == 5).all()
    assert ranks["rank"].between(0, ranks["n_draws"]).all()
    assert summary["p_value"].between(0, 1).all()
    # a broken simulator or model would push truths into the tails for nearly every parameter
    assert summary["mean_rank_frac"].between(0.02, 0.98).mean() > 0.8


def _harness():
    """The harness module (a script under benchmarks/, not part of the package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("validate_mayaki2026", ROOT / "benchmarks" / "validate_mayaki2026.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_harness_goes_on_after_an_interruption(tmp_path):
    """A run killed after its first split keeps that split; the same command finishes the rest and equals a whole run."""
    V = _harness()
    kw = {"seed": 3, "n_splits": 3, "models": ("ols_pre", "gb_pre"), "settings": ("bert",), "data": str(mayaki_path())}

    def stop_after_first(msg):
        if msg.startswith("bert split 1/"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        V.run(out=tmp_path / "cut", log=stop_after_first, **kw)
    partial = tmp_path / "cut" / "mayaki2026_seed3_splits.partial.csv"
    assert set(pd.read_csv(partial)["split"]) == {0}

    logged = []
    V.run(out=tmp_path / "cut", log=logged.append, **kw)
    assert any(m.startswith("going on from") for m in logged)
    assert not any(m.startswith("bert split 1/") for m in logged)  # the finished split is not fitted again
    assert not partial.exists() and not partial.with_suffix(".json").exists()

    V.run(out=tmp_path / "whole", log=lambda m: None, **kw)
    cut = pd.read_csv(tmp_path / "cut" / "mayaki2026_seed3_splits.csv")
    whole = pd.read_csv(tmp_path / "whole" / "mayaki2026_seed3_splits.csv")
    pd.testing.assert_frame_equal(cut, whole)
    assert "(resumed)" in (tmp_path / "cut" / "mayaki2026_seed3.md").read_text()


def test_harness_refuses_to_mix_runs(tmp_path):
    """Partial rows of a run with other arguments are not merged into this one; --fresh starts over."""
    V = _harness()
    kw = {"n_splits": 2, "models": ("ols_pre",), "settings": ("bert",), "data": str(mayaki_path()), "out": tmp_path}

    def stop(msg):
        if msg.startswith("bert split 1/"):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        V.run(seed=3, log=stop, **kw)
    partial = tmp_path / "mayaki2026_seed3_splits.partial.csv"
    # the same file names (same seed and tag), other models
    with pytest.raises(SystemExit, match=r"mayaki2026_seed3_splits\.partial\.csv.*models"):
        V.run(seed=3, **(kw | {"models": ("ols_pre", "ols_post")}), log=lambda m: None)
    assert partial.exists()  # refused, nothing lost
    logged = []
    V.run(seed=3, **(kw | {"models": ("ols_pre", "ols_post")}), fresh=True, log=logged.append)
    assert any(m.startswith("--fresh") for m in logged) and not partial.exists()
    assert set(pd.read_csv(tmp_path / "mayaki2026_seed3.csv")["model"]) == {"ols_pre", "ols_post"}


def test_harness_refuses_unknown_names(tmp_path):
    """A misspelt model or setting stops the run with the close matches, instead of being left out of the table."""
    V = _harness()
    with pytest.raises(SystemExit, match=r"unknown model 'hierarchcal'; did you mean hierarchical"):
        V.run(models=("ols_pre", "hierarchcal"), settings=("bert",), out=tmp_path, log=lambda m: None)
    with pytest.raises(SystemExit, match=r"unknown setting 'poolde'; did you mean pooled"):
        V.run(models=("ols_pre",), settings=("poolde",), out=tmp_path, log=lambda m: None)
    assert not list(tmp_path.iterdir())  # refused before anything was written
