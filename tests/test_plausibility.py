"""Physical plausibility of the predictions where the data say nothing (issue 10).

Posterior-predictive checks on the session's fit of the reference table, and
prior-predictive checks of the curves: see :mod:`bayes_energy.plausibility`
for the three rules.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayes_energy.models.curves import CURVES, saturating_log_eta, usl_log_eta


@pytest.fixture(scope="module")
def checks(small_fit):
    from bayes_energy.plausibility import check_plausibility

    idata, _ = small_fit
    return check_plausibility(idata, n_gpus=(2, 4, 6, 8), seed=3, n_draws=300)


def test_every_cell_and_strategy_is_checked(checks, small_fit):
    _, table = small_fit
    cells = set(zip(table["hardware"], table["family"]))
    assert set(zip(checks["hardware"], checks["family"])) == cells
    assert set(checks["strategy"]) == set(table["strategy"]) - {"single"}
    # the reference table never ran TP on the A100: those rows are the unmeasured case
    assert (~checks["measured"]).any()


def test_unmeasured_strategy_keeps_at_least_half_the_single_device_energy(checks):
    bad = checks[~checks["energy_floor_ok"]]
    assert bad.empty, f"N-device median energy below half the single-device median without data:\n{bad}"


def test_speedup_never_exceeds_n_beyond_the_measured_margin(checks):
    bad = checks[~checks["speedup_ok"]]
    assert bad.empty, f"super-linear speedups beyond the measured margin:\n{bad}"
    assert (checks["speedup_limit"] >= checks["n_gpus"]).all()


def test_average_power_per_device_stays_below_tdp(checks):
    known = checks[np.isfinite(checks["tdp_w"])]
    assert len(known) == len(checks)  # both GPUs of the reference table are in the GPU table
    bad = known[~known["power_ok"]]
    assert bad.empty, f"average power per device above 1.2 x TDP:\n{bad}"


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_prior_curves_are_never_super_linear(seed):
    """Prior predictive of the curves: S(N) <= N for every prior draw of every curve."""
    rng = np.random.default_rng(seed)
    n = np.array([1.0, 2.0, 3.0, 4.0, 6.0, 8.0, 16.0, 64.0])[:, None]
    for c in CURVES.values():
        # the population prior (prior mean, curve_mu_sigma 1.5) plus a cell deviation (tau_curve 0.5)
        theta = [mu + 1.5 * rng.standard_normal(2000) + 0.5 * rng.standard_normal(2000) for mu in c.prior_mu]
        speedup = n * np.exp(c.fn(n, *theta, np))
        assert np.all(speedup <= n * (1 + 1e-9)), c
        assert np.all(speedup[0] == 1.0)  # one device: no speedup, no overhead


def test_plausibility_table_flags_an_implausible_posterior(small_fit):
    """The checks can fail: a posterior whose TP ceiling is pushed far up is flagged."""
    import copy
    import json

    from bayes_energy.plausibility import check_plausibility

    idata, _ = small_fit
    bad = copy.deepcopy(idata)
    cfg = json.loads(bad.posterior.attrs["bayes_energy_config"])
    strategies = cfg["levels"]["strategy"]
    # scale every cell's TP strategy effect on energy down by e^-3 (a twentieth of the energy)
    if "tp" not in strategies:
        pytest.skip("no TP in the fit")
    k = strategies.index("tp")
    bad.posterior["E_psi_cell"][..., k] = bad.posterior["E_psi_cell"][..., k] - 3.0
    out = check_plausibility(bad, n_gpus=(2,), seed=3, n_draws=200)
    assert not out.loc[out["strategy"] == "tp", "energy_floor_ok"].all()
