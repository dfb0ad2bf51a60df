"""bayes_energy.plan: candidates, Pareto set, recommendation, and the CLI."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from bayes_energy.plan import (PLACED_BY_SPECS, Workload, candidates, evaluate, pareto_front, plan, resolve_hardware)

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]
BERT_LARGE = Workload.from_architecture("bert-large", seq_len=128, batch_size=8, tokens=8e6)


def _cands(*rows):
    return pd.DataFrame([{"hardware": h, "strategy": s, "n_gpus": n} for h, s, n in rows])


def _draws(means_e, means_t, sd=0.05, S=4000, seed=0):
    rng = np.random.default_rng(seed)
    e = np.exp(np.log(means_e) + sd * rng.standard_normal((S, len(means_e))))
    t = np.exp(np.log(means_t) + sd * rng.standard_normal((S, len(means_t))))
    return e, t


def test_pareto_front_keeps_only_undominated_points():
    t = np.array([1.0, 2.0, 3.0, 2.0, 1.0])
    e = np.array([5.0, 2.0, 1.0, 3.0, 5.0])
    # (2, 3) is beaten by (2, 2); the two (1, 5) tie and stay
    assert pareto_front(t, e).tolist() == [True, True, True, False, True]
    # batched over draws
    assert pareto_front(np.stack([t, t]), np.stack([e, e])).shape == (2, 5)


def test_candidates_cross_strategies_with_device_counts():
    c = candidates(BERT_LARGE, ["single", "fsdp", "tp"], [1, 2, 4], ["A", "B"])
    assert len(c) == 2 * (1 + 2 + 2)
    assert set(c.loc[c["strategy"] == "single", "n_gpus"]) == {1}
    assert set(c.loc[c["strategy"] == "fsdp", "n_gpus"]) == {2, 4}
    assert (c["num_layers"] == 24).all() and (c["family"] == "bert").all()
    c1 = candidates(BERT_LARGE, ["ddp"], [1, 2], ["A"], parallel_on_one=True)
    assert c1["n_gpus"].tolist() == [1, 2]
    with pytest.raises(ValueError, match="unknown strategy zero3"):
        candidates(BERT_LARGE, ["zero3"], [1], ["A"])
    with pytest.raises(ValueError, match="no candidates"):
        candidates(BERT_LARGE, ["single"], [2], ["A"])


def test_resolve_hardware_by_unique_substring():
    known = ["NVIDIA A100-SXM4-40GB", "NVIDIA GeForce RTX 2080 Ti"]
    assert resolve_hardware(["a100", "2080"], known) == known
    with pytest.raises(ValueError, match="not in the fit.*--allow-unknown-hardware"):
        resolve_hardware(["NVIDIA H100"], known)
    assert resolve_hardware(["NVIDIA H100"], known, allow_unknown=True) == ["NVIDIA H100"]  # asked for: passes through
    with pytest.raises(ValueError, match="ambiguous"):
        resolve_hardware(["NVIDIA"], known)


def test_recommendation_is_lowest_expected_energy_meeting_the_deadline():
    # single: slow and frugal; fsdp x2: medium; fsdp x4: fast and costly
    c = _cands(("A", "single", 1), ("A", "fsdp", 2), ("A", "fsdp", 4))
    e, t = _draws([100.0, 120.0, 200.0], [1000.0, 600.0, 400.0])
    p = evaluate(c, e, t, deadline_s=700, p=0.9, energy_budget_j=150)
    tab = p.table
    assert tab["p_deadline"].round(2).tolist() == [0.0, 1.0, 1.0]
    assert p.recommended == 1 and tab["recommended"].tolist() == [False, True, False]
    assert p.recommendation["strategy"] == "fsdp" and p.recommendation["n_gpus"] == 2
    assert tab["pareto"].all()  # each is faster or greener than the others
    assert tab["p_budget"].round(2).tolist() == [1.0, 1.0, 0.0]
    # more devices cost more energy here, and the plan says so from the joint draws
    assert tab.loc[2, "p_energy_below_single"] < 0.01 and np.isnan(tab.loc[0, "p_energy_below_single"])
    assert tab["power_w_median"].is_monotonic_increasing  # faster draws more power
    # without a deadline the greenest wins
    assert evaluate(c, e, t).recommended == 0
    text = p.to_text()
    assert "recommended" in text and "Pareto set" in text and "fsdp" in text


def test_no_feasible_candidate_is_reported_not_guessed():
    c = _cands(("A", "single", 1), ("A", "fsdp", 2))
    e, t = _draws([100.0, 120.0], [1000.0, 800.0])
    p = evaluate(c, e, t, deadline_s=100, p=0.9)
    assert p.recommended is None and p.recommendation is None
    assert not p.table["recommended"].any()
    assert any("no candidate meets the deadline" in n for n in p.notes)
    assert "recommended: none" in p.to_text()


def test_dominated_candidate_is_off_the_front():
    c = _cands(("A", "single", 1), ("A", "tp", 2))
    e, t = _draws([100.0, 300.0], [500.0, 900.0])  # tp: slower and costlier
    p = evaluate(c, e, t, deadline_s=2000)
    assert p.table["pareto"].tolist() == [True, False]
    assert p.table.loc[1, "p_pareto"] < 0.01 and p.table.loc[0, "p_pareto"] > 0.99
    assert p.pareto["strategy"].tolist() == ["single"]


def test_rank_by_mean_and_heavy_tails():
    c = _cands(("A", "single", 1), ("A", "fsdp", 2))
    e, t = _draws([100.0, 90.0], [1000.0, 600.0])
    e[0, 1] = np.inf  # one far tail draw (exp overflow) wrecks the mean, not the median
    t[1, 0] = np.inf
    p = evaluate(c, e, t, deadline_s=1200)
    assert p.rank_by == "median" and p.recommended == 1
    assert np.isfinite(p.table["energy_j_median"]).all() and p.table.loc[0, "p_deadline"] > 0.99
    mean = evaluate(c, e, t, deadline_s=1200, rank_by="mean")
    assert mean.recommended == 0 and np.isinf(mean.table.loc[1, "energy_j_mean"])
    assert "lowest expected energy" in mean.verdict() and "lowest median energy" in p.verdict()
    with pytest.raises(ValueError, match="rank_by"):
        evaluate(c, e, t, rank_by="mode")


def test_evaluate_checks_its_inputs():
    c = _cands(("A", "single", 1))
    e, t = _draws([1.0], [1.0])
    with pytest.raises(ValueError, match="p must lie"):
        evaluate(c, e, t, p=1.5)
    with pytest.raises(ValueError, match="draws must be"):
        evaluate(c, e[:, :0], t[:, :0])


# --------------------------------------------------------------------------- with a posterior
@pytest.mark.slow
def test_plan_on_the_reference_fit(small_fit):
    idata, _ = small_fit
    with pytest.warns(UserWarning, match="not in the training data"):  # BERT was never run on the A100
        p = plan(idata, BERT_LARGE, n_gpus=range(1, 9), deadline_s=900, p=0.8, energy_budget_j=2e5, seed=3)
    tab = p.table
    assert len(tab) == 2 * (1 + 2 * 7)  # two hardware, single + fsdp/tp on 2..8
    for col in ("p_deadline", "p_budget", "p_pareto"):
        assert tab[col].between(0, 1).all()
    assert (tab["energy_j_lo"] < tab["energy_j_median"]).all() and (tab["time_s_median"] < tab["time_s_hi"]).all()
    kind = tab["evidence"].str.split(";").str[0]
    # BERT on the A100 is placed by the GPUs' specifications from BERT on the 2080 Ti
    assert set(kind) >= {"measured", "new device count", PLACED_BY_SPECS}
    # batch 8 and 5e8 parameters lie outside what the 2080 Ti x BERT cell measured: the plan says so
    known = tab[~kind.str.startswith("new hardware/family")]
    assert known["evidence"].str.contains("beyond data: params 5.03e+08 > ", regex=False).all()
    assert known["evidence"].str.contains("batch 8 < 16", regex=False).all()
    if p.recommended is not None:
        rec = p.recommendation
        assert rec["p_deadline"] >= 0.8
        feasible = tab[tab["p_deadline"] >= 0.8]
        assert rec["energy_j_median"] == feasible["energy_j_median"].min()
    assert tab["pareto"].any()
    # probabilities come from the draws returned with the plan
    np.testing.assert_allclose(tab["p_deadline"], (p.draws["time_s"] <= 900).mean(axis=0))


@pytest.mark.slow
def test_plan_cli(small_fit_dir, tmp_path, isolated_env):
    out = tmp_path / "plan.csv"
    r = subprocess.run([sys.executable, "-m", "bayes_energy.plan", "--posterior", str(small_fit_dir / "posterior.nc"),
                        "--arch", "bert-large", "--seq-len", "128", "--batch-size", "8", "--tokens", "8e6",
                        "--hardware", "2080", "--n-gpus", "1", "2", "4", "8", "--deadline-s", "900",
                        "--energy-budget-kwh", "0.05", "--seed", "1", "--out", str(out)],
                       cwd=ROOT, env=isolated_env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Pareto set" in r.stdout and "recommended" in r.stdout
    tab = pd.read_csv(out)
    assert len(tab) == 1 + 3 + 3 and set(tab["hardware"]) == {"NVIDIA GeForce RTX 2080 Ti"}
    assert {"p_deadline", "p_budget", "pareto", "recommended", "time_s_lo", "energy_j_hi"} <= set(tab.columns)
    bad = subprocess.run([sys.executable, "-m", "bayes_energy.plan", "--posterior", str(small_fit_dir / "posterior.nc"),
                          "--seq-len", "128", "--batch-size", "8", "--tokens", "8e6"],
                         cwd=ROOT, env=isolated_env, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "--arch or --family" in bad.stderr and "Traceback" not in bad.stderr
