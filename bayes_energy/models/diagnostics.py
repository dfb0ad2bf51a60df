"""Convergence and predictive diagnostics of a fit, by ArviZ.

Thresholds: R-hat <= 1.01, bulk and tail ESS >= 400, no divergences, BFMI >= 0.3.
"""

from __future__ import annotations

import warnings

import arviz as az
import numpy as np
import pandas as pd

from .. import DEFAULT_PROB

__all__ = ["THRESHOLDS", "diagnose", "max_rhat", "minor_mode_chains", "summarize", "summary_vars"]

THRESHOLDS = {"max_rhat": 1.01, "min_ess_bulk": 400, "min_ess_tail": 400, "divergences": 0, "min_bfmi": 0.3}


def summary_vars(idata: az.InferenceData, include_z: bool = False) -> list[str]:
    """Posterior variables worth a summary row (non-centred z's only on request)."""
    names = [v for v in idata.posterior.data_vars if v not in ("log_eta_curve",)]
    return names if include_z else [v for v in names if not v.endswith("_z")]


def summarize(idata: az.InferenceData, prob: float = DEFAULT_PROB) -> pd.DataFrame:
    """``az.summary`` of the interpretable parameters, one row per parameter.

    Intervals are highest-density intervals of probability ``prob`` (the
    package default, 0.9: columns ``hdi_5%`` and ``hdi_95%``).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = az.summary(idata, var_names=summary_vars(idata), hdi_prob=prob)
    return s.rename_axis("parameter")


def max_rhat(draws) -> float:
    """Largest rank-normalised split R-hat (bulk and folded) over every scalar: ``arviz.rhat``'s formula, all at once.

    ``draws``: a posterior ``xarray.Dataset`` (every variable, each of its scalars) or an array
    ``(chain, draw, k)``. Scalars with no R-hat (constants, NaN draws) are skipped, as ArviZ gives them NaN. ArviZ
    loops over the scalars: 0.55 s for a hierarchical split fit's 568, against 0.33 s here (``docs/speed.md``,
    section 19); ``tests/test_diagnostics.py`` checks the two agree.
    """
    # ndtri: the standard normal quantile, norm.ppf's kernel without its argument checks
    from scipy import stats
    from scipy.special import ndtri

    if hasattr(draws, "data_vars"):
        x = np.concatenate([v.values.reshape(v.shape[0], v.shape[1], -1).astype(float)
                            for v in draws.data_vars.values()], axis=2)
    else:
        x = np.asarray(draws, dtype=float)
    half = x.shape[1] // 2
    split = np.concatenate([x[:, :half], x[:, -half:]], axis=0)  # (2 * chains, half, k)

    def rhat(a):
        n = a.shape[1]
        flat = a.reshape(-1, a.shape[2])
        z = ndtri((stats.rankdata(flat, axis=0) - 0.375) / (flat.shape[0] + 0.25)).reshape(a.shape)
        between = n * np.var(z.mean(axis=1), axis=0, ddof=1)
        within = np.var(z, axis=1, ddof=1).mean(axis=0)
        return np.sqrt((between / within + n - 1) / n)

    with np.errstate(all="ignore"):
        folded = np.abs(split - np.median(split.reshape(-1, split.shape[2]), axis=0))
        r = np.maximum(rhat(split), rhat(folded))
    r = r[np.isfinite(r)]
    return float(r.max()) if r.size else float("nan")


#: A chain sits in another mode when its mean log density is below the best chain's by more than this many
#: standard errors of the two means (and by more than ``MINOR_MODE_MIN_GAP`` units of log density).
MINOR_MODE_SE = 4.0
MINOR_MODE_MIN_GAP = 2.0


def minor_mode_chains(idata: az.InferenceData) -> dict | None:
    """Chains whose mean log density sits clearly below the best chain's: stuck in a minor mode.

    Reads the sampler's log density (``sample_stats.logp``, nutpie; ``lp``, PyMC). A chain is
    flagged when its mean is lower than the best chain's by more than :data:`MINOR_MODE_SE`
    standard errors of the difference (each mean's error from its own ESS) and more than
    :data:`MINOR_MODE_MIN_GAP`. Chains that mix have means within a few standard errors;
    a chain caught in a lower mode for the whole run does not (``docs/speed.md`` §9).

    Returns
    -------
    dict or None
        ``chain_mean_logp`` (list, one per chain), ``best`` (index) and ``minor``
        (indices of flagged chains); None when the sampler stored no log density.
    """
    stats = idata.sample_stats if "sample_stats" in idata.groups() else None
    name = next((n for n in ("logp", "lp") if stats is not None and n in stats), None)
    if name is None:
        return None
    lp = stats[name].transpose("chain", "draw").to_numpy()
    mean = lp.mean(axis=1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ess = np.array([float(az.ess(np.asarray(c)[None, :])) for c in lp])
    se = lp.std(axis=1) / np.sqrt(np.maximum(ess, 1.0))
    best = int(np.argmax(mean))
    gap = mean[best] - mean
    minor = [c for c in range(len(mean)) if c != best and gap[c] > max(MINOR_MODE_MIN_GAP,
                                                                        MINOR_MODE_SE * np.hypot(se[c], se[best]))]
    return {"chain_mean_logp": [float(m) for m in mean], "best": best, "minor": minor}


def diagnose(idata: az.InferenceData, loo_var: str = "log_energy", summary: pd.DataFrame | None = None) -> dict:
    """Diagnostics as a flat dict (written to ``diagnostics.json``).

    Keys: ``divergences``, ``max_rhat``, ``min_ess_bulk``, ``min_ess_tail``,
    ``min_bfmi``, ``elpd_loo``, ``elpd_loo_se``, ``p_loo``, ``max_pareto_k``,
    ``n_pareto_k_gt_0_7``, ``passed``, ``failed`` (the failing checks) and
    ``thresholds``; with the sampler's log density stored, ``chain_mean_logp`` and
    ``minor_mode_chains`` (:func:`minor_mode_chains`), which a failing R-hat's message names.

    ``summary``: the :func:`summarize` table of the same fit, when the caller has one; its R-hat and
    ESS columns are reused (the same ``az.summary`` numbers) unless the fit has non-centred ``_z``
    variables, which :func:`summarize` leaves out and the checks include.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        checked = summary_vars(idata, include_z=True)
        if summary is None or checked != summary_vars(idata):
            summary = az.summary(idata, var_names=checked, kind="diagnostics")
        s = summary[np.isfinite(summary["r_hat"])]  # constants (reference levels) have no R-hat
        energy = idata.sample_stats["energy"]
        # a fit sampled in parts (models.parts) has one Hamiltonian, and one E-BFMI, per part
        bfmi = (az.bfmi(idata) if "part" not in energy.dims
                else [az.bfmi(energy.sel(part=p).transpose("chain", "draw").values) for p in energy["part"].values])
    out = {
        "divergences": int(idata.sample_stats["diverging"].sum()),
        "max_rhat": float(s["r_hat"].max()),
        "min_ess_bulk": float(s["ess_bulk"].min()),
        "min_ess_tail": float(s["ess_tail"].min()),
        "min_bfmi": float(np.min(bfmi)),
        "n_draws": int(idata.posterior.sizes["draw"]),
        "n_chains": int(idata.posterior.sizes["chain"]),
    }
    if "log_likelihood" in idata.groups() and loo_var in idata.log_likelihood:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loo = az.loo(idata, var_name=loo_var, pointwise=True)
        k = np.asarray(loo.pareto_k)
        out.update({
            "elpd_loo": float(loo.elpd_loo), "elpd_loo_se": float(loo.se), "p_loo": float(loo.p_loo),
            "max_pareto_k": float(np.max(k)), "n_pareto_k_gt_0_7": int(np.sum(k > 0.7)),
        })
    modes = minor_mode_chains(idata)
    if modes is not None:
        out["chain_mean_logp"] = modes["chain_mean_logp"]
        out["minor_mode_chains"] = modes["minor"]
    t = THRESHOLDS
    failed = []
    if out["divergences"] > t["divergences"]:
        failed.append(f"{out['divergences']} divergences (want 0)")
    if out["max_rhat"] > t["max_rhat"]:
        msg = f"max R-hat {out['max_rhat']:.3f} > {t['max_rhat']}"
        if modes is not None and modes["minor"]:
            best, lp = modes["best"], modes["chain_mean_logp"]
            which = ", ".join(f"chain {c} by {lp[best] - lp[c]:.1f}" for c in modes["minor"])
            msg += (f" (mean log density below chain {best}'s: {which}; a minor mode that "
                    f"{'this chain' if len(modes['minor']) == 1 else 'these chains'} never left: "
                    "refit with another seed or more chains)")
        failed.append(msg)
    if out["min_ess_bulk"] < t["min_ess_bulk"]:
        failed.append(f"min bulk ESS {out['min_ess_bulk']:.0f} < {t['min_ess_bulk']}")
    if out["min_ess_tail"] < t["min_ess_tail"]:
        failed.append(f"min tail ESS {out['min_ess_tail']:.0f} < {t['min_ess_tail']}")
    if out["min_bfmi"] < t["min_bfmi"]:
        failed.append(f"min BFMI {out['min_bfmi']:.2f} < {t['min_bfmi']}")
    out["passed"] = not failed
    out["failed"] = failed
    out["thresholds"] = dict(t)
    return out
