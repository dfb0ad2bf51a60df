r"""``hierarchical`` (the default): the law with partial pooling across hardware and family.

For run :math:`r` in cell :math:`c` (hardware x family), strategy :math:`s`
(centred log features :math:`x_r`: 1, :math:`\ln C`, :math:`\ln M`,
:math:`\ln\eta_h`, :math:`\ln` tokens, :math:`\ln S`,
:math:`\ln (B\cdot\text{accum})`, :math:`\ln N_{gpu}`, :math:`\ln` parameters,
and the second-order terms :math:`q_{rj} = z_{rj}^2 - \overline{z_j^2}` of the standardised
:math:`z_j` = ln compute, memory, parameters, tokens, sequence length and batch, and the slopes per
strategy :math:`x_{rj}\,\mathbb 1[s_r = s']` of each multi-device strategy :math:`s'` on the seven linear
features, ``strategy_slopes``):

.. math::

    \ln E_r &\sim \mathrm{StudentT}\big(\nu, \mu_r, \sigma_{s[r]}\big), \qquad
    \mu_r = \sum_k \beta_{c k}\, x_{rk} + \Psi_s + \Psi^{cell}_{c s}, \\
    \beta_{ck} &\sim \mathcal N(\mu_k, \tau_k^2), \qquad
    \Psi_s + \Psi^{cell}_{cs} \sim \mathcal N(\Psi_s, \tau_\Psi^2), \qquad \Psi_{\text{single}} = 0, \\
    \ln\eta_r &\sim \mathrm{StudentT}\big(\nu_\eta, \ln S(N_r;\theta_r) - \ln N_r,\ \sigma^\eta_{s}\big), \qquad
    \theta_{rp} = \theta^{cell}_{cp} + z_r^\top\gamma_{c p}, \qquad
    \theta^{cell}_{cp} \sim \mathcal N(\mu^c_p, \tau_c^2), \qquad
    \gamma_{cp} \sim \mathcal N(\gamma_p, \tau_\gamma^2), \qquad
    \sigma_s, \sigma^T_s, \sigma^\eta_s \sim \mathrm{Gamma}\big(2,\ 2 / (0.5\sqrt{2/\pi})\big).

The noise scales' Gamma prior has the mean of the half-normal(0.5) it replaced but no mass piled at
zero (``priors.noise_prior``, :func:`bayes_energy.models.build._noise_scale`).

Why second-order terms: the roofline is a sum, :math:`E = \varepsilon_C C + \varepsilon_M M + E_0`,
so :math:`\ln E` is a log-sum-exp of the log proxies, curved where the law's power form is
straight (a fixed start-up energy :math:`E_0` flattens the energy of short runs, for one). The
squares are that curvature to second order. On inner grouped splits of the authors' table (the
outer test parts untouched; ``benchmarks/select_terms_mayaki2026.py``) they cut the pre-run
error of a per-cell least-squares law from 0.179 to 0.078 (pooled, ln J); squaring
:math:`\ln N_{gpu}` too added nothing (0.0775), and it is left out so that device counts are
extrapolated by the speedup curves alone. ``"second_order": False`` is the first-order law.

Why slopes per strategy: under tensor parallelism each layer's all-reduce moves activations, whose share of
the step shrinks as the layers grow, so TP's energy scales differently with model size than the other
strategies'. With one set of slopes the BERT posterior had two modes trading the slopes between the TP runs and
the rest. Chosen on inner grouped splits (BERT inner RMSE 0.22 to 0.12), held out they lift BERT's pre-run
:math:`R^2` from 0.970 to 0.985 and PSIS-LOO on the reference table from 984 to 1162 (``docs/speed.md``
section 9). A cell that never ran a strategy takes that strategy's slopes from the population.

The population means :math:`\mu_{\alpha_C}, \mu_{\alpha_M}, \mu_{\alpha_\eta}`
have the priors of :mod:`bayes_energy.models.pooled`; the extra slopes and the second-order
coefficients :math:`\mathcal N(0, 0.5^2)`, between-cell scale 0.25. The Student-t degrees of
freedom are :math:`\nu, \nu_\eta = 1 + \mathrm{Gamma}(2, 0.1)`.

Why Student-t scatter about the speedup curves (``eta_noise``): the measured efficiencies stray
from the curves with heavy tails. On the whole authors' table (no held-out part looked at;
``benchmarks/eta_noise_loo.py``) the standardised residuals of a normal scatter have excess
kurtosis 4.4 and 66 % of them fall inside the normal's 50 % band, and PSIS-LOO prefers Student-t
scatter by 62.9 ± 18.2 in elpd of ``log_eta`` (:math:`\nu_\eta \approx 2.1`; energy and time elpd
unchanged). A normal scatter made the pre-run intervals too wide in the middle: held out, 58 % of
runs fell inside the pooled 50 % intervals, 51 % with Student-t (``mayaki2026_seed2026.md``). The between-cell scales :math:`\tau` are fixed
prior constants (``priors.tau_coef``, ``tau_psi``, ``tau_curve``): with two or
three cells they cannot be learned, and every free-scale parametrisation we
tried funnelled (see :func:`bayes_energy.models.build._cell_effects`). Cell
effects are centred (each cell has 100+ rows). A hardware x family cell
never measured draws its coefficients from :math:`\mathcal N(\mu, \tau^2)`,
so its predictions are wider; a GPU never measured that is in the GPU table
(``data/gpu_specs.csv``), with a family measured on other hardware, is placed
by its specifications instead (``spec_placement``,
:func:`bayes_energy.predict.place_by_specs`): the family's measured cell, with
each run's energy and time moved by the roofline with a fixed per-step
overhead (:func:`bayes_energy.models.predictive.spec_shift`): the work-bound
share of the run's donor time (its achieved training FLOP/s over half the
donor's peak) scales by the J/FLOP, J/byte and s/FLOP, s/byte ratios
(:math:`\lambda \sim \mathcal N(1, 0.25^2)`), the rest does not, with a
spread :math:`\mathcal N(0, 0.3^2)` beyond the specs.

Speedup curves: USL with a one-off distribution overhead :math:`\omega` for
FSDP/DDP, saturating exponential for TP (:mod:`bayes_energy.models.curves`);
covariates :math:`z_r` (standardised log parameters, tokens, sequence
length, batch) move the USL distribution overhead and the TP ceiling
(``curve_covariates_on``, default each curve's ``moved`` parameters), with
slopes :math:`\gamma_{cp}` per cell around population slopes
:math:`\gamma_p \sim \mathcal N(0, 0.5^2)` (``tau_curve_beta`` = 0.25;
``curve_slopes_by_cell``). Held-out accuracy of each choice is in
``benchmarks/results/mayaki2026_seed2026.md`` (and the README); the
choices were made on inner splits (``validate_mayaki2026.py --inner``).
Only multi-device rows with a measured single-device partner
inform the curves; single-device rows have :math:`\eta = 1` by definition.
Time: the same form with its own parameters, plus a regression on the
energy residual (correlated energy and time residuals).

An optional configuration-family effect :math:`u_g \sim \mathcal N(0, \tau_u^2)`
(non-centred) is off by default, and so is crossed pooling (cell effects as
hardware + family + interaction effects); see ``DEFAULT_CONFIG``.
"""

from __future__ import annotations

from .pooled import PRIORS
from .spec import STRATEGY_SLOPE_FEATURES

NAME = "hierarchical"

DEFAULT_CONFIG = {
    "extra_features": True,
    # Second-order terms of the log configuration features (spec.SECOND_ORDER_FEATURES): the curvature of the
    # roofline's sum E = eps_C C + eps_M M + E0 in log space. Chosen on inner grouped splits
    # (benchmarks/select_terms_mayaki2026.py); held-out numbers in benchmarks/results/mayaki2026_seed2026.md.
    "second_order": True,
    # Sample each cell's coefficients on the rotated basis of its design ("rotated": build.cell_rotation, the right
    # singular vectors of the cell's design on the prior's scale; the same posterior) or directly ("coef"). Rotated,
    # the exact null directions that slopes per strategy leave in each cell's design are coordinates of their own,
    # and the warm-up is shorter (docs/speed.md section 12: leapfrog steps 270k -> 179k on the reference table,
    # sampling 138 -> 117 s; 145k -> 77k on README command 1's data). Default since 2026-12-07, once chains start at
    # the posterior mode (sample.start_at_mode, section 13): from PyMC's start, short warm-ups left GPT chains stuck
    # in a minor mode (harness: 5 split fits above R-hat 1.1, worst 2.23). From the mode, on the same splits
    # (--tag mode_start_rotate): 32 of 63 hierarchical split fits above R-hat 1.01 (38 rotated from PyMC's start,
    # 48 on the coefficients' basis), 1 above 1.1 (1.14), the same held-out numbers.
    # A whitening (the QR trick with the prior, an MvNormal per cell) was measured until 2026-12-07 and removed: it
    # adapted as early but cost 17 % more per step, and on the harness 8 split fits ended above R-hat 1.1 against 1.
    "cell_basis": "rotated",
    # Time's coefficients sampled "given energy" (build._normal: T = T_given_E + lambda E, a unit-Jacobian
    # shift, the same posterior) or "marginal". Measured side by side (docs/speed.md, section 9): on the
    # harness's GPT splits it removed the stuck chains (max R-hat 2.22 -> 1.05; split 0: 139 -> 23 leapfrog
    # steps per draw), but BERT splits landed in the two noise modes 6 times instead of once, so more split
    # fits failed R-hat 1.01 (29 of 126 against 23 of 123) and the reference fit was no faster (16-24 steps
    # per draw either way). Off.
    "time_coordinates": "marginal",
    # Slopes per strategy on these features ("<strategy>:<feature>" coefficients, spec.STRATEGY_SLOPE_FEATURES):
    # all seven linear ones, since 2026-12-06. Chosen on inner grouped splits (benchmarks/select_terms_mayaki2026.py:
    # BERT inner RMSE 0.22 -> 0.12 at seed 2026, 0.24 -> 0.10 at seed 7; subsets were worse). Held out
    # (validate_mayaki2026.py, variant hierarchical_strategy_slopes, docs/speed.md section 9): pre-run R^2 BERT
    # 0.970 -> 0.985, GPT 0.995 -> 0.996, pooled 0.992 -> 0.994 (RMSE 0.085 -> 0.072), new_hw post-run 0.892 ->
    # 0.919; PSIS-LOO on the reference table 984 -> 1162; BERT's two-mode posteriors gone. Cost: 1.5-2x the
    # sampling time and slower mixing at 2 chains (median max R-hat of the harness's split fits 1.009 -> 1.012
    # pooled); the reference fit still passes (0 divergences, R-hat 1.01, ESS 706). [] turns them off.
    "strategy_slopes": list(STRATEGY_SLOPE_FEATURES),
    "pooling": "partial",
    # A configuration-family effect u_g is available ("group_effects": True) but
    # off by default: on the reference table it makes the posterior bimodal (residual
    # variance shared between u_g and a heavy-tailed noise; R-hat 1.53 across 4 chains),
    # while without it every diagnostic passes (R-hat 1.00, ESS_bulk >= 2000, Pareto k < 0.5).
    "group_effects": False,
    "noise_by": "strategy",
    # Scatter of the measured ln efficiency about the speedup curves: "student_t" (eta_nu learned) or
    # "normal". Chosen by PSIS-LOO on the whole table (benchmarks/results/eta_noise_loo.md, see above).
    "eta_noise": "student_t",
    "curve_covariates": True,
    # covariate slopes of the speedup curves per cell, partially pooled (build.build_model)
    "curve_slopes_by_cell": True,
    # Crossed pooling (cell effect = hardware effect + family effect + interaction, see
    # build._cell_effects) is available but off: on the one cell of the reference table
    # that can test it (RTX 2080 Ti x GPT held out, its hardware and family seen in other
    # cells) it predicted worse than pooling whole cells (mean log predictive density
    # -1.46 vs -1.19 post-run, -3.65 vs -2.20 pre-run; pre-run 95 % coverage 0.44 vs 0.78):
    # there the effects are far from additive. `benchmarks/validate_mayaki2026.py
    # --settings new_cell,new_hw --models hierarchical,hierarchical_crossed` repeats the test.
    "crossed": False,
    # A GPU never measured but in data/gpu_specs.csv is placed by its specifications (roofline) from the
    # same family on measured hardware (predict.place_by_specs); off: it is drawn from the population of cells.
    "spec_placement": True,
    "priors": PRIORS,
}
