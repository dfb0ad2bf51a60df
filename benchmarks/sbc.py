"""Simulation-based calibration (SBC) of the hierarchical model.

Each replication draws one parameter set from the prior of the model built on
a small simulated design (:func:`bayes_energy.simulate.prior_draws`, i.e.
``pm.sample_prior_predictive``), simulates a sweep table with the model's own
law (:func:`bayes_energy.simulate.simulate_from_params`), refits the model
(compiled once with nutpie, refitted with ``with_data``) and records the rank
of the true value among thinned posterior draws. If the sampler and the
model code agree, the ranks are uniform (Talts et al. 2018).

Outputs in ``benchmarks/results/``: ``sbc_ranks.csv`` (one row per
replication and parameter), ``sbc_summary.csv`` (chi-square uniformity test
on 10 bins per parameter, mean rank, divergences) and ``sbc_ranks.png`` (rank
histograms with the 99 % band of a uniform histogram).

Command::

    .venv/bin/python benchmarks/sbc.py --reps 100        # ~7 min on 2 cores (tune 400, as the package)
    .venv/bin/python benchmarks/sbc.py --quick           # 5 replications (CI smoke)
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

RESULTS = Path(__file__).resolve().parent / "results"

#: Scalar parameters ranked: (variable, index tuple or None, label).
PARAMS = (
    ("E_mu", (0,), "E_mu[intercept]"),
    ("E_mu", (1,), "E_mu[log_compute] (alpha_C)"),
    ("E_mu", (2,), "E_mu[log_memory] (alpha_M)"),
    ("E_mu", (3,), "E_mu[log_eta] (alpha_eta)"),
    ("E_mu", (5,), "E_mu[log_seq_len]"),
    ("E_beta", (0, 1), "E_beta[cell0, log_compute]"),
    ("E_beta", (1, 3), "E_beta[cell1, log_eta]"),
    ("E_psi", (1,), "E_psi[fsdp]"),
    ("E_psi_cell", (0, 1), "E_psi_cell[cell0, fsdp]"),
    ("E_sigma", (0,), "E_sigma[single]"),
    ("E_sigma", (1,), "E_sigma[fsdp]"),
    ("E_nu", None, "E_nu"),
    ("curve_mu", (0,), "curve_mu[usl_sigma]"),
    ("curve_cell", (0, 0), "curve_cell[cell0, usl_sigma]"),
    ("eta_sigma", (0,), "eta_sigma[fsdp]"),
    ("eta_nu", None, "eta_nu"),
    ("T_mu", (1,), "T_mu[log_compute]"),
    ("T_on_E_resid", None, "T_on_E_resid"),
    ("T_sigma", (1,), "T_sigma[fsdp]"),
)
#: Slopes per strategy (config ``strategy_slopes``) checked too, by coefficient name, where the model has them.
SLOPE_PARAMS = ("fsdp:log_compute", "fsdp:log_n_gpus")


def _scalar(arr: np.ndarray, idx) -> np.ndarray:
    """Select ``idx`` from the trailing axes of ``arr`` (leading sample axis kept)."""
    return arr if idx is None else arr[(slice(None),) + tuple(idx)]


def sbc_design(n_configs: int = 4, seed: int = 0) -> pd.DataFrame:
    from bayes_energy.simulate import simulated_design

    return simulated_design(n_configs=n_configs, n_gpus=(2, 4, 8), seed=seed)


def run(reps: int = 100, draws: int = 200, tune: int | None = None, chains: int = 2, thin: int = 4, seed: int = 2026,
        n_configs: int = 4, model: str = "hierarchical", out: Path | None = None, log=print,
        target_accept: float | None = None, eigval_cutoff: float | None = None,
        laplace: bool | None = None) -> pd.DataFrame:
    """Run ``reps`` SBC replications; write the outputs; return the summary table.

    Each replication is sampled as a fit is: in its two parts when every simulated run's efficiency is measured
    (``bayes_energy.models.parts``; ``draws`` then count after the curves' thinning), else whole. ``tune``
    defaults to the package's own tuning length (``bayes_energy.models.TUNE``): sampled whole, at 200 a funnel that
    400 shows stayed hidden (docs/speed.md section 8); in parts, after 200 the ranks of three parameters were not
    uniform (section 20). ``target_accept`` overrides the package's NUTS target acceptance (``nuts_settings``),
    ``eigval_cutoff`` nutpie's low-rank eigenvalue cutoff (``EIGVAL_CUTOFF``), ``laplace`` whether chains sample
    coordinates whitened at the mode (``LAPLACE``).
    """
    from scipy.stats import chisquare

    from bayes_energy.models import TUNE
    from bayes_energy.models.build import build_model, model_data
    from bayes_energy.models.cache import compile_nutpie
    from bayes_energy.models.io import sample_array
    from bayes_energy.models.parts import compile_parts, factorises, run_parts
    from bayes_energy.models.parts import with_data as parts_with_data
    from bayes_energy.models.sample import kept_vars, run_nutpie
    from bayes_energy.schema import SchemaError
    from bayes_energy.simulate import (
        design_spec,
        placeholder_table,
        prior_draws,
        simulate_from_params,
    )

    tune = TUNE if tune is None else tune
    t_start = time.perf_counter()
    design = sbc_design(n_configs, seed)
    spec = design_spec(design, model)
    parts = compile_parts(spec, placeholder_table(design))
    whole = []  # compiled on the first table that needs it

    def compiled_whole():
        if not whole:
            pm_model = build_model(spec, placeholder_table(design))
            whole.append(compile_nutpie(pm_model, var_names=kept_vars(pm_model)))
        return whole[0]

    log(f"compiled {model} on a {len(design)}-row design in {time.perf_counter() - t_start:.0f} s")
    # more prior draws than replications: a draw whose simulated table fails the schema's physical ranges
    # (e.g. a run of 1e9 s) is skipped. Rejecting on the data alone keeps the ranks uniform, because
    # p(theta | y, y in A) = p(theta | y) for every accepted y (Modrak et al. 2023, section on rejection).
    prior = prior_draws(design, spec, draws=reps + reps // 4 + 5, seed=seed)
    names = list(prior.data_vars)
    coefs = spec.coords["coef"]
    params = PARAMS + tuple(("E_mu", (coefs.index(c),), f"E_mu[{c}]") for c in SLOPE_PARAMS if c in coefs)
    rng = np.random.default_rng(seed)
    records = []
    rejected = 0
    in_parts = 0

    def accepted():
        """(truth, simulated table) per prior draw whose table passes the schema's physical ranges."""
        nonlocal rejected
        for j in range(prior.sizes["draw"]):
            truth = {k: prior[k].values[0, j] for k in names}
            try:
                yield truth, simulate_from_params(design, spec, truth, seed=int(rng.integers(2**31)))
            except SchemaError as err:
                rejected += 1
                log(f"prior draw {j} skipped: {err}")
        raise RuntimeError(f"{rejected} of {prior.sizes['draw']} prior draws gave tables outside the physical ranges")

    for r, (truth, table) in zip(range(reps), accepted()):
        kw = {"draws": draws, "chains": chains, "seed": int(rng.integers(2**31)), "target_accept": target_accept,
              "eigval_cutoff": eigval_cutoff, "laplace": laplace}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if factorises(spec, table):
                idata = run_parts(parts_with_data(parts, spec, table), tune=tune, **kw)
            else:
                compiled = compiled_whole()
                data = {k: v for k, v in model_data(spec, table).items() if k in compiled.shared_data}
                idata = run_nutpie(compiled.with_data(**data), tune=tune, **kw)
        in_parts += "sampled_in_parts" in idata.posterior.attrs
        post = idata.posterior
        div = int(idata.sample_stats["diverging"].sum())
        for var, idx, label in params:
            if var not in post:
                continue
            s = sample_array(post[var])[::thin]
            draws_v = _scalar(s, idx)
            true_v = float(truth[var] if idx is None else np.asarray(truth[var])[tuple(idx)])
            rank = int(np.sum(draws_v < true_v))
            records.append({"rep": r, "parameter": label, "rank": rank, "n_draws": len(draws_v),
                            "truth": true_v, "divergences": div})
        if (r + 1) % 10 == 0 or r + 1 == reps:
            log(f"replication {r + 1}/{reps} ({time.perf_counter() - t_start:.0f} s)")
    ranks = pd.DataFrame.from_records(records)
    n_bins = 10 if reps >= 50 else max(2, reps // 5)
    rows = []
    for label, g in ranks.groupby("parameter", sort=False):
        L = int(g["n_draws"].iloc[0])
        counts = np.histogram(g["rank"], bins=n_bins, range=(0, L + 1))[0]
        stat, p = chisquare(counts)
        rows.append({"parameter": label, "reps": len(g), "mean_rank_frac": float(np.mean(g["rank"] / L)),
                     "chi2": float(stat), "bins": n_bins, "p_value": float(p)})
    summary = pd.DataFrame(rows)
    summary["divergent_reps"] = int((ranks.groupby("rep")["divergences"].first() > 0).sum())
    summary["rejected_prior_draws"] = rejected
    summary["reps_sampled_in_parts"] = in_parts
    wall = time.perf_counter() - t_start
    out = Path(out) if out is not None else RESULTS
    out.mkdir(parents=True, exist_ok=True)
    ranks.to_csv(out / "sbc_ranks.csv", index=False)
    summary.to_csv(out / "sbc_summary.csv", index=False, float_format="%.4g")
    _plot(ranks, n_bins, out / "sbc_ranks.png", f"SBC, {model} model, {reps} replications, {len(design)}-row design")
    log(f"wrote {out / 'sbc_summary.csv'} ({wall:.0f} s)")
    return summary


def _plot(ranks: pd.DataFrame, n_bins: int, path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from scipy.stats import binom

    labels = list(dict.fromkeys(ranks["parameter"]))
    ncol = 6
    nrow = int(np.ceil(len(labels) / ncol))
    fig, axes = plt.subplots(nrow, ncol, figsize=(3 * ncol, 2.4 * nrow), squeeze=False)
    for ax, label in zip(axes.ravel(), labels):
        g = ranks[ranks["parameter"] == label]
        L = int(g["n_draws"].iloc[0])
        ax.hist(g["rank"], bins=n_bins, range=(0, L + 1), color="#4c72b0", edgecolor="white")
        n = len(g)
        lo, hi = binom.ppf([0.005, 0.995], n, 1 / n_bins)
        ax.axhspan(lo, hi, color="grey", alpha=0.25)
        ax.set_title(label, fontsize=8)
        ax.set_yticks([])
    for ax in axes.ravel()[len(labels):]:
        ax.axis("off")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=100)
    p.add_argument("--draws", type=int, default=200)
    p.add_argument("--tune", type=int, default=None, help="tuning steps (default: the package's, bayes_energy.models.TUNE)")
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--thin", type=int, default=4)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--model", default="hierarchical")
    p.add_argument("--quick", action="store_true", help="5 replications, 100 draws (smoke test)")
    p.add_argument("--out", default=None)
    p.add_argument("--target-accept", type=float, default=None,
                   help="NUTS target acceptance (default: the package's, bayes_energy.models.sample.TARGET_ACCEPT)")
    p.add_argument("--eigval-cutoff", type=float, default=None,
                   help="nutpie's low-rank eigenvalue cutoff (default: the package's, bayes_energy.models.sample.EIGVAL_CUTOFF)")
    p.add_argument("--laplace", action=argparse.BooleanOptionalAction, default=None,
                   help="sample on coordinates whitened at the mode (default: the package's, "
                        "bayes_energy.models.sample.LAPLACE)")
    a = p.parse_args(argv)
    if a.quick:
        a.reps, a.draws, a.tune, a.thin = min(a.reps, 5), 100, 100, 2
    warnings.filterwarnings("ignore", category=FutureWarning)
    run(reps=a.reps, draws=a.draws, tune=a.tune, chains=a.chains, thin=a.thin, seed=a.seed, model=a.model,
        out=a.out, log=lambda s: print(s, flush=True), target_accept=a.target_accept, eigval_cutoff=a.eigval_cutoff,
        laplace=a.laplace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
