"""bayes_energy.predict: candidate checks, summaries, intervals that widen off the data, the CLI."""

import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayes_energy.predict import NewLevelWarning, check_candidates, predict, predict_draws, summarize_draws
from bayes_energy.schema import SchemaError

ROOT = Path(__file__).resolve().parents[1]


def _candidate(**kw):
    base = {"hardware": "X", "family": "bert", "num_layers": 2, "hidden_size": 64, "ff": 256, "seq_len": 32,
            "batch_size": 4, "tokens": 1e4, "strategy": "single", "n_gpus": 1}
    return pd.DataFrame([base | kw])


def test_check_candidates_names_the_bad_cell():
    with pytest.raises(SchemaError, match="missing column.*tokens"):
        check_candidates(_candidate().drop(columns="tokens"))
    with pytest.raises(SchemaError, match="row 2, column 'n_gpus'"):
        check_candidates(_candidate(n_gpus=0))
    with pytest.raises(SchemaError, match="column 'strategy'.*'zero3'"):
        check_candidates(_candidate(strategy="zero3"))
    with pytest.raises(SchemaError, match="no candidate rows"):
        check_candidates(_candidate().iloc[:0])
    ok = check_candidates(_candidate(energy_j=5.0, strategy="FSDP"))
    assert "energy_j" not in ok.columns and ok["strategy"].iloc[0] == "fsdp" and ok["grad_accum"].iloc[0] == 1


def test_summarize_draws_log_and_linear_agree():
    rng = np.random.default_rng(0)
    logs = rng.normal(3.0, 0.5, size=(2001, 3))
    a = summarize_draws(np.exp(logs), 0.9, "x")
    b = summarize_draws(logs, 0.9, "x", log=True)
    np.testing.assert_allclose(a.to_numpy(), b.to_numpy(), rtol=1e-12)
    assert (a["x_lo"] < a["x_median"]).all() and (a["x_median"] < a["x_hi"]).all()


# --------------------------------------------------------------------------- with a posterior
def _measured_family(table):
    """A configuration family measured with FSDP on 2 and 4 devices (never on 8)."""
    fsdp = table[table["strategy"] == "fsdp"]
    counts = fsdp.groupby("group")["n_gpus"].agg(lambda s: set(s.astype(int)))
    group = next(g for g, c in counts.items() if {2, 4} <= c and 8 not in c)
    return table[table["group"] == group]


def _width(draws):
    lo, hi = np.quantile(draws, [0.05, 0.95], axis=0)
    return hi - lo


@pytest.mark.slow
def test_unseen_device_count_has_wider_intervals_than_measured_ones(small_fit):
    """8 devices were never measured for this workload (nor anywhere in the cell): its intervals are wider."""
    idata, table = small_fit
    fam = _measured_family(table)
    cell = fam[["hardware", "family"]].iloc[0]
    measured = set(table.loc[(table["hardware"] == cell["hardware"]) & (table["family"] == cell["family"])
                             & (table["strategy"] == "fsdp"), "n_gpus"])
    assert 8 not in measured
    base = fam.iloc[[0]].drop(columns=["strategy", "n_gpus", "time_s", "energy_j", "speedup", "efficiency"])
    cands = pd.concat([base.assign(strategy="fsdp", n_gpus=n) for n in (2, 4, 8)], ignore_index=True)

    # the model's uncertainty about the expected energy and time: clearly wider off the data
    mean = predict_draws(idata, cands, seed=0, residual=False)
    for key in ("log_energy_j", "log_time_s"):
        w2, w4, w8 = _width(mean[key])
        assert w8 > 1.25 * w2 and w8 > w4, (key, w2, w4, w8)

    # the predictive intervals (noise included) are wider too; 40 copies of each candidate pool
    # the residual noise over 40 x the posterior draws so that the quantiles are steady
    copies = 40
    rep = pd.concat([cands] * copies, ignore_index=True)
    pred = predict_draws(idata, rep, seed=0)
    for key in ("log_energy_j", "log_time_s"):
        pooled = pred[key].reshape(-1, copies, len(cands)).reshape(-1, len(cands))
        w2, w4, w8 = _width(pooled)
        assert w8 > w2, (key, w2, w4, w8)


@pytest.mark.slow
def test_predict_covers_measured_runs(small_fit):
    idata, table = small_fit
    runs = table.sample(60, random_state=3)
    pred = predict(idata, runs, prob=0.9, seed=1)
    assert len(pred) == len(runs)
    for col in ("energy_j", "energy_kwh", "time_s"):
        assert (pred[f"{col}_lo"] < pred[f"{col}_median"]).all() and (pred[f"{col}_median"] < pred[f"{col}_hi"]).all()
    inside = (runs["energy_j"].to_numpy() >= pred["energy_j_lo"]) & (runs["energy_j"].to_numpy() <= pred["energy_j_hi"])
    assert inside.mean() >= 0.7


@pytest.mark.slow
def test_new_hardware_is_predicted_with_a_warning_and_wider_intervals(small_fit):
    idata, table = small_fit
    fam = _measured_family(table)
    run = fam[fam["strategy"] == "single"].iloc[[0]]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        known = predict(idata, run, seed=1)
    assert not [w for w in caught if issubclass(w.category, NewLevelWarning)]
    with pytest.warns(NewLevelWarning, match="not in the training data"):
        new = predict(idata, run.assign(hardware="NVIDIA H100 80GB HBM3"), seed=1)
    ratio = lambda p: float(p["energy_j_hi"].iloc[0] / p["energy_j_lo"].iloc[0])  # noqa: E731
    assert ratio(new) > ratio(known)


@pytest.mark.slow
def test_predict_cli(small_fit, small_fit_dir, tmp_path, isolated_env):
    _, table = small_fit
    configs = tmp_path / "candidates.csv"
    table.head(5).to_csv(configs, index=False)
    out = tmp_path / "pred.csv"
    r = subprocess.run([sys.executable, "-m", "bayes_energy.predict", "--posterior", str(small_fit_dir / "posterior.nc"),
                        "--configs", str(configs), "--out", str(out), "--seed", "0"],
                       cwd=ROOT, env=isolated_env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    pred = pd.read_csv(out)
    assert len(pred) == 5 and {"energy_j_lo", "energy_kwh_median", "time_s_hi", "prob"} <= set(pred.columns)


@pytest.mark.slow
def test_predict_is_reproducible_whatever_the_thread_count(small_fit, monkeypatch):
    """One seed, one answer: chunks have their own random streams; the summaries are those of the draws."""

    idata, table = small_fit
    runs = table.sample(4000, replace=True, random_state=4)  # 3 chunks of 1747 at 300 draws
    monkeypatch.setenv("BAYES_ENERGY_THREADS", "2")
    two, draws = predict(idata, runs, seed=5, return_draws=True)
    monkeypatch.setenv("BAYES_ENERGY_THREADS", "1")
    one = predict(idata, runs, seed=5)
    pd.testing.assert_frame_equal(one, two)
    again = summarize_draws(draws["log_energy_j"], 0.9, "energy_j", log=True)
    np.testing.assert_allclose(again.to_numpy(), two[list(again.columns)].to_numpy(), rtol=1e-6)


def test_crossed_new_cells_borrow_known_hardware_and_family_effects():
    """A100 x BERT (both seen elsewhere) takes their effects; a new GPU is one draw shared by its cells."""
    from bayes_energy.datasets import load_mayaki2026
    from bayes_energy.models import default_config
    from bayes_energy.models.spec import ModelSpec
    from bayes_energy.predict import _new_cell_draws
    from tests._data import mayaki_path

    spec = ModelSpec.from_table(load_mayaki2026(mayaki_path()), "hierarchical", default_config("hierarchical", {"crossed": True}))
    hw, fam = spec.coords["hardware"], spec.coords["family"]
    S = 20_000
    P = {"x": np.zeros((S, len(spec.coords["cell"]), 1)),  # the fitted cells' effects: only their shape is used
         "x_hw": np.broadcast_to(np.arange(len(hw), dtype=float)[None, :, None] + 2.0, (S, len(hw), 1)),
         "x_fam": np.broadcast_to(-np.arange(len(fam), dtype=float)[None, :, None] - 1.0, (S, len(fam), 1))}
    a100 = next(h for h in hw if "A100" in h)
    labels = [f"{a100}|bert", "H100|bert", "H100|gpt"]
    d = _new_cell_draws(P, spec, "x", labels, 0.0, 1.0, np.random.default_rng(0))[..., 0]
    s_hw, _, s_cell = spec.config["priors"]["cell_shares"]
    expected = P["x_hw"][0, hw.index(a100), 0] + P["x_fam"][0, fam.index("bert"), 0]
    assert abs(d[:, 0].mean() - expected) < 0.02 and abs(d[:, 0].std() - np.sqrt(s_cell)) < 0.02
    # the two H100 cells share one hardware draw: correlation s_hw / (s_hw + s_cell)
    r = np.corrcoef(d[:, 1], d[:, 2])[0, 1]
    assert abs(r - s_hw / (s_hw + s_cell)) < 0.03
    assert d[:, 1].std() > d[:, 0].std()  # an unseen GPU is less certain than a seen one


def test_threads_follow_the_variable_and_refuse_a_bad_value(monkeypatch):
    from bayes_energy import threads

    monkeypatch.setenv("BAYES_ENERGY_THREADS", "3")
    assert threads() == 3
    monkeypatch.setenv("BAYES_ENERGY_THREADS", "0")
    assert threads() == 1
    monkeypatch.setenv("BAYES_ENERGY_THREADS", "two")
    with pytest.raises(ValueError, match="BAYES_ENERGY_THREADS must be a whole number.*'two'"):
        threads()
    monkeypatch.delenv("BAYES_ENERGY_THREADS")
    assert threads() >= 1
