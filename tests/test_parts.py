"""The posterior sampled in two independent parts (bayes_energy.models.parts)."""

from __future__ import annotations

import arviz as az
import numpy as np
import pytest
import xarray as xr

from bayes_energy.models import default_config
from bayes_energy.models.build import PARTS, build_model
from bayes_energy.models.spec import ModelSpec
from bayes_energy.simulate import tiny_sweep


def _unmatched(df):
    """``df`` without its first single-device run: a multi-device run loses its partner, its efficiency unknown."""
    single = df.index[df["strategy"] == "single"][0]
    out = df.drop(index=single).reset_index(drop=True)
    return out.drop(columns=["efficiency", "speedup"])


def test_the_whole_models_log_density_is_the_sum_of_its_parts():
    """The factorisation the parts rest on: the free variables split in two and the log densities add up."""
    df = tiny_sweep(0)
    # time sampled "given energy" too: its coefficient on the energy residual belongs to the outcomes alone
    for name, config in (("pooled", {}), ("hierarchical", {}), ("hierarchical", {"time_coordinates": "given_energy"})):
        spec = ModelSpec.from_table(df, name, default_config(name, config))
        whole = build_model(spec, df)
        parts = {p: build_model(spec, df, part=p) for p in PARTS}
        names = {p: {v.name for v in m.value_vars} for p, m in parts.items()}
        assert names["curves"].isdisjoint(names["outcomes"])
        assert names["curves"] | names["outcomes"] == {v.name for v in whole.value_vars}
        rng = np.random.default_rng(1)
        point = {k: v + rng.normal(0, 0.3, np.shape(v)) for k, v in whole.initial_point().items()}
        logp = {p: m.compile_logp()({k: point[k] for k in names[p]}) for p, m in parts.items()}
        assert whole.compile_logp()(point) == pytest.approx(logp["curves"] + logp["outcomes"], rel=1e-10)


def test_an_unknown_efficiency_couples_the_parts():
    from bayes_energy.models.parts import factorises

    df = tiny_sweep(0)
    spec = ModelSpec.from_table(df, "pooled", default_config("pooled"))
    assert factorises(spec, df)
    bad = _unmatched(df)
    from bayes_energy.datasets import add_efficiency

    bad = add_efficiency(bad)
    assert bad["efficiency"].isna().any()
    spec = ModelSpec.from_table(bad, "pooled", default_config("pooled"))
    assert not factorises(spec, bad)
    with pytest.raises(ValueError, match="every run's efficiency measured"):
        build_model(spec, bad, part="outcomes")
    build_model(spec, bad, part="curves")  # the curves need no energy
    with pytest.raises(ValueError, match="part must be"):
        build_model(spec, bad, part="energy")


def _fake_part(names, chains, draws, seed):
    rng = np.random.default_rng(seed)
    post = {n: rng.normal(size=(chains, draws)) for n in names}
    stats = {"n_steps": rng.integers(1, 30, size=(chains, draws)), "diverging": rng.random((chains, draws)) < 0.2,
             "logp": rng.normal(size=(chains, draws)), "energy": rng.normal(size=(chains, draws))}
    return az.from_dict(posterior=post, sample_stats=stats)


def test_merged_parts_pair_the_draws_and_keep_the_samplers_work():
    from bayes_energy.models.diagnostics import diagnose
    from bayes_energy.models.parts import merge_parts

    curves, outcomes = _fake_part(["a"], 2, 12, 0), _fake_part(["b"], 2, 4, 1)
    m = merge_parts({"curves": curves, "outcomes": outcomes}, {"curves": 3})
    assert m.posterior.sizes == {"chain": 2, "draw": 4}
    np.testing.assert_array_equal(m.posterior["a"].values, curves.posterior["a"].values[:, 2::3])  # every third
    np.testing.assert_array_equal(m.posterior["b"].values, outcomes.posterior["b"].values)
    st, c, o = m.sample_stats, curves.sample_stats, outcomes.sample_stats
    # a kept curve draw stands for the two thinned away before it: their steps and divergences count
    steps = c["n_steps"].values.reshape(2, 4, 3).sum(axis=2) + o["n_steps"].values
    np.testing.assert_array_equal(st["n_steps"].values, steps)
    div_c = c["diverging"].values.reshape(2, 4, 3).any(axis=2)
    np.testing.assert_array_equal(st["diverging"].values, div_c | o["diverging"].values)
    np.testing.assert_array_equal(st["diverging_part"].sel(part="curves").values, div_c)
    assert int(st["diverging"].sum()) <= int(st["diverging_part"].sum())
    # the whole posterior's log density is the sum of the parts' at the paired draws
    np.testing.assert_allclose(st["logp"].values, c["logp"].values[:, 2::3] + o["logp"].values)
    # one E-BFMI per part and chain: the smaller is what the diagnostics report
    bfmi = [az.bfmi(st["energy"].sel(part=p).transpose("chain", "draw").values) for p in ("curves", "outcomes")]
    assert diagnose(m)["min_bfmi"] == pytest.approx(float(np.min(bfmi)))
    xr.testing.assert_equal(m.sample_stats["part"], xr.DataArray(["curves", "outcomes"], dims="part",
                                                                 coords={"part": ["curves", "outcomes"]}))


def test_a_fit_is_sampled_in_parts_and_compiled_in_parallel_once(monkeypatch, tmp_path):
    from bayes_energy.models import parts
    from bayes_energy.models.refit import compile_model, refit

    listing = tmp_path / "parts_compiled.txt"
    real = parts._compiled_before
    monkeypatch.setattr(parts, "_compiled_before", lambda spec: (listing, real(spec)[1]))
    forks = []
    real_context = parts.mp.get_context

    def spy(method):
        forks.append(method)
        return real_context(method)

    monkeypatch.setattr(parts.mp, "get_context", spy)
    df = tiny_sweep(0)
    compiled = compile_model("pooled", df)
    assert set(compiled.compiled) == set(PARTS) and forks == ["fork"]
    assert len(listing.read_text().split()) == 1  # this model is now known to the machine's cache
    compile_model("pooled", df)
    assert forks == ["fork"]  # the second compile loads both parts from the cache, nothing forked
    idata = refit(compiled, df, seed=3, draws=40, tune=40, chains=2)
    assert "sampled_in_parts" in idata.posterior.attrs
    assert idata.posterior.sizes["draw"] == 40
    assert {"curve_mu", "E_mu", "T_mu", "eta_sigma", "E_sigma"} <= set(idata.posterior.data_vars)
    assert np.isfinite(idata.sample_stats["logp"]).all()
    from bayes_energy.datasets import add_efficiency

    with pytest.raises(ValueError, match="efficiency is unknown"):
        refit(compiled, add_efficiency(_unmatched(df)), seed=3, draws=10, tune=10, chains=1)


def test_a_part_that_diverged_is_sampled_again_at_a_higher_target_acceptance(monkeypatch):
    from bayes_energy.models import parts, sample

    calls = []

    def fake_run(compiled, draws, tune, chains, seed, progress, eigval_cutoff, target_accept, laplace):
        calls.append((compiled, target_accept))
        idata = _fake_part([compiled], chains, draws, seed=len(calls))
        # the curves' first run diverges at draw 0 of chain 0, nothing else does
        idata.sample_stats["diverging"][:] = False
        idata.sample_stats["diverging"][0, 0] = compiled == "curves" and len(calls) == 1
        return idata

    monkeypatch.setattr(sample, "run_nutpie", fake_run)
    fake = {p: p for p in PARTS}
    idata = parts.run_parts(fake, draws=4, tune=10, chains=2, seed=1)
    first = parts.PART_SAMPLING["curves"]["target_accept"]
    assert calls == [("curves", first), ("curves", parts.RETRY_TARGET_ACCEPT),
                     ("outcomes", parts.PART_SAMPLING["outcomes"]["target_accept"])]
    assert int(idata.sample_stats["diverging"].sum()) == 0  # the second run's draws are kept
    assert "curves (1 divergent draws, sampled again" in idata.posterior.attrs["sampled_in_parts"]
    # a target acceptance the caller chose holds for both parts, divergences or not
    calls.clear()
    parts.run_parts(fake, draws=4, tune=10, chains=2, seed=1, target_accept=0.8)
    assert calls == [("curves", 0.8), ("outcomes", 0.8)]
