"""Does the Bayesian sweep design save measurements? Evidence on the authors' table.

The reference table (Mayaki 2026, 629 runs) plays the pool of runs one could
have measured. Per seed:

* targets: every run of ``--target-families`` configuration families drawn at
  random (held out: never in the pool);
* a seed set of ``--seed-runs`` runs drawn at random from the pool;
* then ``--batches`` batches of ``--batch`` runs each, chosen by
  (a) ``design``: :func:`bayes_energy.design.next_runs` on the current
  posterior (cost ``none``: the target below counts runs; outcome: the
  targets' ln energy), (b) ``random``: uniformly from the rest of the pool,
  (c) ``grid``: the rest of the pool in the authors' table order (their sweep
  order); "measuring" a run looks its row up in the table;
* after each batch the model is refitted (one compiled model, refitted with
  :func:`bayes_energy.models.refit.refit`) and the targets are scored
  pre-run on ln energy (J): RMSE of the predictive mean, coverage and width
  of the central 90 % interval, and the mean log predictive density (mlpd,
  exact Student-t mixture over the draws, as in ``validate_mayaki2026.py``).

Writes ``benchmarks/results/design_mayaki2026.{csv,md,png}``: every (seed,
arm, batch) row, the mean over seeds with its standard error, and the curves.

    nice -n 10 python benchmarks/design_mayaki2026.py              # 10 seeds
    python benchmarks/design_mayaki2026.py --seeds 2 --batches 3   # a quick look
    python benchmarks/design_mayaki2026.py --summarise-only        # redo md/png from the csv
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
RESULTS = ROOT / "benchmarks" / "results"
ARMS = ("design", "random", "grid")
PROB = 0.9


def score(idata, targets: pd.DataFrame, seed: int) -> dict:
    from validate_mayaki2026 import energy_loc_scale, mlpd

    from bayes_energy.predict import NewLevelWarning, predict_draws

    y = np.log(targets["energy_j"].to_numpy(float))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NewLevelWarning)
        d = predict_draws(idata, targets, mode="pre", seed=seed)["log_energy_j"]
        lp = mlpd(y, *energy_loc_scale(idata, targets, "pre", seed))
    lo, hi = np.quantile(d, [(1 - PROB) / 2, (1 + PROB) / 2], axis=0)
    return {"rmse": float(np.sqrt(np.mean((d.mean(axis=0) - y) ** 2))),
            "coverage90": float(np.mean((y >= lo) & (y <= hi))),
            "width90": float(np.mean(hi - lo)), "mlpd": lp,
            "divergences": int(idata.sample_stats["diverging"].sum())}


def run_seed(compiled, table: pd.DataFrame, seed: int, args) -> list[dict]:
    from bayes_energy.design import next_runs
    from bayes_energy.models.refit import refit

    rng = np.random.default_rng(seed)
    groups = np.sort(table["group"].unique())
    held = set(rng.choice(groups, args.target_families, replace=False))
    is_target = table["group"].isin(held).to_numpy()
    targets = table[is_target].reset_index(drop=True)
    pool = np.flatnonzero(~is_target)  # table rows, in the authors' order
    start = list(rng.choice(pool, args.seed_runs, replace=False))

    def fit_score(rows, arm, batch, design_s=0.0):
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            idata = refit(compiled, table.iloc[sorted(rows)].reset_index(drop=True), seed=seed * 1000 + batch,
                          draws=args.draws, tune=args.tune, chains=args.chains)
        rec = {"seed": seed, "arm": arm, "batch": batch, "n_added": batch * args.batch, "n_measured": len(rows),
               "n_targets": len(targets), "fit_s": time.perf_counter() - t0, "design_s": design_s,
               "measured_energy_kwh": float(table["energy_j"].iloc[rows].sum() / 3.6e6)}
        rec.update(score(idata, targets, seed))
        return idata, rec

    idata0, rec0 = fit_score(start, "seed", 0)
    out = [{**rec0, "arm": arm} for arm in ARMS]
    for arm in ARMS:
        rows, idata = list(start), idata0
        arm_rng = np.random.default_rng([seed, ARMS.index(arm)])
        for b in range(1, args.batches + 1):
            taken = set(rows)
            left = np.array([r for r in pool if r not in taken])
            t0 = time.perf_counter()
            if arm == "design":
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    d = next_runs(idata, targets, table.iloc[left], k=args.batch, cost="none",
                                  outcomes=("energy",), n_draws=None, seed=seed)
                new = list(left[d.runs["pool_row"].to_numpy()])
            elif arm == "random":
                new = list(arm_rng.choice(left, args.batch, replace=False))
            else:
                new = list(left[:args.batch])
            rows += new
            idata, rec = fit_score(rows, arm, b, time.perf_counter() - t0)
            out.append(rec)
            print(f"seed {seed} {arm:6s} +{rec['n_added']:3d}: rmse {rec['rmse']:.3f} cov {rec['coverage90']:.2f} "
                  f"width {rec['width90']:.2f} mlpd {rec['mlpd']:.2f} ({rec['fit_s']:.1f} s fit, "
                  f"{rec['design_s']:.2f} s pick)", flush=True)
    return out


def summarise(rows: pd.DataFrame) -> pd.DataFrame:
    metrics = ["rmse", "coverage90", "width90", "mlpd", "measured_energy_kwh"]
    g = rows.groupby(["arm", "n_added"])
    mean = g[metrics].mean()
    se = g[metrics].std(ddof=1) / np.sqrt(g.size().to_numpy()[:, None])
    out = mean.join(se.add_suffix("_se")).reset_index()
    out.insert(2, "n_seeds", g.size().to_numpy())
    return out


def savings(summary: pd.DataFrame, metric: str, better: str, reference: int) -> tuple[float | None, int | None, float]:
    """Runs the design needs to match random choice at ``reference`` added runs (mean over seeds)."""
    ref = summary[(summary.arm == "random") & (summary.n_added == reference)][metric]
    if ref.empty:
        return None, None, float("nan")
    ref = float(ref.iloc[0])
    d = summary[(summary.arm == "design") & (summary.n_added > 0)].sort_values("n_added")
    ok = d[d[metric] <= ref] if better == "low" else d[d[metric] >= ref]
    if ok.empty:
        return None, None, ref
    n = int(ok["n_added"].iloc[0])
    return reference / n, n, ref


def write_md(summary: pd.DataFrame, rows: pd.DataFrame, args_text: str, wall_s: float | None) -> str:
    ref = int(summary["n_added"].max())
    lines = ["# Sweep design on the authors' table (Mayaki 2026)", "",
             f"`python benchmarks/design_mayaki2026.py {args_text}`" + (f" ({wall_s / 60:.1f} min wall)" if wall_s else ""),
             "", f"{rows['seed'].nunique()} seeds; targets: all runs of held-out configuration families "
             f"(median {int(rows['n_targets'].median())} runs); scores on the targets' ln energy (J), pre-run; "
             "mean over seeds (± standard error).", ""]
    for metric, better, name in (("rmse", "low", "RMSE"), ("mlpd", "high", "mlpd")):
        ratio, n, refv = savings(summary, metric, better, ref)
        if ratio is None:
            lines.append(f"- {name}: random choice reaches {refv:.3f} with {ref} added runs; the design does not "
                         f"reach it within {ref} runs.")
        else:
            lines.append(f"- {name}: random choice reaches {refv:.3f} with {ref} added runs; the design reaches it with "
                         f"{n}: a saving of ×{ratio:.2f} in measured runs.")
    lines += ["", "| arm | added runs | RMSE | 90 % coverage | 90 % width (ln) | mlpd | measured energy (kWh) |",
              "|---|---|---|---|---|---|---|"]
    for _, r in summary.sort_values(["arm", "n_added"]).iterrows():
        lines.append(f"| {r.arm} | {int(r.n_added)} | {r.rmse:.3f} ± {r.rmse_se:.3f} | {r.coverage90:.2f} ± "
                     f"{r.coverage90_se:.2f} | {r.width90:.2f} ± {r.width90_se:.2f} | {r.mlpd:.2f} ± {r.mlpd_se:.2f} | "
                     f"{r.measured_energy_kwh:.2f} |")
    lines += ["", f"Divergent transitions: {int(rows['divergences'].sum())} in {len(rows)} fits "
              f"(max {int(rows['divergences'].max())} in one). Median refit {rows['fit_s'].median():.1f} s; "
              f"median design pick {rows.loc[rows.arm == 'design', 'design_s'].median():.2f} s.", ""]
    return "\n".join(lines)


def plot(summary: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(15, 3.6))
    for ax, (metric, label) in zip(axes, (("rmse", "RMSE (ln J)"), ("coverage90", "90 % coverage"),
                                          ("width90", "90 % interval width (ln J)"), ("mlpd", "mlpd"))):
        for arm, colour in zip(ARMS, ("C2", "C0", "C7")):
            g = summary[summary.arm == arm].sort_values("n_added")
            ax.errorbar(g["n_added"], g[metric], yerr=g[f"{metric}_se"], color=colour, marker="o", ms=3,
                        capsize=2, label=arm)
        if metric == "coverage90":
            ax.axhline(PROB, color="grey", ls="--", lw=1)
        ax.set_xlabel("runs added to the seed set")
        ax.set_title(label)
        ax.grid(alpha=0.3)
    axes[0].legend(frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0)
    p.add_argument("--seed-runs", type=int, default=20)
    p.add_argument("--target-families", type=int, default=8)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--batches", type=int, default=10)
    p.add_argument("--draws", type=int, default=150)
    p.add_argument("--tune", type=int, default=150)
    p.add_argument("--chains", type=int, default=2)
    p.add_argument("--data", default=str(ROOT.parent / "shared" / "datasets" / "mayaki2026"))
    p.add_argument("--tag", default="design_mayaki2026")
    p.add_argument("--summarise-only", action="store_true")
    args = p.parse_args(argv)
    args_text = " ".join(argv if argv is not None else sys.argv[1:])
    csv = RESULTS / f"{args.tag}.csv"
    wall = None
    if not args.summarise_only:
        from bayes_energy.datasets import load_mayaki2026
        from bayes_energy.models.refit import compile_model

        t_start = time.perf_counter()
        table = load_mayaki2026(args.data)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compiled = compile_model("hierarchical", table)
        print(f"compiled in {compiled.compile_s:.1f} s", flush=True)
        rows = []
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            rows += run_seed(compiled, table, seed, args)
            pd.DataFrame(rows).to_csv(csv.with_suffix(".partial.csv"), index=False)  # survives an interrupted run
        wall = time.perf_counter() - t_start
        pd.DataFrame(rows).to_csv(csv, index=False)
        csv.with_suffix(".partial.csv").unlink(missing_ok=True)
    if not csv.exists() and csv.with_suffix(".partial.csv").exists():  # an interrupted run: what it finished
        print("summarising the seeds of an interrupted run", flush=True)
        csv = csv.with_suffix(".partial.csv")
    rows = pd.read_csv(csv)
    summary = summarise(rows)
    md = write_md(summary, rows, args_text.replace("--summarise-only", "").strip(), wall)
    (RESULTS / f"{args.tag}.md").write_text(md)
    plot(summary, RESULTS / f"{args.tag}.png")
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
