"""``python -m bayes_energy.fit``: fit, diagnose, save and report.

Examples::

    python -m bayes_energy.fit                                  # data/ shipped with the repo
    python -m bayes_energy.fit --dataset mayaki2026 --out fits/mayaki
    python -m bayes_energy.fit --data my_sweep.csv --model pooled --strict

Writes into ``--out``: ``posterior.nc`` (InferenceData with provenance),
``summary.csv``, ``diagnostics.json``, ``compare.csv`` (with ``--compare``)
and ``report.pdf`` (unless ``--no-report``). For ``--model ols`` it writes
``summary.csv`` and ``diagnostics.json`` only (no posterior). Everything is
written to a hidden temporary folder beside ``--out`` first and moved into
place at the end, so a failed or interrupted run leaves no partial output
(a folder left by a killed run is removed by the next one). ``--out`` may
name a new or empty folder, or, with ``--overwrite``, a fit folder written
by this package; any other existing folder is refused and left untouched
(see :mod:`bayes_energy.cli`). Exit status: 0 on success, 1 when
``--strict`` and diagnostics fail, 2 on bad input.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
import warnings
from pathlib import Path

from . import __version__
from .cli import (OutputError, Parser, check_fit_dir, fail, nonnegative_int, plain_warnings, positive_int, replace_dir,
                  scratch_dir, write_fit_marker)
from .datasets import DEFAULT_DATA, load_mayaki2026, load_sweep
from .models import DEFAULT_MODEL, DRAWS, MODEL_NAMES, TUNE, WHOLE_DRAWS
from .schema import SchemaError, data_notes

DEFAULT_OUT = "fits/default"


def _parser() -> Parser:
    p = Parser(prog="python -m bayes_energy.fit", description="Fit a Bayesian energy model to sweep data.")
    src = p.add_mutually_exclusive_group()
    src.add_argument("--data", nargs="+", metavar="PATH", help=f"sweep CSV files (default: {' '.join(DEFAULT_DATA)})")
    src.add_argument("--dataset", choices=["mayaki2026"], help="a published dataset instead of sweep files")
    p.add_argument("--dataset-path", help="file or folder of the published dataset")
    p.add_argument("--model", choices=MODEL_NAMES, default=DEFAULT_MODEL)
    p.add_argument("--out", default=DEFAULT_OUT, help="output folder (default %(default)s): new, empty, or a fit folder with --overwrite")
    p.add_argument("--overwrite", action="store_true", help="replace --out if it is a fit folder written by bayes_energy")
    p.add_argument("--chains", type=positive_int, default=4)
    p.add_argument("--draws", type=positive_int, help=f"draws per chain (default {DRAWS}; {WHOLE_DRAWS} when a run's "
                   "efficiency is unknown and the model is sampled whole)")
    p.add_argument("--tune", type=nonnegative_int, default=TUNE, help="tuning steps per chain (default %(default)s)")
    p.add_argument("--seed", type=int, default=2026)
    p.add_argument("--sampler", choices=["nutpie", "pymc", "numba"], default="nutpie")
    p.add_argument("--compare", action="store_true", help="also fit the other Bayesian model and write compare.csv (LOO)")
    p.add_argument("--strict", action="store_true", help="exit 1 when diagnostics fail")
    p.add_argument("--no-report", action="store_true", help="skip the PDF report")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    return p


def _load(args) -> "pd.DataFrame":  # noqa: F821
    if args.dataset == "mayaki2026":
        return load_mayaki2026(args.dataset_path)
    return load_sweep(args.data or list(DEFAULT_DATA))


def _print_table(name: str, summary, diag: dict) -> None:
    rows = [r for r in summary.index if r.startswith(("E_mu[", "E_psi[", "curve_mu["))]
    print(f"\nmodel: {name}")
    if rows:
        cols = [c for c in summary.columns if c.startswith(("mean", "sd", "hdi", "r_hat", "ess_bulk"))]
        print(summary.loc[rows, cols].to_string(float_format=lambda v: f"{v:.3f}"))
    keys = ("divergences", "max_rhat", "min_ess_bulk", "min_ess_tail", "min_bfmi", "elpd_loo", "max_pareto_k", "n_pareto_k_gt_0_7")
    print("\ndiagnostics: " + ", ".join(f"{k}={diag[k]:.4g}" if isinstance(diag[k], float) else f"{k}={diag[k]}" for k in keys if k in diag))
    if diag.get("passed", True):
        print("diagnostics PASSED")
    else:
        print("diagnostics FAILED: " + "; ".join(diag["failed"]))


def _fit_ols(df, tmp: Path) -> dict:
    from .models.ols import fit_ols

    fit = fit_ols(df)
    table = fit.coef.to_frame("mean").assign(se=fit.se)
    table.index.name = "parameter"
    table.to_csv(tmp / "summary.csv")
    diag = {"model": "ols", "n": fit.n, "r2": fit.r2, "adj_r2": fit.adj_r2, "sigma": fit.sigma, "passed": True}
    (tmp / "diagnostics.json").write_text(json.dumps(diag, indent=2))
    print(table.to_string(float_format=lambda v: f"{v:.3f}"))
    print(f"adj. R^2 = {fit.adj_r2:.3f}, residual sd = {fit.sigma:.3f} (ln J)")
    return diag


def run(args) -> int:
    out = check_fit_dir(args.out, overwrite=args.overwrite)  # before any work: nothing to lose
    df = _load(args)
    print(f"data: {len(df)} runs, {df['hardware'].nunique()} hardware, {df['family'].nunique()} families, "
          f"strategies {', '.join(sorted(df['strategy'].unique()))}")
    notes = data_notes(df)  # what the data cannot inform, said before sampling
    for note in notes:
        print(f"note: {note}")
    tmp = scratch_dir(out.parent, prefix=".fit-")
    try:
        if args.model == "ols":
            diag = _fit_ols(df, tmp)
        else:
            diag = _fit_bayes(df, args, tmp)
        if notes:
            diag["data_notes"] = notes
            (tmp / "diagnostics.json").write_text(json.dumps(diag, indent=2))
        write_fit_marker(tmp, __version__, model=args.model, created=time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        check_fit_dir(out, overwrite=args.overwrite)  # again: something may have appeared meanwhile
        replace_dir(tmp, out)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"\nwrote {out}/")
    return 1 if (args.strict and not diag.get("passed", True)) else 0


def _fit_bayes(df, args, tmp: Path) -> dict:
    import arviz as az

    from .models.diagnostics import diagnose, summarize
    from .models.io import save
    from .models.sample import fit

    t0 = time.perf_counter()
    idata = fit(df, model=args.model, sampler=args.sampler, draws=args.draws, tune=args.tune,
                chains=args.chains, seed=args.seed, progress=not args.quiet)
    wall = time.perf_counter() - t0
    summary = summarize(idata)
    diag = diagnose(idata, summary=summary) | {"model": args.model, "sampler": args.sampler, "wall_s": wall}
    save(idata, tmp / "posterior.nc")
    summary.to_csv(tmp / "summary.csv")
    (tmp / "diagnostics.json").write_text(json.dumps(diag, indent=2))
    _print_table(args.model, summary, diag)
    if args.compare:
        other = "pooled" if args.model == "hierarchical" else "hierarchical"
        idata2 = fit(df, model=other, sampler=args.sampler, draws=args.draws, tune=args.tune,
                     chains=args.chains, seed=args.seed, progress=not args.quiet)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cmp = az.compare({args.model: idata, other: idata2}, ic="loo", var_name="log_energy")
        cmp.rename_axis("model").to_csv(tmp / "compare.csv")
        print("\nLOO comparison (log_energy):\n" + cmp[["rank", "elpd_loo", "se", "elpd_diff", "dse", "weight"]].to_string())
    if not args.no_report:
        try:
            from .report import write_report
        except ImportError:
            print("report: bayes_energy.report is not available; skipped")
        else:
            write_report(tmp, out_pdf=tmp / "report.pdf", idata=idata, table=df)
    return diag


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    plain_warnings()
    args = _parser().parse_args(argv)
    try:
        return run(args)
    except (SchemaError, OutputError, FileNotFoundError, ValueError) as err:
        return fail(err)


if __name__ == "__main__":
    sys.exit(main())
