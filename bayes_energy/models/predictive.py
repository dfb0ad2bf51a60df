r"""The posterior predictive in numpy: parameter draws to outcome draws, written once.

:mod:`bayes_energy.models.build` states the model for PyMC; this module is
its generative half for numpy, on the same law (:mod:`.law`) and the same
design arrays (:meth:`~bayes_energy.models.spec.ModelSpec.arrays`). Every
parameter array has a leading sample axis (one posterior or prior draw per
row; a single parameter set is a sample axis of length 1). Used by
:func:`bayes_energy.predict.predict_draws` (chunked, float32), by
:func:`bayes_energy.simulate.simulate_from_params` and by the validation
harness's exact predictive densities; ``tests/test_predictive.py`` checks it
against ``pm.sample_posterior_predictive`` on the built model.

For run :math:`r` with log efficiency :math:`\ln\eta_r` (measured, or from
its strategy's speedup curve plus the scatter
:math:`\sigma^\eta_s z^\eta_r` before the run):

.. math::

    \ln E_r = \mu^E_r + \sigma^E_s\,t^E_r,\qquad
    \ln T_r = \mu^T_r + \lambda\,\sigma^E_s t^E_r + \sigma^T_s\,t^T_r

with :math:`t^E \sim t_{\nu_E}`, :math:`t^T \sim t_{\nu_T}`,
:math:`z^\eta \sim t_{\nu_\eta}` (``eta_nu``; standard normal when the model has no ``eta_nu``,
``"eta_noise": "normal"``) and :math:`\lambda` = ``T_on_E_resid``.

Random variates come from a ``noise(kind, k)`` callable that returns
standard variates of shape (sample, k): ``"eta"``, ``"E"`` and ``"T"`` standard
Student-t with each draw's own degrees of freedom (``"eta"`` standard normal for a model
without ``eta_nu``).
:func:`rng_noise` makes one from a numpy generator; ``predict`` passes views
of pre-drawn pools instead.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from .law import block_mean, log_eta_from_curves

__all__ = ["student_t_logpdf", "curve_rows", "likelihood_terms", "pointwise_log_likelihood", "posterior_predictive_draws", "standard_variates", "scatter_rows", "eta_scale", "log_eta_draws", "noise_scale", "energy_time_draws", "energy_loc_scale", "rng_noise",
           "spec_shift", "PLACED"]

Noise = Callable[[str, int], np.ndarray]


def scatter_rows(A: Mapping) -> np.ndarray:
    """Positions of the runs whose efficiency comes from a speedup curve (multi-device, parallel strategy)."""
    return np.flatnonzero((A["curve"] > 0) & (A["n_gpus"] > 1))


def eta_scale(P: Mapping, A: Mapping, rows: np.ndarray) -> np.ndarray:
    """The speedup curves' scatter ``eta_sigma`` (sample, row) of the runs at ``rows`` (positions or a mask)."""
    return P["eta_sigma"][:, np.maximum(A["strategy_idx"][rows] - 1, 0)]


def log_eta_draws(P: Mapping, A: Mapping, noise: Noise | None = None, efficiency: np.ndarray | None = None) -> np.ndarray:
    """Log efficiency (sample, run): the curves, their scatter when ``noise`` is given, the measured value where known.

    Parameters
    ----------
    P, A : mapping
        Parameter draws (sample, ...) and design arrays.
    noise : callable, optional
        ``noise("eta", k)``: standard normal (sample, k) for the scatter of the
        ``k`` curve runs. None gives the curves' expected log efficiency.
    efficiency : array, optional
        Measured efficiency per run (nan where not measured); replaces the curve there.
    """
    log_eta = log_eta_from_curves(P, A, np)
    if noise is not None:
        rows = scatter_rows(A)
        if rows.size:
            log_eta[:, rows] += eta_scale(P, A, rows) * noise("eta", rows.size)
    if efficiency is not None:
        known = np.isfinite(efficiency)
        log_eta[:, known] = np.log(efficiency[known]).astype(log_eta.dtype)
    return log_eta


def noise_scale(P: Mapping, name: str, A: Mapping) -> np.ndarray:
    """Residual scale ``name`` (``"E_sigma"`` or ``"T_sigma"``) per (sample, run), or (sample, 1) when shared."""
    sig = P[name]
    return sig[:, A["strategy_idx"]] if sig.ndim == 2 else sig[:, None]


def energy_time_draws(P: Mapping, A: Mapping, log_eta: np.ndarray, centre: Mapping | None = None,
                      noise: Noise | None = None, log_energy_obs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Draws of ln energy (J) and ln time (s), (sample, run).

    Parameters
    ----------
    log_eta : array
        (sample, run), from :func:`log_eta_draws`.
    centre : mapping, optional
        ``log_energy`` and ``log_time`` centres to add (the model works centred).
    noise : callable, optional
        Residual noise (``"E"`` then ``"T"``); None gives the expected outcome.
    log_energy_obs : array, optional
        Measured centred ln energy per run: time is then drawn given it, as the
        model's likelihood does (``T_on_E_resid`` times the energy residual).
    """
    log_e = block_mean(P, "E", A, log_eta, np)
    log_t = block_mean(P, "T", A, log_eta, np)
    spec_shift(P, A, log_eta, log_e, log_t, centre)
    lam = P["T_on_E_resid"][:, None]
    if log_energy_obs is not None:
        log_t += lam * (log_energy_obs - log_e)
    if noise is not None:
        eps_e = noise("E", log_e.shape[1]) * noise_scale(P, "E_sigma", A)
        log_e += eps_e
        if log_energy_obs is None:
            log_t += lam * eps_e
        log_t += noise("T", log_t.shape[1]) * noise_scale(P, "T_sigma", A)
    if centre is not None:
        log_e += log_e.dtype.type(centre["log_energy"])
        log_t += log_t.dtype.type(centre["log_time"])
    return log_e, log_t


def energy_loc_scale(P: Mapping, A: Mapping, log_eta: np.ndarray, centre: Mapping) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Student-t location (ln J), scale (sample, run) and degrees of freedom (sample,) of each run's energy."""
    mu = block_mean(P, "E", A, log_eta, np)
    if PLACED in P:
        spec_shift(P, A, log_eta, mu, block_mean(P, "T", A, log_eta, np), centre)
    mu = mu + centre["log_energy"]
    return mu, np.broadcast_to(noise_scale(P, "E_sigma", A), mu.shape), P["E_nu"]


#: Key of the per-cell log peak rate ``ln(u F_donor)`` (sample, cell) in the draws of a posterior whose
#: unmeasured cells were placed by their GPU's specifications (NaN for every other cell);
#: ``place_work_{E,T}`` and ``place_stray_{E,T}`` hold the roofline ratios and the spread beyond them.
PLACED = "place_log_rate"


def spec_shift(P: Mapping, A: Mapping, log_eta: np.ndarray, log_e: np.ndarray, log_t: np.ndarray,
               centre: Mapping | None) -> None:
    r"""Move the expected ln energy and ln time of runs on spec-placed cells, in place.

    A placed cell carries its donor's law (:func:`bayes_energy.predict.place_by_specs`);
    ``log_e`` and ``log_t`` (centred, sample x run) are the donor's expectation for each
    run. The roofline with a fixed per-step overhead then splits each run's donor time
    into a work-bound share :math:`f`, which the new GPU does at its spec-sheet rate, and
    the rest (kernel launches, host work), which it does not speed up. Parallel losses
    are the law's own efficiency term (``log_eta``: measured, or from the speedup
    curves), so the share is taken of the single-device equivalent time
    :math:`n\,\eta\,T^d`:

    .. math::

        f_r = \min\Big(1, \frac{6 N_r D_r}{n_r\,\eta_r\,T^{d}_r\, u\, F_d}\Big), \qquad
        \Delta\ln T_r = \ln\big(f_r e^{\lambda_T \Delta h_T} + 1 - f_r\big) + r_T,

    and the same for energy with :math:`\lambda_E \Delta h_E` and :math:`r_E`. :math:`6ND`
    is the training FLOP count (parameters x tokens), :math:`n` the device count,
    :math:`F_d` the donor GPU's peak dense 16-bit FLOP/s and :math:`u` the fraction of
    peak that a fully compute-bound training step reaches (``priors.hw_peak_utilisation``).
    A run near the donor's compute roof moves by the whole spec ratio; a small model
    that is overhead-bound on the donor barely moves.
    """
    if PLACED not in P:
        return
    cells = A["cell_idx"]
    rate = P[PLACED]
    rows = np.flatnonzero(np.isfinite(rate[0, np.minimum(cells, rate.shape[1] - 1)]) & (cells < rate.shape[1]))
    if not rows.size:
        return
    if centre is None:
        raise ValueError("runs on spec-placed hardware need the centres (absolute time) to split compute from overhead")
    c = cells[rows]
    log_time = log_t[:, rows] + log_t.dtype.type(centre["log_time"])
    log_f = A["log_train_flop"][rows] - np.log(A["n_gpus"][rows]) - log_eta[:, rows] - log_time - rate[:, c]
    f = np.exp(np.minimum(log_f, 0.0))
    for b, out in (("E", log_e), ("T", log_t)):
        moved = np.log(f * np.exp(P[f"place_work_{b}"][:, c]) + 1.0 - f) + P[f"place_stray_{b}"][:, c]
        out[:, rows] += moved.astype(out.dtype, copy=False)


def student_t_logpdf(y: np.ndarray, nu: np.ndarray | None, loc: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """Log density of a Student-t (``nu`` None: normal), PyMC's formula, broadcast over (sample, run)."""
    from scipy.special import gammaln

    z = (y - loc) / scale
    if nu is None:
        return -0.5 * z**2 - np.log(scale) - 0.5 * np.log(2.0 * np.pi)
    nu = np.asarray(nu)[..., None]
    return (gammaln((nu + 1.0) / 2.0) - gammaln(nu / 2.0) - 0.5 * np.log(np.pi * nu) - np.log(scale)
            - (nu + 1.0) / 2.0 * np.log1p(z**2 / nu))


def curve_rows(A: Mapping) -> np.ndarray:
    """Positions of the runs whose measured efficiency informs the speedup curves (``log_eta``'s rows in the model)."""
    return np.flatnonzero(np.isfinite(A["log_eta_obs"]) & (A["curve"] > 0) & (A["n_gpus"] > 1))


def likelihood_terms(P: Mapping, A: Mapping) -> dict[str, tuple]:
    """Each observed variable's ``(y, loc, scale, noise kind)`` (loc and scale (sample, ...)), as the model states them.

    ``log_eta`` on the curve rows about the curves; ``log_energy`` given the measured efficiencies;
    ``log_time`` given those and the measured energy. :func:`pointwise_log_likelihood` and
    :func:`posterior_predictive_draws` read them, so one pass over the draws serves both.
    """
    rows = curve_rows(A)
    curves = log_eta_from_curves(P, A, np)
    log_eta = np.where(np.isfinite(A["log_eta_obs"]), A["log_eta_obs"], curves)
    log_e, log_t = energy_time_draws(P, A, log_eta, log_energy_obs=A["log_energy"])
    return {
        "log_eta": (A["log_eta_obs"][rows], curves[:, rows], eta_scale(P, A, rows), "eta"),
        "log_energy": (A["log_energy"], log_e, noise_scale(P, "E_sigma", A), "E"),
        "log_time": (A["log_time"], log_t, noise_scale(P, "T_sigma", A), "T"),
    }


def _nu(P: Mapping, kind: str):
    """Degrees of freedom of noise ``kind`` (None: normal, for a model without ``eta_nu``)."""
    return P.get("eta_nu") if kind == "eta" else P[f"{kind}_nu"]


def pointwise_log_likelihood(P: Mapping, terms: Mapping) -> dict[str, np.ndarray]:
    """The model's pointwise log-likelihood (sample, ...) of each term of :func:`likelihood_terms`.

    The densities :func:`bayes_energy.models.build.build_model` states, in numpy: what
    ``pm.compute_log_likelihood`` returns (``tests/test_predictive.py`` checks them equal), without
    compiling a PyTensor function for them (15 s of a cold first fit, docs/speed.md section 6).
    """
    return {k: student_t_logpdf(y, _nu(P, kind), loc, scale) for k, (y, loc, scale, kind) in terms.items()}


def posterior_predictive_draws(P: Mapping, terms: Mapping, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """One replicate (sample, ...) of each term of :func:`likelihood_terms` per draw, as
    ``pm.sample_posterior_predictive`` draws them from the built model."""
    return {k: loc + scale * standard_variates(P, kind, rng, loc.shape[1]) for k, (_, loc, scale, kind) in terms.items()}


def standard_variates(P: Mapping, kind: str, rng: np.random.Generator, k: int, dtype=np.float64) -> np.ndarray:
    """Standard variates (sample, k) of noise ``kind``: Student-t with each draw's ``<kind>_nu``.

    ``"eta"`` is standard normal for a model without ``eta_nu`` (``"eta_noise": "normal"``);
    ``"E"`` and ``"T"`` always have their degrees of freedom.
    """
    S = P["E_nu"].shape[0]
    if kind == "eta" and "eta_nu" not in P:
        return rng.standard_normal((S, k), dtype=dtype)
    return rng.standard_t(np.broadcast_to(P[f"{kind}_nu"][:, None], (S, k))).astype(dtype, copy=False)


def rng_noise(P: Mapping, rng: np.random.Generator) -> Noise:
    """A ``noise(kind, k)`` source drawing fresh variates from ``rng`` for each call."""
    def noise(kind: str, k: int) -> np.ndarray:
        return standard_variates(P, kind, rng, k)

    return noise
