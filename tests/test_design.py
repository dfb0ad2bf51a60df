"""Sweep design: which run to measure next (bayes_energy.design) and the compile-once refit API."""

from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pandas as pd
import pytest

from bayes_energy.design import greedy_select, next_runs, plan_toml
from bayes_energy.predict import NewLevelWarning
from bayes_energy.runner.plan import load_plan
from bayes_energy.schema import SchemaError

A100 = "NVIDIA A100-SXM4-40GB"
TI = "NVIDIA GeForce RTX 2080 Ti"


@pytest.fixture(scope="module")
def case(small_fit):
    """A target no measurement informs (BERT on the A100) and a pool holding that very run."""
    idata, table = small_fit
    bert = table[(table["hardware"] == TI) & (table["family"] == "bert")].reset_index(drop=True)
    gpt = table[(table["hardware"] == A100)].reset_index(drop=True)
    target = bert.iloc[[3]].assign(hardware=A100)
    pool = pd.concat([bert.iloc[:15], gpt.iloc[:15], target], ignore_index=True)
    return idata, target, pool, len(pool) - 1


def _design(idata, targets, pool, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NewLevelWarning)
        return next_runs(idata, targets, pool, **kw)


def test_the_run_identical_to_the_target_is_picked_first(case):
    idata, target, pool, same = case
    d = _design(idata, target, pool, k=4, cost="none")
    assert d.runs["pool_row"].iloc[0] == same
    assert list(d.runs["rank"]) == [1, 2, 3, 4]
    assert d.runs["pool_row"].is_unique
    # measuring the target's own configuration removes most of its model uncertainty
    assert d.targets["sd_log_energy_after"].iloc[0] < 0.7 * d.targets["sd_log_energy_now"].iloc[0]


def test_reductions_are_nonnegative_and_the_targets_variance_only_falls(case):
    idata, target, pool, _ = case
    d = _design(idata, target, pool, k=6, cost="none")
    red = d.runs["expected_var_reduction"].to_numpy()
    after = d.runs["targets_var_after"].to_numpy()
    assert (red >= 0).all()
    assert red[0] == red.max()  # with equal costs the first pick is the most informative
    assert (np.diff(after) <= 1e-12).all()
    np.testing.assert_allclose(after[0] + red[0], after[1] + red[0] + red[1], rtol=1e-9)
    assert (d.targets["sd_log_time_after"] <= d.targets["sd_log_time_now"] + 1e-12).all()


def test_k_ordering_is_greedy_so_a_smaller_k_is_a_prefix(case):
    idata, target, pool, _ = case
    d5 = _design(idata, target, pool, k=5, cost="energy")
    d2 = _design(idata, target, pool, k=2, cost="energy")
    assert list(d2.runs["pool_row"]) == list(d5.runs["pool_row"][:2])
    assert (d5.runs["cost_unit"] == "J").all()
    ratio = d5.runs["reduction_per_cost"]
    np.testing.assert_allclose(ratio, d5.runs["expected_var_reduction"] / d5.runs["cost"])


def test_cost_steers_the_choice(case):
    idata, target, pool, same = case
    cost = np.ones(len(pool))
    cost[same] = 1e9  # the informative run is priced out
    d = _design(idata, target, pool, k=2, cost=cost)
    assert same not in set(d.runs["pool_row"])


def test_low_rank_greedy_matches_dense_conditioning():
    rng = np.random.default_rng(0)
    D, m, P = 60, 3, 12
    base = rng.standard_normal((m + 2 * P, 8)) @ rng.standard_normal((8, D))
    L = (base - base.mean(1, keepdims=True)) / np.sqrt(D - 1)
    Lt, LpE, LpT = L[:m], L[m:m + P], L[m + P:]
    N = np.zeros((P, 2, 2))
    N[:, 0, 0], N[:, 1, 1], N[:, 0, 1] = 0.3, 0.2, 0.05
    N[:, 1, 0] = N[:, 0, 1]
    picks, red, after, tv = greedy_select(Lt, LpE, LpT, N, np.ones(P), 4)
    # dense reference: full covariance, exact Gaussian conditioning on each pick
    S = L @ L.T
    chosen = []
    for j, r in zip(picks, red):
        J = [m + j, m + P + j]
        scores = []
        for c in range(P):
            Jc = [m + c, m + P + c]
            G = S[np.ix_(Jc, Jc)] + N[c]
            B = S[:m][:, Jc]
            scores.append(-np.inf if c in chosen else np.trace(B @ np.linalg.solve(G, B.T)))
        assert int(np.argmax(scores)) == j
        np.testing.assert_allclose(scores[j], r, rtol=1e-8)
        G = S[np.ix_(J, J)] + N[j]
        S = S - S[:, J] @ np.linalg.solve(G, S[J, :])
        chosen.append(j)
    np.testing.assert_allclose(np.diag(S)[:m], tv, rtol=1e-8, atol=1e-12)


def test_bad_inputs_give_clear_errors(case):
    idata, target, pool, _ = case
    with pytest.raises(SchemaError, match="pool: no rows"):
        next_runs(idata, target, pool.iloc[:0], k=1)
    with pytest.raises(SchemaError, match=r"'H100'.*A100-SXM4-40GB.*2080 Ti"):
        next_runs(idata, target.assign(hardware="H100"), pool, k=1)
    with pytest.raises(SchemaError, match="pool: row 4, column 'hardware'"):
        next_runs(idata, target, pool.assign(hardware=[TI, TI, "TPU v5"] + [TI] * (len(pool) - 3)), k=1)
    with pytest.raises(ValueError, match=f"larger than the pool \\({len(pool)} runs\\)"):
        next_runs(idata, target, pool, k=len(pool) + 1)
    for k in (0, -1, 1.5):
        with pytest.raises(ValueError, match="k must be"):
            next_runs(idata, target, pool, k=k)
    with pytest.raises(SchemaError, match="targets: missing column"):
        next_runs(idata, target.drop(columns="n_gpus"), pool, k=1)
    with pytest.raises(ValueError, match="cost must be"):
        next_runs(idata, target, pool, k=1, cost="carbon")


def test_short_hardware_names_resolve(case):
    idata, target, pool, same = case
    d = _design(idata, target.assign(hardware="A100"), pool.assign(hardware=pool["hardware"].str.replace(TI, "2080 Ti")),
                k=1, cost="none")
    assert d.runs["pool_row"].iloc[0] == same and d.runs["hardware"].iloc[0] == A100


def test_the_plan_it_writes_loads_and_skips_what_the_runner_cannot_build(case, tmp_path):
    idata, target, pool, _ = case
    d = _design(idata, target, pool, k=8, cost="none")
    text = d.plan_toml(name="next")
    path = tmp_path / "next.toml"
    path.write_text(text)
    plan = load_plan(path)
    # one config per runner configuration: picks that differ only in hardware are one run in a plan
    runnable = d.runs[d.runs["family"] == "bert"].drop_duplicates(
        ["num_layers", "hidden_size", "heads", "ff", "seq_len", "batch_size", "grad_accum", "strategy", "n_gpus"])
    assert 0 < len(plan.configs) <= len(runnable)  # the plan also merges picks the runner builds alike
    first = runnable.iloc[0]
    cfg = plan.configs[0]
    assert (cfg.num_layers, cfg.hidden_size, cfg.heads, cfg.strategy, cfg.n_gpus) == (
        first["num_layers"], first["hidden_size"], first["heads"], first["strategy"], first["n_gpus"])
    if (d.runs["family"] == "gpt").any():
        assert "not runnable by this runner" in text
    with pytest.raises(ValueError, match="BERT-family"):
        plan_toml(d.runs.assign(family="gpt"))
    with pytest.raises(ValueError, match="heads"):
        plan_toml(d.runs.drop(columns="heads"))


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "bayes_energy.design", *args], capture_output=True, text=True, cwd=cwd)


@pytest.mark.slow
def test_cli_writes_picks_and_plan_and_refuses_bad_input(small_fit_dir, case, tmp_path):
    _, target, pool, same = case
    target.to_csv(tmp_path / "t.csv", index=False)
    pool.to_csv(tmp_path / "p.csv", index=False)
    post = str(small_fit_dir / "posterior.nc")
    base = ["--posterior", post, "--targets", str(tmp_path / "t.csv"), "--pool", str(tmp_path / "p.csv")]
    r = _cli(*base, "--k", "3", "--cost", "none", "--out", str(tmp_path / "next.csv"))
    assert r.returncode == 0, r.stderr
    picks = pd.read_csv(tmp_path / "next.csv")
    assert len(picks) == 3 and picks["pool_row"].iloc[0] == same
    assert load_plan(tmp_path / "next.toml").configs
    again = _cli(*base, "--k", "3", "--out", str(tmp_path / "next.csv"))
    assert again.returncode == 2 and "--overwrite" in again.stderr
    pd.DataFrame(columns=pool.columns).to_csv(tmp_path / "empty.csv", index=False)
    target.assign(hardware="H100").to_csv(tmp_path / "bad.csv", index=False)
    for args in (["--pool", str(tmp_path / "empty.csv")], ["--targets", str(tmp_path / "bad.csv")],
                 ["--k", "99"], ["--k", "0"]):
        argv = list(base)
        if args[0] in argv:
            argv[argv.index(args[0]) + 1] = args[1]
            args = []
        r = _cli(*argv, *args, "--out", str(tmp_path / "x.csv"))
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("error: ") and r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
        assert not (tmp_path / "x.csv").exists()


def test_refit_refuses_levels_the_model_was_not_compiled_for():
    from bayes_energy.models.refit import CompiledModel, refit
    from bayes_energy.simulate import tiny_sweep

    table = tiny_sweep()
    levels = {"hardware": ["sim-gpu-a"], "family": sorted(table["family"].unique()),
              "cell": [f"sim-gpu-a|{f}" for f in sorted(table["family"].unique())],
              "strategy": sorted(table["strategy"].unique()), "group": []}
    fake = CompiledModel(name="pooled", config={}, levels=levels, compiled=None, compile_s=0.0)
    with pytest.raises(ValueError, match="hardware level.*sim-gpu-b.*compile on a table that holds them"):
        refit(fake, table)
    with pytest.raises(ValueError, match="no rows"):
        refit(fake, table.iloc[:0])


@pytest.mark.slow
def test_compile_once_refit_many():
    from bayes_energy.models.io import load_spec, training_table
    from bayes_energy.models.refit import compile_model, refit
    from bayes_energy.models.sample import table_hash
    from bayes_energy.predict import predict
    from bayes_energy.simulate import tiny_sweep

    full = tiny_sweep(seed=0)
    compiled = compile_model("pooled", full)
    sub = full[full["hardware"] == full["hardware"].iloc[0]].reset_index(drop=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = refit(compiled, full, seed=1, draws=30, tune=30, chains=1)
        b = refit(compiled, sub, seed=1, draws=30, tune=30, chains=1)
    assert a.posterior.attrs["training_table_sha256"] == table_hash(full)
    assert b.posterior.attrs["training_table_sha256"] == table_hash(sub)
    assert len(training_table(b)) == len(sub)
    assert load_spec(b).config["levels"]["hardware"] == load_spec(a).config["levels"]["hardware"]
    pred = predict(b, sub, seed=0)
    assert np.isfinite(pred["energy_j_median"]).all()
