"""Build the PyMC model from a :class:`~bayes_energy.models.spec.ModelSpec`.

All inputs, the observations too, go through ``pm.Data`` with named dims,
so refitting on new rows (cross-validation folds, SBC replications, probes)
reuses one compiled model (``nutpie``'s ``with_data``, see
:mod:`bayes_energy.models.refit`). Prediction does not go through PyMC: it
evaluates the same law in numpy (:mod:`bayes_energy.models.law`) on the
saved draws. Building a model first enables the machine-wide compile cache
(:func:`bayes_energy.models.cache.enable_compile_cache`), so a second process
that builds the same model loads its compiled log-density.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pymc as pm
import pytensor.tensor as pt

from .cache import enable_compile_cache
from .curves import CURVES
from .law import ETA_COLUMN, block_mean, log_eta_from_curves
from .predictive import curve_rows
from .spec import ModelSpec, by_coef

__all__ = ["build_model", "model_data", "data_dims", "BLOCKS", "PARTS"]

#: The two outcome blocks: energy and time.
BLOCKS = ("E", "T")
#: The two parts of the model whose posteriors are independent when every run's efficiency is measured
#: (``build_model(part=...)``, :mod:`bayes_energy.models.parts`).
PARTS = ("curves", "outcomes")


def model_data(spec: ModelSpec, df: pd.DataFrame) -> dict[str, np.ndarray]:
    """The ``pm.Data`` values for a training table (names as in the model)."""
    A = spec.arrays(df)
    known = np.isfinite(A["log_eta_obs"])
    rows = curve_rows(A)
    data = {
        "X": A["X"],
        "Z": A["Z"],
        "cell_idx": A["cell_idx"],
        "cell_onehot": A["cell_onehot"],
        "strategy_idx": A["strategy_idx"],
        "n_gpus": A["n_gpus"],
        "curve": A["curve"],
        "eta_known": known.astype(float),
        "curve_rows": rows.astype("int64"),
        "log_eta_curve_obs": A["log_eta_obs"][rows],
        "log_energy_obs": A["log_energy"],
        "log_time_obs": A["log_time"],
    }
    if "group_idx" in A:
        data["group_idx"] = A["group_idx"]
    basis = spec.config.get("cell_basis", "coef")
    if basis not in ("coef", "rotated"):
        raise ValueError(f"config cell_basis must be 'coef' or 'rotated', got {basis!r}")
    if spec.config["pooling"] == "partial" and basis == "rotated":
        tau = by_coef(spec.config["priors"]["tau_coef"], spec.coords["coef"])
        data["cell_rotation"] = cell_rotation(data, tau, len(spec.coords["cell"]))
    return data


def data_dims(name: str) -> tuple[str, ...]:
    """Dims of the model's pm.Data ``name``."""
    return {
        "X": ("run", "coef"),
        "Z": ("run", "curve_coef"),
        "cell_onehot": ("run", "cell"),
        "curve_rows": ("curve_run",),
        "log_eta_curve_obs": ("curve_run",),
        "cell_rotation": ("cell", "coef", "coef_rotated"),
    }.get(name, ("run",))


def _normal(name, mu, sigma, dims, shear=None):
    r"""``name`` ~ Normal(mu, sigma); with ``shear = (lam, y)`` sampled on the coordinates of time given energy.

    The free variable is then ``{name}_given_E`` :math:`= x - \lambda y`, drawn from
    :math:`\mathcal N(\mu - \lambda y, \sigma^2)`, and ``name`` = :math:`x` is the deterministic
    ``{name}_given_E`` + :math:`\lambda y`: for fixed :math:`\lambda, y` a shift, so the joint
    distribution (prior and posterior) is the same as sampling :math:`x` directly, and prior predictive
    draws still work. See ``build_model``'s ``time_coordinates``.
    """
    if shear is None:
        return pm.Normal(name, mu=mu, sigma=sigma, dims=dims)
    lam, y = shear
    x_given = pm.Normal(f"{name}_given_E", mu=mu - lam * y, sigma=sigma, dims=dims)
    return pm.Deterministic(name, x_given + lam * y, dims=dims)


def _cell_effects(name, mu, tau, dims, parents=None, shear=None, rotation=None):
    r"""Cell-level effects ~ Normal(population mean, tau), centred, with tau fixed.

    ``parents`` (crossed pooling, ``config["crossed"]``): ``(hw_idx, fam_idx,
    shares)``, the hardware and family of each cell and the shares of the
    between-cell variance. The cell effect is then

    .. math::

        \beta_c \sim \mathcal N(\mu + a_{h[c]} + b_{f[c]},\ s_c\tau^2), \quad
        a_h \sim \mathcal N(0, s_h\tau^2), \quad b_f \sim \mathcal N(0, s_f\tau^2),

    with :math:`s_h + s_f + s_c = 1`: a cell of new hardware *and* new family
    has the same prior as without crossing, while a new combination of known
    hardware and known family (an A100 x BERT cell from A100 x GPT and
    2080 Ti x BERT) borrows its hardware's and its family's effects.

    With two or three hardware x family cells the between-cell scale cannot
    be learned: a free tau sent every parametrisation we tried (centred,
    non-centred, mixed, zero-avoiding Gamma priors) into funnels and
    divergences. tau is therefore a stated prior constant of the config
    (``priors.tau_*``): e.g. the ln-efficiency slope differs by about 0.4
    between an A100 and an RTX 2080 Ti (Mayaki 2026), hence tau ~ 0.25 for slopes.
    Each cell holds 100+ rows, so the centred form suits.

    ``rotation`` (the ``cell_rotation`` data, ``config["cell_basis"] = "rotated"``): the same
    distribution, sampled on the rotated basis of each cell's design (:func:`_rotated_cell_effects`).
    """
    sd = 1.0
    if parents is not None:
        hw_idx, fam_idx, (s_hw, s_fam, s_cell) = parents
        a = pm.Normal(f"{name}_hw", 0.0, tau * np.sqrt(s_hw), dims=("hardware", *dims[1:]))
        b = pm.Normal(f"{name}_fam", 0.0, tau * np.sqrt(s_fam), dims=("family", *dims[1:]))
        mu, sd = mu + a[hw_idx] + b[fam_idx], np.sqrt(s_cell)
    if rotation is None:
        return _normal(name, mu, tau * sd, dims, shear)
    return _rotated_cell_effects(name, mu, np.asarray(tau).reshape(-1), sd, rotation, shear)


def cell_rotation(values: dict, tau: np.ndarray, ncell: int) -> np.ndarray:
    r"""Per-cell rotations :math:`V_c` (cell, coef, coef): the right singular vectors of :math:`X_c\operatorname{diag}\tau`.

    :math:`X_c` is the cell's rows of the design, so :math:`X_c\operatorname{diag}\tau` is the design on
    the prior's scale, and :math:`V_c` is orthogonal: its columns are first the directions the cell's
    rows inform (largest singular value first), then the exact null directions of the design (a slope
    per strategy that no row of the cell uses, or a feature that is a sum of others within the cell:
    FSDP's global batch grows with the device count). A cell without rows gets the identity.
    """
    X = values["X"]
    out = np.empty((ncell, X.shape[1], X.shape[1]))
    for c in range(ncell):
        Xc = X[values["cell_idx"] == c] * tau[None, :]
        out[c] = np.linalg.svd(Xc, full_matrices=True)[2].T if len(Xc) else np.eye(X.shape[1])
    return out


def _rotated_cell_effects(name, mu, tau, sd, V, shear=None):
    r"""Cell coefficients :math:`\beta_c \sim \mathcal N(\mu_c, s^2\operatorname{diag}\tau^2)` sampled on the
    rotated basis of the cell's design (``config["cell_basis"] = "rotated"``).

    The free variable ``{name}_rot`` is :math:`v_c = V_c^\top(\beta_c/\tau) \sim \mathcal N(V_c^\top\mu_c/\tau, s^2 I)`
    (:func:`cell_rotation`); ``name`` is the deterministic :math:`\beta_c = \tau\, V_c v_c`. An orthogonal
    map of an isotropic normal is isotropic, so the prior, and the posterior, are those of sampling
    :math:`\beta_c` directly (centred, generative: prior predictive draws work), with no multivariate normal
    to evaluate. What changes is the geometry: on this basis the directions the cell's rows do not inform
    (prior scale 1) are separate coordinates instead of mixtures of well-measured coefficients (posterior
    scales a few hundred times smaller), so the sampler's diagonal mass matrix finds them at once instead
    of the low-rank one learning them over the warm-up (docs/speed.md, section 12). ``V`` is a ``pm.Data``
    (``cell_rotation``), recomputed for every table a compiled model is refitted on. ``shear`` (time
    "given energy") applies to the rotated coordinates: :math:`v^T_c - \lambda v^E_c`, the same linear map.
    The default since chains start at the posterior mode (``hierarchical.DEFAULT_CONFIG``, docs/speed.md section 13).
    """
    v = _normal(f"{name}_rot", pt.matmul(pt.swapaxes(V, -1, -2), (mu / tau)[..., None])[..., 0], sd, ("cell", "coef"),
                shear)
    return pm.Deterministic(name, tau * pt.matmul(V, v[..., None])[..., 0], dims=("cell", "coef"))


def _noise_scale(name: str, scale: float, pri: dict, dims):
    r"""A noise scale (``E_sigma``, ``T_sigma``, ``eta_sigma``): Gamma(:math:`a`, :math:`a/m`) or HalfNormal(``scale``).

    ``priors.noise_prior`` = ``"gamma"`` (default): shape :math:`a` = ``priors.noise_alpha`` (2) and
    the half-normal's mean :math:`m = s\sqrt{2/\pi}`, so the same scale but no mass piled at 0: no
    repeated GPU run reproduces its energy or time exactly, and a strategy with few runs in a cell
    let a half-normal's scale fall towards 0, a funnel (SBC replications with 32 and 97 divergent
    draws, all at ``E_sigma[single]`` near 0; docs/speed.md section 8). ``"halfnormal"``: the
    prior before 2026-12-06 (posteriors saved without the key get it from ``io.PRIORS_OF_OLDER_FILES``).
    """
    kind = pri["noise_prior"]
    if kind == "gamma":
        a = pri["noise_alpha"]
        return pm.Gamma(name, alpha=a, beta=a / (scale * np.sqrt(2.0 / np.pi)), dims=dims)
    if kind != "halfnormal":
        raise ValueError(f"priors.noise_prior must be 'gamma' or 'halfnormal', got {kind!r}")
    return pm.HalfNormal(name, sigma=scale, dims=dims)


def _student_nu(block: str, pri: dict):
    """Student-t degrees of freedom ``<block>_nu`` = ``nu_min`` + Gamma(``nu_alpha``, ``nu_beta``) (every noise term's prior)."""
    return pm.Deterministic(f"{block}_nu", pri.get("nu_min", 0.0)
                            + pm.Gamma(f"{block}_nu_excess", alpha=pri["nu_alpha"], beta=pri["nu_beta"]))


def build_model(spec: ModelSpec, df: pd.DataFrame, part: str | None = None) -> pm.Model:
    """Make the PyMC model for a spec and its training table.

    Parameters
    ----------
    spec : ModelSpec
        The specification (coords, config, centring).
    df : pandas.DataFrame
        The training sweep table.
    part : {None, "curves", "outcomes"}
        The whole model (None), or one of the two parts its posterior factorises into when every run's
        efficiency is measured (:mod:`bayes_energy.models.parts`): ``"curves"``, the speedup curves and
        ``log_eta``; ``"outcomes"``, energy and time, with the measured efficiencies as a feature.

    Returns
    -------
    pymc.Model
        Observed variables ``log_energy`` (centred ln J), ``log_time``
        (centred ln s) and ``log_eta`` (ln efficiency of multi-device rows
        with a single-device partner: the rows that inform the curves).
    """
    if part not in (None, *PARTS):
        raise ValueError(f"part must be None or one of {', '.join(PARTS)}, got {part!r}")
    enable_compile_cache()  # before any random variable is built (see models/cache.py)
    cfg = spec.config
    pri = cfg["priors"]
    partial = cfg["pooling"] == "partial"
    values = model_data(spec, df)
    coords = dict(spec.coords)
    parents = (*spec.cell_parents(), tuple(pri["cell_shares"])) if partial and cfg.get("crossed") else None
    tau = by_coef(pri["tau_coef"], coords["coef"])
    with pm.Model(coords=coords) as model:
        D = {k: pm.Data(k, v, dims=data_dims(k)) for k, v in values.items()}
        A = dict(D)
        P: dict = {}
        ncell = len(coords["cell"])
        # time on the coordinates "given energy" (config["time_coordinates"], see _normal): lambda first
        time_coordinates = cfg.get("time_coordinates", "marginal")
        if time_coordinates not in ("marginal", "given_energy"):
            raise ValueError(f"config time_coordinates must be 'marginal' or 'given_energy', got {time_coordinates!r}")
        sheared = time_coordinates == "given_energy"
        lam = pm.Normal("T_on_E_resid", 0.0, pri["time_on_energy_sigma"]) if sheared and part != "curves" else None
        raw: dict = {}  # the energy block's free variables, which the time block's are sheared by

        def shear(b, key):
            return (lam, raw[key]) if sheared and b == "T" else None

        for b in (BLOCKS if part != "curves" else ()):
            mu = _normal(f"{b}_mu", by_coef(pri[f"{b}_mu_mu"], coords["coef"]), by_coef(pri[f"{b}_mu_sigma"], coords["coef"]),
                         "coef", shear(b, "mu"))
            if partial:
                P[f"{b}_beta"] = _cell_effects(f"{b}_beta", mu[None, :], tau[None, :], ("cell", "coef"), parents,
                                               shear(b, "beta"), D.get("cell_rotation"))
            else:
                # complete pooling of the slopes; one free intercept per cell
                icpt = _normal(f"{b}_cell_intercept", 0.0, pri["cell_intercept_sigma"], "cell", shear(b, "icpt"))
                raw["icpt"] = icpt
                beta = pt.concatenate([(mu[0] + icpt)[:, None], pt.tile(mu[None, 1:], (ncell, 1))], axis=1)
                P[f"{b}_beta"] = pm.Deterministic(f"{b}_beta", beta, dims=("cell", "coef"))
            psi_free = _normal(f"{b}_psi_free", 0.0, pri["psi_sigma"], "strategy_multi", shear(b, "psi"))
            # the free coefficients time's are sheared by: on the rotated basis when the cells are rotated
            raw |= {"mu": mu, "beta": model[f"{b}_beta_rot"] if "cell_rotation" in D else P[f"{b}_beta"], "psi": psi_free}
            P[f"{b}_psi"] = pm.Deterministic(f"{b}_psi", pt.concatenate([pt.zeros(1), psi_free]), dims="strategy")
            if partial:
                # cell-level strategy effects around the population Psi; single stays 0
                eff = _cell_effects(f"{b}_psi_cell_dev", psi_free[None, :], pri["tau_psi"], ("cell", "strategy_multi"),
                                   parents, shear(b, "psi_cell"))
                raw["psi_cell"] = eff
                full = pt.concatenate([pt.zeros((ncell, 1)), eff - psi_free[None, :]], axis=1)
                P[f"{b}_psi_cell"] = pm.Deterministic(f"{b}_psi_cell", full, dims=("cell", "strategy"))
            if cfg.get("group_effects") and b == "E":
                tau_u = pm.HalfNormal(f"{b}_u_tau", sigma=pri["tau_group"])
                # ~3 rows per configuration family and slopes that compete with it:
                # weak data per level, so non-centred (a centred form stuck at tau -> 0)
                z = pm.Normal(f"{b}_u_z", 0.0, 1.0, dims="group")
                P[f"{b}_u"] = pm.Deterministic(f"{b}_u", z * tau_u, dims="group")

        if part == "outcomes":
            if not np.all(values["eta_known"]):
                raise ValueError("the outcomes part needs every run's efficiency measured (a single-device partner); "
                                 "build the whole model instead")
            log_eta_used = A["X"][:, ETA_COLUMN]
        else:
            log_eta_used = _curves(spec, P, A, part)
        if part == "curves":
            return model
        noise_dims = "strategy" if cfg["noise_by"] == "strategy" else None
        mu_E = block_mean(P, "E", A, log_eta_used, pt)
        sigma_E = _noise_scale("E_sigma", pri["sigma"], pri, noise_dims)
        nu_E = _student_nu("E", pri)
        sE = sigma_E[A["strategy_idx"]] if noise_dims else sigma_E
        pm.StudentT("log_energy", nu=nu_E, mu=mu_E, sigma=sE, observed=A["log_energy_obs"], dims="run")

        if lam is None:
            lam = pm.Normal("T_on_E_resid", 0.0, pri["time_on_energy_sigma"])
        mu_T = block_mean(P, "T", A, log_eta_used, pt) + lam * (A["log_energy_obs"] - mu_E)
        sigma_T = _noise_scale("T_sigma", pri["sigma"], pri, noise_dims)
        nu_T = _student_nu("T", pri)
        sT = sigma_T[A["strategy_idx"]] if noise_dims else sigma_T
        pm.StudentT("log_time", nu=nu_T, mu=mu_T, sigma=sT, observed=A["log_time_obs"], dims="run")
    return model


def _curves(spec: ModelSpec, P: dict, A: dict, part: str | None = None):
    """The speedup curves and their likelihood ``log_eta``; adds the curve parameters to ``P`` and returns the ln
    efficiency each run's energy and time use (measured where known, else the curves'); None for the curves part,
    which evaluates the curves on the runs that inform them only (its gradient 135 us -> 64-70 us on the reference
    table, docs/speed.md section 21)."""
    cfg, pri, coords = spec.config, spec.config["priors"], spec.coords
    partial, ncell = cfg["pooling"] == "partial", len(coords["cell"])
    parents = (*spec.cell_parents(), tuple(pri["cell_shares"])) if partial and cfg.get("crossed") else None
    curve_mu_prior = np.asarray([m for c in CURVES.values() for m in c.prior_mu])
    curve_mu = pm.Normal("curve_mu", mu=curve_mu_prior, sigma=pri["curve_mu_sigma"], dims="curve_param")
    if partial:
        P["curve_cell"] = _cell_effects("curve_cell", curve_mu[None, :], pri["tau_curve"], ("cell", "curve_param"), parents)
    else:
        P["curve_cell"] = pm.Deterministic("curve_cell", pt.tile(curve_mu[None, :], (ncell, 1)), dims=("cell", "curve_param"))
    if cfg.get("curve_covariates"):
        # covariates move the curve parameters named in config["curve_covariates_on"] (by
        # default the primary level of each curve: USL contention, TP ceiling)
        main = pm.Normal("curve_beta_main", 0.0, pri["curve_beta_sigma"], dims=("curve_coef", "curve_main"))
        if partial and cfg.get("curve_slopes_by_cell"):
            # each cell's curve responds to the covariates in its own way, pooled towards the population
            # (per cell, least squares of ln eta on the covariates reach 2-5x lower error than shared slopes)
            main = _cell_effects("curve_beta_cell", main[None], pri["tau_curve_beta"], ("cell", "curve_coef", "curve_main"),
                                 parents)
            full = pt.zeros((ncell, len(coords["curve_coef"]), len(coords["curve_param"])))
            full = pt.set_subtensor(full[:, :, spec.curve_moved_index], main)
            P["curve_beta"] = pm.Deterministic("curve_beta", full, dims=("cell", "curve_coef", "curve_param"))
        else:
            full = pt.zeros((len(coords["curve_coef"]), len(coords["curve_param"])))
            full = pt.set_subtensor(full[:, spec.curve_moved_index], main)
            P["curve_beta"] = pm.Deterministic("curve_beta", full, dims=("curve_coef", "curve_param"))
    eta_sigma = _noise_scale("eta_sigma", pri["eta_sigma"], pri, "strategy_multi")
    rows = A["curve_rows"]
    if part == "curves":  # nothing else uses the curves' efficiency
        on_rows = {**A, **{k: A[k][rows] for k in ("n_gpus", "curve", "Z", "cell_onehot", "cell_idx")}}
        mu = log_eta_from_curves(P, on_rows, pt)
    else:
        eta_curve = pm.Deterministic("log_eta_curve", log_eta_from_curves(P, A, pt), dims="run")
        mu = eta_curve[rows]
    eta_kw = {"mu": mu, "sigma": eta_sigma[A["strategy_idx"][rows] - 1], "observed": A["log_eta_curve_obs"],
              "dims": "curve_run"}
    eta_noise = cfg.get("eta_noise", "normal")
    if eta_noise not in ("normal", "student_t"):
        raise ValueError(f"config eta_noise must be 'normal' or 'student_t', got {eta_noise!r}")
    if eta_noise == "student_t":
        # heavy-tailed scatter of the measured efficiency about the curves (hierarchical.DEFAULT_CONFIG)
        pm.StudentT("log_eta", nu=_student_nu("eta", pri), **eta_kw)
    else:
        pm.Normal("log_eta", **eta_kw)
    if part == "curves":
        return None
    return A["eta_known"] * A["X"][:, ETA_COLUMN] + (1.0 - A["eta_known"]) * eta_curve
