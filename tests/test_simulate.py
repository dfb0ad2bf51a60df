"""The simulator: schema-valid tables, and parameter recovery by the pooled model."""

from __future__ import annotations

import numpy as np
import pytest

from bayes_energy.schema import validate
from bayes_energy.simulate import simulate_from_params, simulated_design, tiny_sweep


def test_tiny_sweep_is_valid_and_fixed():
    a, b = tiny_sweep(), tiny_sweep()
    assert len(validate(a)) == 12
    assert np.allclose(a["energy_j"], b["energy_j"])
    assert (a.loc[a["strategy"] == "single", "efficiency"] == 1).all()
    multi = a[a["n_gpus"] > 1]
    assert (multi["efficiency"] < 1).all() and np.allclose(multi["speedup"], multi["efficiency"] * multi["n_gpus"])


def test_design_groups_and_levels():
    d = simulated_design(n_configs=3, n_gpus=(2, 4, 8), seed=5)
    assert len(d) == 2 * 3 * 4
    assert d.groupby("group")["hardware"].nunique().eq(1).all()
    assert set(d["strategy"]) == {"single", "fsdp"}


@pytest.mark.slow
def test_simulate_sweep_from_the_prior():
    from bayes_energy.simulate import simulate_sweep

    table, params = simulate_sweep(model="hierarchical", seed=3, return_params=True)
    assert len(validate(table)) == len(table)
    assert {"E_beta", "curve_cell", "E_sigma"} <= set(params)
    assert np.isfinite(np.log(table["energy_j"])).all()


TRUTH = {
    "E_mu": [0.0, 0.15, 0.45, -0.9],   # intercept, alpha_C, alpha_M, alpha_eta
    "E_psi_free": [-0.3],              # Psi_fsdp
    "E_sigma": 0.05,
    "E_nu": 30.0,
    "curve_mu": [-2.0, -1.0, 0.0, 0.0],  # ln USL sigma, omega; TP (unused)
    "eta_sigma": [0.15],
}


@pytest.mark.slow
def test_pooled_model_recovers_known_parameters():
    import arviz as az

    from bayes_energy.models.sample import fit
    from bayes_energy.simulate import design_spec, prior_draws

    design = simulated_design(n_configs=12, n_gpus=(2, 4, 8), seed=11)
    spec = design_spec(design, "pooled")
    prior = prior_draws(design, spec, draws=1, fixed=TRUTH, seed=4)
    params = {k: prior[k].values[0, 0] for k in prior.data_vars}
    table = simulate_from_params(design, spec, params, seed=5)
    idata = fit(table, model="pooled", draws=300, tune=300, chains=2, seed=6, progress=False, predictive=False)
    # five truths in one replication: at 94 % each, one falls outside by chance in ~1 of 4 seeds
    # (it did when the simulator's random stream changed); 99 % keeps the family-wise false alarm ~5 %
    hdi = az.hdi(idata, hdi_prob=0.99)
    checks = {
        "alpha_C": (hdi["E_mu"].sel(coef="log_compute").values, TRUTH["E_mu"][1]),
        "alpha_M": (hdi["E_mu"].sel(coef="log_memory").values, TRUTH["E_mu"][2]),
        "alpha_eta": (hdi["E_mu"].sel(coef="log_eta").values, TRUTH["E_mu"][3]),
        "Psi_fsdp": (hdi["E_psi"].sel(strategy="fsdp").values, TRUTH["E_psi_free"][0]),
        "usl_sigma": (hdi["curve_mu"].sel(curve_param="usl_sigma").values, TRUTH["curve_mu"][0]),
    }
    missed = {k: (lo_hi.tolist(), t) for k, (lo_hi, t) in checks.items() if not lo_hi[0] <= t <= lo_hi[1]}
    assert not missed, f"truths outside the 99% HDI: {missed}"


def test_prior_draws_of_the_default_model_carry_its_student_t_efficiency_scatter():
    """SBC simulates with the model's own scatter: the default's eta_nu is drawn with the other parameters."""
    from bayes_energy.simulate import design_spec, prior_draws

    design = simulated_design(n_configs=4, n_gpus=(2, 4, 8), seed=0)
    spec = design_spec(design, "hierarchical")
    prior = prior_draws(design, spec, draws=2, seed=1)
    assert "eta_nu" in prior.data_vars and np.all(prior["eta_nu"].values >= 1.0)
