r"""``pooled``: the paper's reduced-form law in PyMC, completely pooled.

.. math::

    \ln E_r &\sim \mathrm{StudentT}\big(\nu, \mu_r, \sigma\big), \\
    \mu_r &= \beta_0 + b_{c[r]} + \alpha_C \ln C_r + \alpha_M \ln M_r
             + \alpha_\eta \ln \eta_r + \Psi_{s[r]}, \qquad \Psi_{\text{single}} = 0, \\
    \alpha_C &\sim \mathcal N(0.2, 0.5^2),\quad \alpha_M \sim \mathcal N(0.4, 0.5^2),\quad
    \alpha_\eta \sim \mathcal N(-1, 0.5^2),\quad \Psi_s \sim \mathcal N(0, 1),
    \quad b_c \sim \mathcal N(0, \sigma_b^2),

with centred log features, one free intercept :math:`b_c` per hardware x
family cell (``E_cell_intercept``, prior scale ``cell_intercept_sigma``) and
one slope set for all data. The slope priors sit on the
paper's OLS values with scales that let the prior predictive span roughly
three orders of magnitude of energy around the data's centre (see
``tests/test_models.py::test_prior_predictive_is_weakly_informative``).

Time follows the same form with its own coefficients and a regression on the
energy residual (correlated residuals). The speedup curves
(:mod:`bayes_energy.models.curves`) are shared by all data, with the curve
parameters linear in standardised log size covariates.
"""

from __future__ import annotations

from .spec import SECOND_ORDER_FEATURES, STRATEGIES, STRATEGY_SLOPE_FEATURES

NAME = "pooled"

def _by_coef(intercept, log_compute, log_memory, log_eta, rest, second=None):
    """A per-coefficient prior, keyed by the names of the ``coef`` dimension (``second``: the ``sq_*`` terms).

    The slopes per strategy (``"<strategy>:<feature>"``, ``config["strategy_slopes"]``) take ``rest``: a
    strategy's slope differs from the shared one by as much as a configuration feature's slope may be.
    """
    out = {"intercept": intercept, "log_compute": log_compute, "log_memory": log_memory, "log_eta": log_eta,
           "log_tokens": rest, "log_seq_len": rest, "log_batch": rest, "log_n_gpus": rest, "log_params": rest}
    out |= {f"{s}:{f}": rest for s in STRATEGIES if s != "single" for f in STRATEGY_SLOPE_FEATURES}
    return out | {f"sq_{f}": rest if second is None else second for f in SECOND_ORDER_FEATURES}


#: Every prior of both Bayesian models, keyed by name (per-coefficient priors keyed by coefficient);
#: a user's ``config["priors"]`` overrides any of them.
PRIORS = {
    # population means of the law's coefficients: the paper's OLS values for alpha_C, alpha_M, alpha_eta
    "E_mu_mu": _by_coef(0.0, 0.2, 0.4, -1.0, 0.0),
    "E_mu_sigma": _by_coef(1.0, 0.5, 0.5, 0.5, 0.5),
    "T_mu_mu": _by_coef(0.0, 0.2, 0.4, -1.0, 0.0),
    "T_mu_sigma": _by_coef(1.0, 0.5, 0.5, 0.5, 0.5),
    # between-cell scales (hierarchical model), fixed: see build._cell_effects
    "tau_coef": _by_coef(0.5, 0.25, 0.25, 0.25, 0.25),
    # one free intercept per cell when the slopes are completely pooled (pooled model)
    "cell_intercept_sigma": 1.0,
    # Student-t degrees of freedom of the energy and time noise: nu_min + Gamma(alpha, beta), mean 21.
    # nu >= 1 (noise with a finite mean): below it one chain of the default CPU fit with second-order
    # terms stuck at T_nu ~ 0.1 (max tree depth, R-hat 1.59) while three agreed at nu ~ 25.
    "nu_min": 1.0,
    "nu_alpha": 2.0,
    "nu_beta": 0.1,
    # regression of the time residual on the energy residual
    "time_on_energy_sigma": 1.0,
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
    # noise scales (E_sigma, T_sigma, eta_sigma): Gamma(noise_alpha, .) with the half-normal's mean, zero-avoiding
    # (build._noise_scale: a half-normal's mode at 0 made a funnel where a strategy has few runs in a cell)
    "noise_prior": "gamma",
    "noise_alpha": 2.0,
    # Hardware placed by its specifications (hierarchical, spec_placement; predict.place_by_specs,
    # models.predictive.spec_shift). Fixed from physics before any held-out GPU was looked at: the
    # work-bound part of a run's time scales with the spec-sheet 1/FLOP/s and 1/bandwidth, its energy
    # with J/FLOP and J/byte (TDP over peak), weighted equally (fine-tuning these models sits near the
    # GPUs' ridge points, ~90-200 FLOP/byte); the ratio carries over up to +-25 % (lambda ~ N(1, 0.25));
    # the rest of the time (launches, host work, synchronisation) does not scale with the GPU; the
    # work-bound share is the run's achieved training FLOP/s on the donor over u x peak, with u = 0.5
    # the fraction of dense 16-bit peak that a compute-bound training step reaches (large-model MFU
    # reports: 40-60 %); a real GPU strays from this by x1.35 at one sd (clocks, power limits: hw_tau
    # 0.3); the table has no interconnect, so the speedup curves move by the between-cell scale of the
    # curves (hw_tau_curve = tau_curve).
    "hw_compute_share": 0.5,
    "hw_peak_utilisation": 0.5,
    "hw_lambda_sd": 0.25,
    "hw_tau": 0.3,
    "hw_tau_curve": 0.5,
}

DEFAULT_CONFIG = {
    "extra_features": False,
    "pooling": "none",
    "group_effects": False,
    "noise_by": "none",
    "curve_covariates": True,
    "priors": PRIORS,
}
