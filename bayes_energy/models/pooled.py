r"""``pooled``: the paper's reduced-form law in PyMC, completely pooled.

.. math::

    \ln E_r &\sim \mathrm{StudentT}\big(\nu, \mu_r, \sigma\big), \\
    \mu_r &= \beta_0 + \beta_{h[r]} + \beta_{f[r]} + \alpha_C \ln C_r + \alpha_M \ln M_r
             + \alpha_\eta \ln \eta_r + \Psi_{s[r]}, \qquad \Psi_{\text{single}} = 0, \\
    \alpha_C &\sim \mathcal N(0.2, 0.5^2),\quad \alpha_M \sim \mathcal N(0.4, 0.5^2),\quad
    \alpha_\eta \sim \mathcal N(-1, 0.5^2),\quad \Psi_s \sim \mathcal N(0, 1),

with centred log features, fixed hardware and family intercepts (first level
as reference) and one slope set for all data. The slope priors sit on the
paper's OLS values with scales that let the prior predictive span roughly
three orders of magnitude of energy around the data's centre (see
``tests/test_models.py::test_prior_predictive_is_weakly_informative``).

Time follows the same form with its own coefficients and a regression on the
energy residual (correlated residuals). The speedup curves
(:mod:`bayes_energy.models.curves`) are shared by all data, with the curve
parameters linear in standardised log size covariates.
"""

from __future__ import annotations

NAME = "pooled"

PRIORS = {
    #            intercept  lnC   lnM   ln eta  ln tokens  ln S  ln B  ln N_gpu
    "E_mu_mu": [0.0, 0.2, 0.4, -1.0, 0.0, 0.0, 0.0, 0.0],
    "E_mu_sigma": [1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
    "T_mu_mu": [0.0, 0.2, 0.4, -1.0, 0.0, 0.0, 0.0, 0.0],
    "T_mu_sigma": [1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5],
    # between-cell scales (hierarchical model), fixed: see build._cell_effects
    "tau_coef": [0.5, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25],
    "psi_sigma": 1.0,
    "tau_psi": 0.3,
    "tau_group": 0.3,
    "curve_mu_sigma": 1.5,
    "curve_beta_sigma": 0.5,
    "tau_curve": 0.5,
    # between-cell scale of the curve covariate slopes (hierarchical, curve_slopes_by_cell). The
    # 100+ rows of a cell fix its slopes either way: 0.25 and 0.5 gave the same grouped
    # cross-validation (pooled pre-run R² 0.942 vs 0.941, mlpd 0.13 both, 8 splits), and
    # 0.25 keeps an unseen cell's curves tighter (new_hw intervals x10.6 vs x13.1, mlpd -1.24 vs -1.29)
    "tau_curve_beta": 0.25,
    # crossed pooling: shares of each between-cell variance tau^2 held by the hardware
    # effect, the family effect and the hardware x family interaction (they sum to 1)
    "cell_shares": [0.4, 0.4, 0.2],
    "eta_sigma": 0.5,
    "sigma": 0.5,
}

DEFAULT_CONFIG = {
    "extra_features": False,
    "pooling": "none",
    "group_effects": False,
    "noise_by": "none",
    "curve_covariates": True,
    "priors": PRIORS,
}
