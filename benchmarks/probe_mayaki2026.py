"""Probe, then predict, on the Mayaki (2026) measurements: does one measured run of a family sharpen the rest?

Protocol: grouped 70/30 splits by configuration family (``grouped_splits`` of
``validate_mayaki2026.py``, seed 2026, all 629 rows, every strategy). One
hierarchical fit per split (one nutpie compile, refitted with ``with_data``:
``BayesRunner``). In each held-out family with two runs or more, one run is
the probe and the family's other runs are predicted. Two probe choices:

* ``single``: the family's single-device run (the smallest token count when
  it has none), as the issue asks; the targets are its multi-device runs;
* ``parallel``: the family's parallel run on the fewest devices (the
  smallest token count among them); the targets are its other parallel runs
  (what a user who probes the strategy they will use gets).

Methods, on the same targets:

* ``no_probe``: today's pre-run prediction (``probe_update``'s "before"
  columns, the model's posterior predictive);
* ``probe``: :func:`bayes_energy.probe.probe_update` ("after");
* ``linear``: Carbontracker's extrapolation, energy per token of the probe
  times the target's tokens (strategy and device count ignored). Its
  interval: the 5 % and 95 % quantiles of ln(true / linear) over the
  *training* families with the same probe rule (a split-conformal-style
  band; Carbontracker itself gives none).

Metrics on held-out targets, ln kWh: RMSE of the median (``linear``: of the
extrapolation), 90 % coverage and ``hw90``, the median multiplicative
half-width exp((q95 - q5) / 2). Per split, then the median over splits and
the value over all targets pooled.

``--refit-check`` also compares, on one held-out family, the update of a
posterior fitted with the model's configuration-family effect
(``group_effects``) with a refit of that model with the probe row added.

Command::

    nice -n 10 .venv/bin/python benchmarks/probe_mayaki2026.py --splits 8
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
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _tables import RESULTS, markdown  # noqa: E402
from validate_mayaki2026 import BayesRunner, grouped_splits  # noqa: E402

from bayes_energy.datasets import load_mayaki2026
from bayes_energy.schema import KWH_TO_J  # noqa: E402

PROBES = ("single", "parallel")
METHODS = ("no_probe", "probe", "linear")


def probe_and_targets(fam: pd.DataFrame, rule: str) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    """The probe row and the target rows of one family under a probe rule (None if the family has too few runs)."""
    fam = fam.sort_values(["n_gpus", "tokens"])
    if rule == "single":
        single = fam[fam["strategy"] == "single"]
        probe = single.iloc[:1] if len(single) else fam.sort_values("tokens").iloc[:1]
        targets = fam.drop(index=probe.index)
    else:
        par = fam[fam["strategy"] != "single"]
        if len(par) < 2:
            return None
        probe = par.iloc[:1]
        targets = par.drop(index=probe.index)
    if targets.empty:
        return None
    return probe, targets


def linear_log_kwh(probe: pd.DataFrame, targets: pd.DataFrame) -> np.ndarray:
    """Carbontracker: energy per token of the probe x tokens of the target, ln kWh."""
    per_token = float(probe["energy_j"].iloc[0] / probe["tokens"].iloc[0])
    return np.log(per_token * targets["tokens"].to_numpy(float) / KWH_TO_J)


def linear_band(train: pd.DataFrame, rule: str) -> tuple[float, float]:
    """5 % and 95 % quantiles of ln(true / linear) over the training families."""
    res = []
    for _, fam in train.groupby("group"):
        pt = probe_and_targets(fam, rule)
        if pt is None:
            continue
        p, t = pt
        res.append(np.log(t["energy_j"].to_numpy(float) / KWH_TO_J) - linear_log_kwh(p, t))
    r = np.concatenate(res)
    return float(np.quantile(r, 0.05)), float(np.quantile(r, 0.95))


def evaluate_split(idata, train: pd.DataFrame, test: pd.DataFrame, rule: str, seed: int) -> pd.DataFrame:
    """One row per (target, method) of the held-out families."""
    from bayes_energy.probe import probe_update

    band = linear_band(train, rule)
    recs = []
    for g, fam in test.groupby("group"):
        pt = probe_and_targets(fam, rule)
        if pt is None:
            continue
        probe, targets = pt
        # the probe as a user has it: measured energy and time, no efficiency column
        probe = probe.drop(columns=["speedup", "efficiency"])
        res = probe_update(idata, probe, targets, seed=seed)
        y = np.log(targets["energy_j"].to_numpy(float) / KWH_TO_J)
        lin = linear_log_kwh(probe, targets)
        for method in METHODS:
            if method == "linear":
                centre, lo, hi = lin, lin + band[0], lin + band[1]
            else:
                d = res.draws["log_energy_j_" + ("before" if method == "no_probe" else "after")] - np.log(KWH_TO_J)
                lo, centre, hi = np.quantile(d, [0.05, 0.5, 0.95], axis=0)
            for k in range(len(y)):
                recs.append({"group": g, "strategy": targets["strategy"].iloc[k], "n_gpus": int(targets["n_gpus"].iloc[k]),
                             "method": method, "err": centre[k] - y[k], "covered": bool(lo[k] <= y[k] <= hi[k]),
                             "hw90": float(np.exp((hi[k] - lo[k]) / 2)),
                             "probe_resid": float(np.log(res.offset["energy_ratio"]))})
    return pd.DataFrame(recs)


def probe_ceiling(rows: pd.DataFrame) -> pd.DataFrame:
    """How much a family offset could gain at best: the probe's residual against the targets' residuals.

    ``corr``: correlation of the probe window's ln residual against the law
    (the raw ``energy_ratio``) with the targets' no-probe residuals;
    ``oracle_ratio``: RMSE after the best single slope on the probe's
    residual, *fitted on the held-out targets themselves*, over the no-probe
    RMSE (a bound for any update that moves a family by a multiple of what
    its probe showed; not a method).
    """
    out = []
    for rule, g in rows[rows["method"] == "no_probe"].groupby("probe"):
        resid, pr = -g["err"].to_numpy(), g["probe_resid"].to_numpy()
        slope = float(np.sum(pr * resid) / np.sum(pr**2))
        out.append({"probe": rule, "corr": float(np.corrcoef(pr, resid)[0, 1]), "oracle_slope": slope,
                    "oracle_ratio": float(np.sqrt(np.mean((resid - slope * pr) ** 2)) / np.sqrt(np.mean(resid**2)))})
    return pd.DataFrame(out)


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    def agg(d):
        return pd.Series({"rmse": float(np.sqrt(np.mean(d["err"] ** 2))), "cov90": d["covered"].mean(),
                          "hw90": d["hw90"].median(), "n": len(d)})

    per_split = rows.groupby(["probe", "method", "split"]).apply(agg, include_groups=False).reset_index()
    med = per_split.groupby(["probe", "method"])[["rmse", "cov90", "hw90"]].median().add_suffix("_median_split")
    pooled = rows.groupby(["probe", "method"]).apply(agg, include_groups=False)
    out = pooled.join(med).reset_index()
    base = out[out["method"] == "no_probe"].set_index("probe")["rmse"]
    out["rmse_vs_no_probe"] = out["rmse"] / out["probe"].map(base)
    order = {m: i for i, m in enumerate(METHODS)}
    return out.sort_values(["probe", "method"], key=lambda c: c.map(order) if c.name == "method" else c)


def refit_check(df: pd.DataFrame, seed: int, draws: int, tune: int, log=print) -> dict:
    """Update vs refit with the probe row added, on one held-out family, model with ``group_effects``."""
    from bayes_energy.models.sample import fit
    from bayes_energy.predict import predict_draws
    from bayes_energy.probe import probe_update

    tr, te = grouped_splits(df, 1, seed)[0]
    train, test = df.iloc[tr].reset_index(drop=True), df.iloc[te].reset_index(drop=True)
    for g, fam in test.groupby("group"):
        pt = probe_and_targets(fam, "parallel")
        if pt is not None and len(pt[1]) >= 2:
            break
    probe, targets = pt
    cfg = {"group_effects": True}
    levels = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t0 = time.perf_counter()
        base = fit(train, config=cfg, draws=draws, tune=tune, chains=2, seed=seed, progress=False, predictive=False)
        upd = probe_update(base, probe.drop(columns=["speedup", "efficiency"]), targets, seed=seed)
        both = pd.concat([train, probe], ignore_index=True)
        refit = fit(both, config=cfg, levels=levels, draws=draws, tune=tune, chains=2, seed=seed, progress=False,
                    predictive=False)
        d = predict_draws(refit, targets, mode="pre", seed=seed)["log_energy_j"]
        wall = time.perf_counter() - t0
    lo, med, hi = np.quantile(d, [0.05, 0.5, 0.95], axis=0)
    a = upd.table
    out = pd.DataFrame({
        "strategy": targets["strategy"].to_numpy(), "n_gpus": targets["n_gpus"].to_numpy(),
        "true_kwh": targets["energy_j"].to_numpy(float) / KWH_TO_J,
        "before_median": a["energy_kwh_median_before"].to_numpy(), "update_median": a["energy_kwh_median_after"].to_numpy(),
        "refit_median": np.exp(med) / KWH_TO_J,
        "update_lo": a["energy_kwh_lo_after"].to_numpy(), "update_hi": a["energy_kwh_hi_after"].to_numpy(),
        "refit_lo": np.exp(lo) / KWH_TO_J, "refit_hi": np.exp(hi) / KWH_TO_J,
    })
    log(f"refit check on family {g} ({wall:.0f} s)")
    return {"family": g, "table": out, "wall_s": wall, "u_tau": float(np.median(base.posterior["E_u_tau"].values))}


def run(n_splits: int, seed: int, draws: int, tune: int, chains: int, do_refit: bool, log=print,
        posteriors: Path | None = None) -> pd.DataFrame:
    from bayes_energy.models.io import load, save
    from bayes_energy.predict import NewLevelWarning

    t_start = time.perf_counter()
    df = load_mayaki2026(None)
    runner = BayesRunner("hierarchical", df, draws=draws, tune=tune, chains=chains)
    log(f"compiled in {runner.compile_s:.0f} s")
    splits = grouped_splits(df, n_splits, seed)
    rows = []
    for i, (tr, te) in enumerate(splits):
        t0 = time.perf_counter()
        train, test = df.iloc[tr].reset_index(drop=True), df.iloc[te].reset_index(drop=True)
        saved = posteriors / f"split{i}_seed{seed}_{chains}x{draws}.nc" if posteriors else None
        if saved is not None and saved.exists():  # the same split's fit, saved by an earlier run
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                idata = load(saved)
        else:
            idata = runner.fit(train, seed + i)
            if saved is not None:
                saved.parent.mkdir(parents=True, exist_ok=True)
                save(idata, saved)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NewLevelWarning)
            for rule in PROBES:
                r = evaluate_split(idata, train, test, rule, seed + i)
                rows.append(r.assign(split=i, probe=rule))
        log(f"split {i + 1}/{len(splits)}: {time.perf_counter() - t0:.1f} s")
    rows = pd.concat(rows, ignore_index=True)
    summary = summarise(rows)
    ceiling = probe_ceiling(rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    summary.to_csv(RESULTS / "probe_mayaki2026.csv", index=False, float_format="%.4g")
    rows.to_csv(RESULTS / "probe_mayaki2026_targets.csv", index=False, float_format="%.4g")
    by_n = rows.groupby(["probe", "method", "n_gpus"]).apply(
        lambda d: pd.Series({"rmse": float(np.sqrt(np.mean(d["err"] ** 2))), "cov90": d["covered"].mean(),
                             "hw90": d["hw90"].median(), "n": len(d)}), include_groups=False).reset_index()
    refit_md = ""
    if do_refit:
        rc = refit_check(df, seed, draws, tune, log)
        refit_md = (f"\n## Update vs refit (one family, {rc['family']}, model with the configuration-family effect, "
                    f"E_u_tau median {rc['u_tau']:.3f}; 2 x {draws} draws each; {rc['wall_s']:.0f} s)\n\n"
                    + markdown(rc["table"]))
    wall = time.perf_counter() - t_start
    (RESULTS / "probe_mayaki2026.md").write_text(
        f"# Probe, then predict: Mayaki (2026), {len(splits)} grouped splits (seed {seed}), "
        f"{chains} chains x {tune} tune + {draws} draws per split, wall {wall:.0f} s"
        + (f" (split fits reused from {posteriors.name}/ where saved)" if posteriors else "") + "\n\n"
        "Held-out families; one probe run each, the family's other runs predicted; ln kWh. `rmse`, `cov90`, `hw90` "
        "over all targets pooled, `*_median_split` the median over splits; `rmse_vs_no_probe` the ratio to the "
        "no-probe RMSE. `linear`: energy per token of the probe x target tokens, interval from the 5-95 % "
        "quantiles of its log error on the training families.\n\n"
        + markdown(summary)
        + "\n## What one probe run can teach here\n\n`corr`: the probe's residual against the law with the targets' "
        "no-probe residuals; `oracle_ratio`: RMSE after the best slope on the probe residual fitted on the held-out "
        "targets themselves, over the no-probe RMSE (a bound for a family-offset update, not a method).\n\n"
        + markdown(ceiling) + "\n## By device count of the target\n\n" + markdown(by_n) + refit_md)
    log(f"wrote {RESULTS / 'probe_mayaki2026.csv'} ({wall:.0f} s)")
    return summary


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--splits", type=int, default=8)
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--draws", type=int, default=300)
    p.add_argument("--tune", type=int, default=300)
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--refit-check", action="store_true", help="also compare update and refit on one family")
    p.add_argument("--posteriors", type=Path, default=None,
                   help="folder to save each split's fit in and reuse it from (same split, seed, chains, draws)")
    a = p.parse_args(argv)
    warnings.filterwarnings("ignore", category=FutureWarning)
    summary = run(a.splits, a.seed, a.draws, a.tune, a.chains, a.refit_check, log=lambda s: print(s, flush=True),
                  posteriors=a.posteriors)
    print(summary.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
