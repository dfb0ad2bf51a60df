"""bayes_energy.models.diagnostics on constructed draws (no MCMC): a chain stuck in a minor mode is named."""

import arviz as az
import numpy as np

from bayes_energy.models.diagnostics import diagnose, minor_mode_chains


def _idata(shift_chain=None, shift=0.0, logp_gap=0.0, stats=True, seed=0):
    """4 chains x 500 autocorrelated draws of one parameter; ``shift_chain`` sits elsewhere, ``logp_gap`` lower."""
    rng = np.random.default_rng(seed)
    x = np.empty((4, 500))
    for c in range(4):
        e = rng.normal(size=500)
        x[c, 0] = e[0]
        for i in range(1, 500):
            x[c, i] = 0.5 * x[c, i - 1] + np.sqrt(1 - 0.25) * e[i]
    logp = -0.5 * x**2 + 100.0
    if shift_chain is not None:
        x[shift_chain] += shift
        logp[shift_chain] -= logp_gap
    groups = {"posterior": {"x": x}}
    if stats:
        energy = -logp + 0.5 * rng.chisquare(1, size=logp.shape)  # Hamiltonian: potential + kinetic
        groups["sample_stats"] = {"logp": logp, "energy": energy, "diverging": np.zeros((4, 500), bool)}
    return az.from_dict(**groups)


def test_a_chain_in_a_lower_mode_is_named_in_the_failing_r_hat():
    d = diagnose(_idata(shift_chain=2, shift=3.0, logp_gap=8.0))
    assert d["max_rhat"] > 1.01 and d["minor_mode_chains"] == [2]
    msg = next(m for m in d["failed"] if m.startswith("max R-hat"))
    assert "below chain " in msg and "chain 2 by 8.0" in msg and "minor mode" in msg
    assert len(d["chain_mean_logp"]) == 4


def test_mixing_chains_and_chains_without_log_density_flag_nothing():
    for seed in range(5):  # chains of one mode differ by their Monte Carlo error only
        assert minor_mode_chains(_idata(seed=seed))["minor"] == []
    # a shift in the parameter with the same log density (a symmetric mode) is not a minor mode
    assert minor_mode_chains(_idata(shift_chain=1, shift=3.0))["minor"] == []
    d = diagnose(_idata())
    assert d["passed"] and d["minor_mode_chains"] == []
    assert minor_mode_chains(_idata(stats=False)) is None


def test_a_summary_passed_in_gives_the_same_diagnostics_as_computing_it():
    from bayes_energy.models.diagnostics import summarize

    for idata in (_idata(seed=3), _idata(shift_chain=2, shift=3.0, logp_gap=8.0)):
        assert diagnose(idata, summary=summarize(idata)) == diagnose(idata)
    # a fit with non-centred z's: summarize leaves them out, so the checks compute their own summary
    z = _idata(shift_chain=1, shift=3.0)
    z.posterior["u_z"] = z.posterior["x"]
    z.posterior["x"] = z.posterior["x"] * 0 + np.random.default_rng(1).normal(size=(4, 500))
    assert diagnose(z, summary=summarize(z))["max_rhat"] > 1.01


def test_the_all_at_once_max_r_hat_is_arvizs_and_skips_scalars_without_one():
    from bayes_energy.models.diagnostics import max_rhat

    for shift in (0.0, 0.3, 3.0):
        post = _idata(shift_chain=1, shift=shift).posterior
        rng = np.random.default_rng(2)
        post["v"] = (("chain", "draw", "k"), rng.normal(size=(4, 500, 3)) + np.arange(4)[:, None, None] * shift)
        post["const"] = (("chain", "draw"), np.ones((4, 500)))  # a reference level: no R-hat
        post["n"] = (("chain", "draw"), rng.integers(0, 3, size=(4, 500)))  # ties, integer draws
        ref = az.rhat(post)
        want = max(float(np.nanmax(v.values)) for v in ref.data_vars.values() if np.isfinite(v.values).any())
        assert abs(max_rhat(post) - want) < 1e-12
        assert (max_rhat(post) > 1.01) == (shift > 0.1)
    # an odd number of draws: the split drops the middle draw, as ArviZ does
    x = np.random.default_rng(3).normal(size=(2, 301, 4))
    assert abs(max_rhat(x) - float(az.rhat(az.from_dict(posterior={"x": x})).x.max())) < 1e-12
