r"""A ten-page PDF report of a fit, from its output folder.

``write_report(fit_dir)`` reads ``posterior.nc``, ``summary.csv``,
``diagnostics.json`` and, when present, ``compare.csv`` from a folder
written by ``python -m bayes_energy.fit`` and writes one PDF with
matplotlib's ``PdfPages``:

1. the data,
2. the model in one paragraph,
3. the law's coefficients (αC, αM, αη), Ψ by strategy and the speedup-curve
   parameters with credible intervals (the numbers of ``summary.csv``),
4. the sampler diagnostics with a plain pass/fail,
5. a posterior predictive check,
6. the speedup curves with bands, per strategy and hardware x family,
7. energy and time versus device count with bands, per strategy,
8. leave-one-out cross-validation (the model comparison when
   ``compare.csv`` exists; the model's own LOO and Pareto k always),
9. calibration: in-sample coverage of central predictive intervals,
10. an example plan (:func:`bayes_energy.plan.plan`),
11. when sites are given (``--region``/``--grid-gco2-per-kwh``, ``--pue``,
    ``--price-per-kwh``): the example plan's CO2e and cost at each site,
    with intervals (:mod:`bayes_energy.carbon`).

Command line::

    python -m bayes_energy.report fits/default [--out reports/default.pdf] [--region FR DE --pue 1.2]
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

from . import DEFAULT_PROB, __version__
from .cli import OutputError, Parser, check_output_file, fail, plain_warnings, write_file
from .models.curves import CURVES
from .models.io import sample_array
from .models.spec import SECOND_ORDER_FEATURES, STRATEGY_SLOPE_FEATURES, cell_labels
from .schema import STRATEGIES

__all__ = ["write_report", "coverage", "PAGE_TITLES", "COEF_LABELS"]

#: Page titles, in order (tests count the pages against this).
PAGE_TITLES = (
    "1  Data",
    "2  Model",
    "3  Coefficients",
    "4  Sampler diagnostics",
    "5  Posterior predictive check",
    "6  Speedup curves",
    "7  Energy and time versus device count",
    "8  Leave-one-out cross-validation",
    "9  Calibration (in-sample)",
    "10  Example plan",
)
#: Title of the page added when sites are given (not counted in PAGE_TITLES).
CARBON_PAGE_TITLE = "11  Carbon and cost"
#: Readable names of the law's coefficients.
COEF_LABELS = {
    "intercept": "intercept (centred)",
    "log_compute": "αC  (ln compute)",
    "log_memory": "αM  (ln memory)",
    "log_eta": "αη  (ln efficiency)",
    "log_tokens": "ln tokens",
    "log_seq_len": "ln sequence length",
    "log_batch": "ln batch",
    "log_n_gpus": "ln devices",
    "log_params": "ln parameters",
}
COEF_LABELS |= {f"sq_{f}": f"({ {'log_compute': 'ln compute', 'log_memory': 'ln memory'}.get(f, COEF_LABELS[f])})², second order"
                for f in SECOND_ORDER_FEATURES}


def _feature_name(coef: str) -> str:
    """The feature's plain name in its label ("ln compute" from "αC  (ln compute)")."""
    return COEF_LABELS[coef].split("(")[-1].rstrip(")")


COEF_LABELS |= {f"{s}:{f}": f"{s} × {_feature_name(f)}" for s in STRATEGIES if s != "single" for f in STRATEGY_SLOPE_FEATURES}
#: Report names of the speedup-curve parameters, from their declarations (models/curves.py).
CURVE_LABELS = {p: c.label(p) for c in CURVES.values() for p in c.params}
PAGE_SIZE = (11.69, 8.27)  # A4 landscape, inches
STRATEGY_COLOURS = {"single": "#444444", "ddp": "#1b9e77", "fsdp": "#d95f02", "tp": "#7570b3"}
PASS_COLOUR, FAIL_COLOUR, INFO_COLOUR = "#d9f2d9", "#f8d0d0", "#f2f2f2"
NOMINAL = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95)


@dataclass
class _Fit:
    """Everything the pages read."""

    fit_dir: Path
    idata: object
    spec: object
    table: pd.DataFrame
    summary: pd.DataFrame
    diag: dict
    compare: pd.DataFrame | None
    prob: float = DEFAULT_PROB


# ---------------------------------------------------------------------------- helpers
def _hw_short(name: str) -> str:
    return re.sub(r"^(NVIDIA( GeForce)?|Intel\(R\)) ", "", str(name))


def _folder(fit_dir: Path) -> str:
    name = fit_dir.resolve().name
    return "written by python -m bayes_energy.fit" if name.startswith(".fit-") else f"fit folder {name}"


def _cell_title(cell: str) -> str:
    hw, fam = cell.split("|", 1)
    return f"{_hw_short(hw)} · {fam}"


def _page(pdf, title: str, subtitle: str | None = None):
    from matplotlib.figure import Figure

    fig = Figure(figsize=PAGE_SIZE)
    fig.text(0.04, 0.955, title, fontsize=17, weight="bold", va="top")
    if subtitle:
        fig.text(0.04, 0.905, textwrap.fill(subtitle, 165), fontsize=9, color="#444444", va="top", linespacing=1.35)
    return fig


def _table_height(nrows: int, row_height: float = 1.35) -> float:
    """Height, as a fraction of the page, of a table drawn by :func:`_table` with ``nrows`` rows plus a header.

    Matplotlib sizes table rows by its default table font size (10 pt), whatever the text size.
    """
    return (nrows + 1) * 10 / 72 * 1.2 * row_height / PAGE_SIZE[1]


def _finish(pdf, fig) -> None:
    fig.text(0.96, 0.015, f"bayes_energy {__version__}", fontsize=7, color="#888888", ha="right")
    pdf.savefig(fig)


def _wrap(text: str, width: int = 150) -> str:
    return "\n\n".join(textwrap.fill(" ".join(p.split()), width) for p in text.split("\n\n"))


def _table(ax, header: list[str], rows: list[list[str]], fontsize: float = 8.5, colours=None,
           section_rows=(), row_height: float = 1.35):
    """Draw a table whose first column holds the row labels (left aligned)."""
    ax.axis("off")
    tbl = ax.table(cellText=rows, colLabels=header, loc="upper left", cellLoc="right", colLoc="center")
    tbl.auto_set_font_size(False)
    tbl.set_fontsize(fontsize)
    tbl.scale(1, row_height)
    tbl.auto_set_column_width(list(range(len(header))))
    for (r, c), cell in tbl.get_celld().items():
        cell.set_edgecolor("#bbbbbb")
        cell.set_linewidth(0.5)
        if r == 0:
            cell.set_facecolor("#e6e6e6")
            cell.set_text_props(weight="bold")
        if c == 0 and r > 0:
            cell._loc = "left"
            cell.set_text_props(ha="left")
        if r > 0 and (r - 1) in section_rows:
            cell.set_facecolor("#eef3fb")
            cell.set_text_props(weight="bold")
            if c > 0:
                cell.visible_edges = "TB"
        if colours is not None and r > 0 and colours[r - 1][c] is not None:
            cell.set_facecolor(colours[r - 1][c])
    return tbl


def _energy_unit(energy_j) -> tuple[str, float]:
    """A readable energy unit for values in joules: (name, joules per unit)."""
    typical = float(np.nanmedian(np.asarray(energy_j, float)))
    for name, size in (("MJ", 1e6), ("kJ", 1e3)):
        if typical >= size:
            return name, size
    return "J", 1.0


def _fmt(v, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "–"
    return f"{v:.{digits}f}"


def _hdi_columns(summary: pd.DataFrame) -> tuple[str, str, str]:
    cols = [c for c in summary.columns if c.startswith("hdi_")]
    lo, hi = cols[0], cols[-1]
    mass = float(hi[4:-1]) - float(lo[4:-1])
    return lo, hi, f"{mass:.0f}% HDI"


# ---------------------------------------------------------------------------- loading
def _load(fit_dir: Path, idata=None, table: pd.DataFrame | None = None) -> _Fit:
    from .models.io import PosteriorFileError, load, posterior_of

    post = posterior_of(load(fit_dir / "posterior.nc") if idata is None else idata)
    idata, spec = post.idata, post.spec
    if table is None:
        table = post.table
        if table is None:
            raise PosteriorFileError(f"{fit_dir}: the posterior has no training_table group")
    summary_path = fit_dir / "summary.csv"
    if summary_path.is_file():
        summary = pd.read_csv(summary_path, index_col=0)
    else:
        from .models.diagnostics import summarize

        summary = summarize(idata)
    diag_path = fit_dir / "diagnostics.json"
    if diag_path.is_file():
        diag = json.loads(diag_path.read_text())
    else:
        from .models.diagnostics import diagnose

        diag = diagnose(idata, summary=summary)
    cmp_path = fit_dir / "compare.csv"
    compare = pd.read_csv(cmp_path, index_col=0) if cmp_path.is_file() else None
    return _Fit(fit_dir=fit_dir, idata=idata, spec=spec, table=table.reset_index(drop=True), summary=summary,
                diag=diag, compare=compare)


# ---------------------------------------------------------------------------- page 1
def _page_data(pdf, f: _Fit) -> None:
    df = f.table
    attrs = f.idata.posterior.attrs
    fig = _page(pdf, "bayes_energy report: " + PAGE_TITLES[0].split("  ", 1)[1],
                f"{_folder(f.fit_dir)}; model {f.spec.name}; written "
                f"{datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC; training table SHA-256 "
                f"{str(attrs.get('training_table_sha256', '?'))[:16]}…")
    en, eu = _energy_unit(df["energy_j"])
    src = ", ".join(sorted(set(df["source_file"].astype(str)))) if "source_file" in df.columns else "(not recorded)"
    lines = [
        f"{len(df)} runs from {src}; energy source {', '.join(sorted(set(df['energy_source'].astype(str))))}.",
        f"Hardware: {'; '.join(sorted(set(df['hardware'].astype(str))))}.",
        f"Families: {', '.join(sorted(set(df['family'])))}; strategies: {', '.join(f.spec.strategies)}; "
        f"devices: {', '.join(str(n) for n in sorted(set(df['n_gpus'].astype(int))))}.",
        f"Energy {df['energy_j'].min() / eu:.3g}–{df['energy_j'].max() / eu:.4g} {en}; time {df['time_s'].min():.3g}–"
        f"{df['time_s'].max():.4g} s; tokens {df['tokens'].min():.3g}–{df['tokens'].max():.3g}; "
        f"layers {df['num_layers'].min()}–{df['num_layers'].max()}, width {df['hidden_size'].min()}–{df['hidden_size'].max()}.",
    ]
    if "group" in df.columns:
        lines.append(f"{df['group'].nunique()} configuration families (runs that differ only in strategy and device count).")
    fig.text(0.04, 0.86, "\n".join(textwrap.fill(s, 125) for s in lines), fontsize=9.5, va="top", linespacing=1.5)

    rows = []
    for (hw, fam, s), g in df.groupby(["hardware", "family", "strategy"], sort=True):
        rows.append([f"{_hw_short(hw)} · {fam}", s, str(len(g)), ", ".join(str(n) for n in sorted(set(g["n_gpus"].astype(int)))),
                     f"{g['energy_j'].median() / eu:.3g}", f"{g['time_s'].median():.3g}",
                     f"{(g['energy_j'] / g['time_s']).median():.3g}"])
    ax = fig.add_axes([0.04, 0.08, 0.5, 0.52])
    _table(ax, ["hardware · family", "strategy", "runs", "devices", f"median {en}", "median s", "median W"], rows, fontsize=9)

    ax2 = fig.add_axes([0.62, 0.1, 0.34, 0.5])
    for s in f.spec.strategies:
        g = df[df["strategy"] == s]
        ax2.scatter(g["time_s"], g["energy_j"] / eu, s=9, alpha=0.6, color=STRATEGY_COLOURS.get(s), label=s)
    ax2.set_xscale("log")
    ax2.set_yscale("log")
    ax2.set_xlabel("time (s)")
    ax2.set_ylabel(f"energy ({en})")
    ax2.set_title("every run: energy against time", fontsize=10)
    ax2.legend(fontsize=8, frameon=False)
    ax2.grid(alpha=0.3, which="both", lw=0.4)
    _finish(pdf, fig)


# ---------------------------------------------------------------------------- page 2
def model_paragraph(spec, diag: dict) -> str:
    """The model in plain words, from its stored config."""
    cfg = spec.config
    partial = cfg.get("pooling") == "partial"
    by_strategy = spec.strategy_slope_coefs
    feats = ", ".join(_feature_name(c) if c in ("log_compute", "log_memory", "log_eta")
                      else COEF_LABELS[c] for c in spec.energy_features[1:] if c not in by_strategy)
    if by_strategy:  # config["strategy_slopes"]
        named = ", ".join(_feature_name(f) for f in cfg.get("strategy_slopes", []))
        feats += (f", and {len(by_strategy)} slopes per strategy (each multi-device strategy's own slope on {named}, "
                  "zero on other strategies' runs)")
    pri = cfg.get("priors", {})
    mu_pri = pri.get("E_mu_mu") if isinstance(pri.get("E_mu_mu"), dict) else {}
    text = (
        f"The {spec.name} model describes the natural log of a run's energy (joules, centred on the training mean) with a "
        f"Student-t likelihood whose mean is the roofline law of Mayaki (2026): a linear function of the centred log "
        f"features {feats}, plus a strategy effect Ψ (single = 0, the reference). "
    )
    if partial:
        tau_pri = pri.get("tau_coef", {})
        tau = [tau_pri.get(c) for c in spec.energy_features] if isinstance(tau_pri, dict) else []
        tau = tau if tau and None not in tau else []
        slopes = sorted(set(tau[1:]))
        tau_text = (f"{tau[0]:g} for the intercept, {slopes[0]:g} for the slopes" if len(slopes) == 1
                    else ", ".join(f"{t:g}" for t in tau) + " for the coefficients") if tau else "?"
        text += (
            "Coefficients, strategy effects and speedup-curve parameters are partially pooled across hardware x family "
            f"cells: each cell's coefficient is drawn around a population mean with a fixed between-cell scale (τ = "
            f"{tau_text}, {pri.get('tau_psi', '?')} for Ψ, {pri.get('tau_curve', '?')} for the curves), so a new cell is "
            "predicted from the population. "
        )
        if cfg.get("crossed"):
            shares = pri.get("cell_shares", ["?"] * 3)
            text += ("Pooling is crossed: each cell effect is a hardware effect plus a family effect plus an interaction "
                     f"(shares {shares[0]}, {shares[1]} and {shares[2]} of τ²), so a new pairing of a measured GPU and a "
                     "measured family borrows from both. ")
    else:
        text += "Slopes and strategy effects are shared by all data (complete pooling) with one free intercept per hardware x family cell. "
    if cfg.get("group_effects"):
        text += ("Runs of one configuration family (same workload, any strategy or device count) share an effect u with a "
                 "learned scale, so repeated measurements of one workload are not counted as independent evidence. ")
    noise = "per strategy" if cfg.get("noise_by") == "strategy" else "common to all runs"
    text += (
        f"The noise scale is {noise}. Before a run, the efficiency η = S(N)/N comes from speedup curves: Gunther's "
        "universal scalability law with a one-off distribution overhead for DDP and FSDP and a saturating exponential for tensor parallelism, with "
        "parameters per cell" + (" shifted by the standardised log size covariates (parameters, tokens, sequence length, batch)"
                                 + (" with slopes per cell" if cfg.get("curve_slopes_by_cell") and partial else "")
                                 if cfg.get("curve_covariates") else "") +
        "; only multi-device runs with a measured single-device partner inform them. Time (ln seconds) has the same "
        "form with its own coefficients plus a regression on the energy residual, so energy and time are drawn jointly. "
        f"Priors: slopes normal around the paper's OLS values (αC {mu_pri.get('log_compute', '?')}, "
        f"αM {mu_pri.get('log_memory', '?')}, αη {mu_pri.get('log_eta', '?')}) with scale 0.5; "
        f"Ψ ~ N(0, {pri.get('psi_sigma', '?')}²); noise scale half-normal({pri.get('sigma', '?')})."
    )
    return text


def _page_model(pdf, f: _Fit) -> None:
    fig = _page(pdf, PAGE_TITLES[1])
    cfg = f.spec.config
    group = r" + u_{g[r]}" if cfg.get("group_effects") else ""
    theta = r"\theta_{c[r]} + z_r^\top\gamma_{c[r]}" if cfg.get("curve_covariates") else r"\theta_{c[r]}"
    eqs = [
        r"$\ln E_r \sim \mathrm{StudentT}\left(\nu,\ \mu_r,\ \sigma_{s[r]}\right)$",
        r"$\mu_r = \beta_{c[r],0} + \alpha_{C,c}\ln C_r + \alpha_{M,c}\ln M_r + \alpha_{\eta,c}\ln\eta_r"
        r" + \ldots + \Psi_{s[r]} + \Psi_{c[r],s[r]}" + group + "$",
        r"$\ln\eta_r = \ln S(N_r;\ " + theta + r") - \ln N_r,\qquad S_{USL}(N) = N / (1 + \sigma(N-1) + \kappa N(N-1))$",
        r"$\ln T_r \sim \mathrm{StudentT}\left(\nu_T,\ \mu^T_r + \lambda\,(\ln E_r - \mu_r),\ \sigma^T_{s[r]}\right)$",
    ]
    for i, eq in enumerate(eqs):
        fig.text(0.07, 0.86 - 0.055 * i, eq, fontsize=12, va="top")
    fig.text(0.04, 0.6, _wrap(model_paragraph(f.spec, f.diag), 150), fontsize=10, va="top", linespacing=1.45)
    post = f.idata.posterior
    d = f.diag
    run = (f"Sampler: {d.get('sampler', '?')}, {post.sizes['chain']} chains x {post.sizes['draw']} draws"
           + (f", {d['wall_s']:.0f} s wall time" if "wall_s" in d else "") +
           f". Intervals in this report: central {f.prob:g} predictive intervals; parameter tables show the "
           f"{_hdi_columns(f.summary)[2]} of summary.csv. Notation: c cell (hardware x family), s strategy, g configuration family, "
           "C compute proxy, M memory proxy, N devices. Natural logs throughout.")
    fig.text(0.04, 0.14, _wrap(run, 150), fontsize=9, va="top", color="#333333", linespacing=1.4)
    _finish(pdf, fig)


# ---------------------------------------------------------------------------- page 3
def coefficient_rows(summary: pd.DataFrame, spec) -> tuple[list[list[str]], list[int], list[str]]:
    """Rows of the coefficient table: (rows, section row indexes, summary names in row order)."""
    lo, hi, _ = _hdi_columns(summary)
    rows, sections, names = [], [], []
    slopes = set(spec.strategy_slope_coefs)

    def section(title):
        sections.append(len(rows))
        rows.append([title, "", "", "", "", "", "", ""])
        names.append("")

    def row(label, name):
        if name not in summary.index:
            return
        r = summary.loc[name]
        fixed = not np.isfinite(r.get("r_hat", np.nan)) and r["sd"] == 0
        rows.append([label, name, _fmt(r["mean"]), _fmt(r["sd"]), _fmt(r[lo]), _fmt(r[hi]),
                     "fixed" if fixed else _fmt(r.get("r_hat"), 2), "–" if fixed else f"{r.get('ess_bulk', np.nan):.0f}"])
        names.append(name)

    for b, what in (("E", "Energy (ln J), population"), ("T", "Time (ln s), population")):
        section(what)
        for c in spec.energy_features:
            if c not in slopes:  # slopes per strategy: summary.csv (too many for the page)
                row(COEF_LABELS.get(c, c), f"{b}_mu[{c}]")
        for s in spec.strategies:
            row(f"Ψ {s}" + (" (reference)" if s == "single" else ""), f"{b}_psi[{s}]")
        if b == "T":
            row("λ  (time on energy residual)", "T_on_E_resid")
        if b == "E":
            section("Speedup curves, population (log scale)")
            for p, label in CURVE_LABELS.items():
                row(label, f"curve_mu[{p}]")
    return rows, sections, names


def _page_coefficients(pdf, f: _Fit) -> None:
    _, _, hdi_label = _hdi_columns(f.summary)
    fig = _page(pdf, PAGE_TITLES[2],
                f"Posterior mean, sd and {hdi_label} from summary.csv. αC, αM, αη are the law's elasticities; Ψ the strategy "
                "effect on ln energy relative to one device. Curve parameters are logs: σ = exp(ln σ) etc."
                + (" The slopes per strategy (e.g. E_mu[tp:log_compute]) are in summary.csv."
                   if f.spec.strategy_slope_coefs else ""))
    rows, sections, _ = coefficient_rows(f.summary, f.spec)
    lo, hi, _ = _hdi_columns(f.summary)
    ax = fig.add_axes([0.04, 0.04, 0.62, 0.81])
    _table(ax, ["quantity", "parameter", "mean", "sd", lo.replace("hdi_", "HDI "), hi.replace("hdi_", "HDI "), "R-hat", "ESS bulk"],
           rows, fontsize=8, section_rows=sections, row_height=1.22)
    # per-cell elasticities of the energy law, when the model has them
    if "E_beta" in f.idata.posterior and f.spec.config.get("pooling") == "partial":
        beta = f.idata.posterior["E_beta"]
        crow = []
        for cell in beta.coords["cell"].values:
            for c in ("log_compute", "log_memory", "log_eta"):
                d = beta.sel(cell=cell, coef=c).values.ravel()
                lo_c, hi_c = np.quantile(d, [(1 - f.prob) / 2, (1 + f.prob) / 2])
                crow.append([_cell_title(cell), COEF_LABELS[c].split()[0], f"{d.mean():.3f}", f"{lo_c:.3f} – {hi_c:.3f}"])
        ax2 = fig.add_axes([0.705, 0.04, 0.27, 0.77])
        _table(ax2, ["hardware · family", "", "mean", f"{f.prob:g} interval"], crow, fontsize=8, row_height=1.22)
        fig.text(0.705, 0.825, "Energy elasticities per cell", fontsize=9.5, weight="bold")
    _finish(pdf, fig)


# ---------------------------------------------------------------------------- page 4
def diagnostic_rows(diag: dict) -> tuple[list[list[str]], list[list]]:
    """Rows (check, value, threshold, verdict) and their colours."""
    t = diag.get("thresholds", {})
    checks = [
        ("divergent transitions", diag.get("divergences"), f"= {t.get('divergences', 0)}", lambda v: v <= t.get("divergences", 0), "{:.0f}"),
        ("largest R-hat", diag.get("max_rhat"), f"≤ {t.get('max_rhat', 1.01)}", lambda v: v <= t.get("max_rhat", 1.01), "{:.3f}"),
        ("smallest bulk ESS", diag.get("min_ess_bulk"), f"≥ {t.get('min_ess_bulk', 400)}", lambda v: v >= t.get("min_ess_bulk", 400), "{:.0f}"),
        ("smallest tail ESS", diag.get("min_ess_tail"), f"≥ {t.get('min_ess_tail', 400)}", lambda v: v >= t.get("min_ess_tail", 400), "{:.0f}"),
        ("smallest E-BFMI", diag.get("min_bfmi"), f"≥ {t.get('min_bfmi', 0.3)}", lambda v: v >= t.get("min_bfmi", 0.3), "{:.2f}"),
    ]
    rows, colours = [], []
    for name, v, thr, ok, fmt in checks:
        if v is None:
            continue
        good = bool(ok(v))
        rows.append([name, fmt.format(v), thr, "PASS" if good else "FAIL"])
        colours.append([None, None, None, PASS_COLOUR if good else FAIL_COLOUR])
    if "max_pareto_k" in diag:
        n = diag.get("n_pareto_k_gt_0_7", 0)
        rows.append(["Pareto k > 0.7 (LOO, energy)", f"{n} runs (max {diag['max_pareto_k']:.2f})", "0 (advisory)",
                     "ok" if n == 0 else "WARN"])
        colours.append([None, None, None, PASS_COLOUR if n == 0 else INFO_COLOUR])
    return rows, colours


def _page_diagnostics(pdf, f: _Fit) -> None:
    d = f.diag
    passed = bool(d.get("passed", False))
    fig = _page(pdf, PAGE_TITLES[3], f"{d.get('n_chains', '?')} chains x {d.get('n_draws', '?')} draws; thresholds as in "
                "bayes_energy.models.diagnostics (all parameters, non-centred z's included).")
    verdict = "PASSED: the sampler diagnostics meet every threshold." if passed else \
        "FAILED: " + "; ".join(d.get("failed", [])) + ". Do not trust these numbers; sample longer or reparametrise."
    fig.text(0.04, 0.85, _wrap(verdict, 110), fontsize=13, weight="bold", va="top",
             color="#1a7f1a" if passed else "#b00020")
    rows, colours = diagnostic_rows(d)
    ax = fig.add_axes([0.04, 0.3, 0.45, 0.45])
    _table(ax, ["check", "value", "threshold", "verdict"], rows, fontsize=10, colours=colours, row_height=1.7)
    s = f.summary
    if "r_hat" in s.columns:
        worst = s[np.isfinite(s["r_hat"])].sort_values(["r_hat", "ess_bulk"], ascending=[False, True]).head(10)
        wrows = [[name if len(name) <= 38 else name[:36] + "…", f"{r['r_hat']:.3f}", f"{r['ess_bulk']:.0f}", f"{r['ess_tail']:.0f}"] for name, r in worst.iterrows()]
        ax2 = fig.add_axes([0.54, 0.3, 0.4, 0.45])
        _table(ax2, ["parameter (worst R-hat first)", "R-hat", "ESS bulk", "ESS tail"], wrows, fontsize=8.5)
    fig.text(0.04, 0.2, _wrap("R-hat compares the chains: above 1.01 they disagree. ESS is the number of effectively "
                              "independent draws; below 400 the interval ends are noisy. Divergences mean the sampler "
                              "missed part of the posterior. E-BFMI below 0.3 means the momentum resampling explores "
                              "the energy levels poorly (heavy tails or funnels).", 140),
             fontsize=9, va="top", color="#333333")
    _finish(pdf, fig)


# ---------------------------------------------------------------------------- page 5
def _page_ppc(pdf, f: _Fit) -> None:
    import arviz as az

    fig = _page(pdf, PAGE_TITLES[4], "Left: densities of the observed outcomes and of 50 posterior-predictive replicates "
                "(centred logs). Right: observed against predicted median with central "
                f"{f.prob:g} predictive intervals, every training run.")
    idata = f.idata
    if "posterior_predictive" not in idata.groups():
        fig.text(0.04, 0.8, "The posterior has no posterior_predictive group (fitted with predictive=False).", fontsize=12)
        _finish(pdf, fig)
        return
    centre = f.spec.config["centre"]
    strat = f.table["strategy"].astype(str).to_numpy()
    for i, (var, unit, key) in enumerate((("log_energy", "energy (J)", "log_energy"), ("log_time", "time (s)", "log_time"))):
        if var not in idata.posterior_predictive:
            continue
        ax = fig.add_axes([0.06, 0.49 - 0.41 * i, 0.38, 0.32])
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            az.plot_ppc(idata, var_names=[var], num_pp_samples=50, ax=ax, random_seed=1, legend=(i == 0))
        ax.set_title(f"{var} (centred ln {unit.split()[-1].strip('()')})", fontsize=10)
        ax.set_xlabel("")
        ax.tick_params(labelsize=8)
        if ax.get_legend() is not None:
            ax.legend(fontsize=8, frameon=False, loc="upper left")
        pp = sample_array(idata.posterior_predictive[var]) + centre[key]
        obs = idata.observed_data[var].to_numpy() + centre[key]
        lo, med, hi = np.quantile(pp, [(1 - f.prob) / 2, 0.5, (1 + f.prob) / 2], axis=0)
        ax2 = fig.add_axes([0.56, 0.49 - 0.41 * i, 0.38, 0.32])
        for s in f.spec.strategies:
            m = strat == s
            if m.any():
                ax2.errorbar(np.exp(med[m]), np.exp(obs[m]), xerr=[np.exp(med[m]) - np.exp(lo[m]), np.exp(hi[m]) - np.exp(med[m])],
                             fmt="o", ms=2.5, lw=0.5, alpha=0.6, color=STRATEGY_COLOURS.get(s), label=s)
        lims = [np.exp(min(lo.min(), obs.min())), np.exp(max(hi.max(), obs.max()))]
        ax2.plot(lims, lims, color="k", lw=0.8, ls="--")
        ax2.set_xscale("log")
        ax2.set_yscale("log")
        ax2.set_xlabel(f"predicted {unit}", fontsize=9)
        ax2.set_ylabel(f"observed {unit}", fontsize=9)
        ax2.tick_params(labelsize=8)
        inside = np.mean((obs >= lo) & (obs <= hi))
        ax2.set_title(f"{unit.split()[0]}: {inside:.0%} of runs inside their {f.prob:g} interval", fontsize=10)
        ax2.grid(alpha=0.3, lw=0.4)
        if i == 0:
            ax2.legend(fontsize=8, frameon=False, loc="upper left")
    _finish(pdf, fig)


# ---------------------------------------------------------------------------- page 6
def _representative_z(f: _Fit, cell: str, strategy: str) -> np.ndarray:
    df = f.table
    cells = cell_labels(df)
    rows = df[(cells == cell) & (df["strategy"] == strategy)]
    if rows.empty:
        rows = df[cells == cell]
    return np.median(f.spec.arrays(rows)["Z"], axis=0)


def curve_draws(f: _Fit, cell: str, strategy: str, n: np.ndarray) -> np.ndarray:
    """Posterior draws of the speedup S(N) = N η(N), shape (sample, len(n)), for a cell's typical run."""
    from .models.law import log_eta_from_curves
    from .models.spec import CURVE_OF

    post = f.idata.posterior
    P = {k: sample_array(post[k]) for k in ("curve_cell", "curve_beta") if k in post}
    A = {"n_gpus": n.astype(float), "curve": np.full(len(n), CURVE_OF[strategy]),  # one run per device count
         "cell_idx": np.full(len(n), list(f.spec.coords["cell"]).index(cell)),
         "Z": np.tile(_representative_z(f, cell, strategy), (len(n), 1))}
    return n[None, :] * np.exp(log_eta_from_curves(P, A, np))


def _page_curves(pdf, f: _Fit) -> None:
    cells = list(f.spec.coords["cell"])
    strategies = [s for s in f.spec.strategies if s != "single"]
    df = f.table
    nmax = int(max(8, df["n_gpus"].max()))
    n = np.arange(1, nmax + 1)
    fig = _page(pdf, PAGE_TITLES[5], f"Speedup S(N) = N·η(N) of each cell's typical run (median covariates of its measured runs); "
                f"line: posterior median, band: central {f.prob:g} interval of the curve; points: measured speedups; dashed: "
                "linear speedup. Grey panels: strategy not measured in that cell (population curve).")
    nr, nc = max(len(cells), 1), max(len(strategies), 1)
    gs = fig.add_gridspec(nr, nc, left=0.07, right=0.97, top=0.82, bottom=0.07, hspace=0.55, wspace=0.22)
    cell_of = cell_labels(df)
    for i, cell in enumerate(cells):
        for j, s in enumerate(strategies):
            ax = fig.add_subplot(gs[i, j])
            S = curve_draws(f, cell, s, n)
            lo, med, hi = np.quantile(S, [(1 - f.prob) / 2, 0.5, (1 + f.prob) / 2], axis=0)
            pts = df[(cell_of == cell) & (df["strategy"] == s)]
            colour = STRATEGY_COLOURS.get(s, "C0") if len(pts) else "#999999"
            ax.fill_between(n, lo, hi, color=colour, alpha=0.25, lw=0)
            ax.plot(n, med, color=colour, lw=1.5)
            ax.plot(n, n, color="k", lw=0.7, ls="--")
            if len(pts) and "speedup" in pts.columns:
                ax.scatter(pts["n_gpus"], pts["speedup"], s=8, color="k", alpha=0.5, zorder=3)
            ax.set_xlim(1, nmax)
            ax.set_ylim(0, max(2.0, float(np.nanmax(hi)) * 1.05, float(pts["speedup"].max()) * 1.05 if len(pts) else 0))
            ax.set_title(f"{_cell_title(cell)} · {s}" + ("" if len(pts) else " (not measured)"), fontsize=9)
            ax.tick_params(labelsize=8)
            ax.grid(alpha=0.3, lw=0.4)
            if i == nr - 1:
                ax.set_xlabel("devices N", fontsize=9)
            if j == 0:
                ax.set_ylabel("speedup", fontsize=9)
    _finish(pdf, fig)


# ---------------------------------------------------------------------------- page 7
def representative_workload(f: _Fit, cell: str) -> pd.DataFrame:
    """The configuration family of a cell measured with the most strategies and device counts."""
    df = f.table
    cell_of = cell_labels(df)
    rows = df[cell_of == cell]
    from .models.spec import group_keys

    keys = group_keys(rows)
    score = rows.groupby(keys).apply(lambda g: (g["strategy"].nunique(), g["n_gpus"].nunique(), len(g)), include_groups=False)
    best = max(score.index, key=lambda k: score[k])
    return rows[keys == best]


def _page_device_count(pdf, f: _Fit) -> None:
    from .predict import predict_draws

    cells = list(f.spec.coords["cell"])
    df = f.table
    nmax = int(max(8, df["n_gpus"].max()))
    fig = _page(pdf, PAGE_TITLES[6], "Pre-run predictions for each cell's most thoroughly measured workload (its configuration "
                f"family) at its single-device token count: median and central {f.prob:g} predictive band per strategy; "
                "points: its measured runs at their own token counts (weak scaling gives more devices more tokens), open bars: "
                "their pre-run predictions. Beyond the measured device counts the band is the curves' extrapolation.")
    gs = fig.add_gridspec(2, max(len(cells), 1), left=0.07, right=0.97, top=0.77, bottom=0.08, hspace=0.35, wspace=0.25)
    for j, cell in enumerate(cells):
        rows = representative_workload(f, cell)
        base = rows.iloc[[0]].drop(columns=[c for c in ("strategy", "n_gpus") if c in rows.columns])
        cands = []
        for s in f.spec.strategies:
            for n in ([1] if s == "single" else range(2, nmax + 1)):
                c = base.copy()
                c["strategy"], c["n_gpus"] = s, n
                cands.append(c)
        cands = pd.concat(cands, ignore_index=True)
        cands["tokens"] = float(rows.loc[rows["strategy"] == "single", "tokens"].mean()) if (rows["strategy"] == "single").any() \
            else float(rows["tokens"].mean())
        draws = predict_draws(f.idata, cands, seed=7)
        own = predict_draws(f.idata, rows.reset_index(drop=True), seed=7)  # each measured run at its own tokens
        r0 = rows.iloc[0]
        cell_rows = df[cell_labels(df) == cell]
        measured = set(cell_rows["strategy"])
        en, eu = _energy_unit(rows["energy_j"])
        for i, (var, scale, label) in enumerate((("log_energy_j", 1 / eu, f"energy ({en})"), ("log_time_s", 1.0, "time (s)"))):
            ax = fig.add_subplot(gs[i, j])
            vals = np.exp(draws[var]) * scale
            lo, med, hi = np.quantile(vals, [(1 - f.prob) / 2, 0.5, (1 + f.prob) / 2], axis=0)
            for k, s in enumerate(f.spec.strategies):
                m = (cands["strategy"] == s).to_numpy()
                x = cands.loc[m, "n_gpus"].to_numpy() * (1 + 0.03 * (k - 1))  # dodge
                col = STRATEGY_COLOURS.get(s, f"C{k}")
                if s == "single":
                    ax.errorbar(x, med[m], yerr=[med[m] - lo[m], hi[m] - med[m]], fmt="o", color=col, ms=4, capsize=3, label=s)
                else:
                    ax.fill_between(x, lo[m], hi[m], color=col, alpha=0.18 if s in measured else 0.08, lw=0)
                    ax.plot(x, med[m], color=col, lw=1.5, ls="-" if s in measured else ":",
                            label=s if s in measured else f"{s} (not measured here)")
                mo = (rows["strategy"] == s).to_numpy()
                obs = rows[mo]
                y = obs["energy_j"] * scale if var == "log_energy_j" else obs["time_s"]
                ax.scatter(obs["n_gpus"], y, s=16, color=col, edgecolor="k", lw=0.5, zorder=4)
                if s != "single" and mo.any():
                    q = np.quantile(np.exp(own[var][:, mo]) * scale, [(1 - f.prob) / 2, 0.5, (1 + f.prob) / 2], axis=0)
                    ax.errorbar(obs["n_gpus"].to_numpy() * 1.04, q[1], yerr=[q[1] - q[0], q[2] - q[1]], fmt="o", mfc="none",
                                color=col, ms=4, capsize=2, lw=0.8, zorder=3)
            ax.set_yscale("log")
            ax.set_xticks(range(1, nmax + 1))
            ax.tick_params(labelsize=8)
            ax.grid(alpha=0.3, lw=0.4, which="both")
            ax.set_ylabel(label, fontsize=9)
            if i == 0:
                ax.set_title(f"{_cell_title(cell)}\nL={r0['num_layers']}, d={r0['hidden_size']}, S={r0['seq_len']}, "
                             f"B={r0['batch_size']}, {cands['tokens'].iloc[0]:.3g} tokens", fontsize=9)
                ax.legend(fontsize=7.5, frameon=False)
            else:
                ax.set_xlabel("devices", fontsize=9)
    _finish(pdf, fig)


# ---------------------------------------------------------------------------- page 8
def _page_loo(pdf, f: _Fit) -> None:
    import arviz as az

    fig = _page(pdf, PAGE_TITLES[7], "Pareto-smoothed importance-sampling LOO on the energy likelihood (log_energy). "
                "elpd: expected log predictive density of a left-out run (higher is better).")
    idata = f.idata
    y0 = 0.86
    if f.compare is not None:
        cmp = f.compare
        cols = [c for c in ("rank", "elpd_loo", "p_loo", "elpd_diff", "weight", "se", "dse", "warning") if c in cmp.columns]
        rows = [[str(name)] + [(_fmt(r[c], 2) if isinstance(r[c], float) else str(r[c])) for c in cols] for name, r in cmp.iterrows()]
        ax = fig.add_axes([0.04, 0.62, 0.55, 0.22])
        _table(ax, ["model"] + cols, rows, fontsize=9)
        ax.set_title("model comparison (compare.csv)", fontsize=10, loc="left")
        ax2 = fig.add_axes([0.66, 0.64, 0.3, 0.2])
        order = cmp.sort_values("elpd_loo")
        ax2.errorbar(order["elpd_loo"], range(len(order)), xerr=order["se"], fmt="o", color="k", capsize=3)
        ax2.set_yticks(range(len(order)), [str(i) for i in order.index])
        ax2.set_xlabel("elpd_loo ± se", fontsize=9)
        ax2.grid(alpha=0.3, lw=0.4)
        y0 = 0.55
    else:
        fig.text(0.04, y0, "compare.csv is absent (fit without --compare): the model's own LOO follows.", fontsize=10, va="top")
        y0 -= 0.05
    if "log_likelihood" not in idata.groups() or "log_energy" not in idata.log_likelihood:
        fig.text(0.04, y0, "The posterior has no log-likelihood of log_energy; LOO cannot be computed.", fontsize=11, va="top")
        _finish(pdf, fig)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loo = az.loo(idata, var_name="log_energy", pointwise=True)
    k = np.asarray(loo.pareto_k)
    rows = [["elpd_loo", f"{loo.elpd_loo:.1f}"], ["se", f"{loo.se:.1f}"], ["p_loo", f"{loo.p_loo:.1f}"],
            ["runs", str(len(k))], ["Pareto k > 0.7", f"{int(np.sum(k > 0.7))} ({np.mean(k > 0.7):.1%})"],
            ["largest Pareto k", f"{k.max():.2f}"]]
    ax = fig.add_axes([0.04, 0.08, 0.25, y0 - 0.12])
    _table(ax, [f"{f.spec.name}", "value"], rows, fontsize=10, row_height=1.6)
    ax3 = fig.add_axes([0.36, 0.1, 0.45, y0 - 0.16])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        az.plot_khat(loo, ax=ax3, show_hlines=True, show_bins=True, markersize=6, textsize=9)
    ax3.set_title("Pareto k per run (above 0.7: that run's LOO estimate is unreliable)", fontsize=10)
    ax3.set_xlabel("run", fontsize=9)
    ax3.set_ylabel("Pareto k", fontsize=9)
    ax3.tick_params(labelsize=8)
    ax4 = fig.add_axes([0.84, 0.1, 0.12, y0 - 0.16], sharey=ax3)
    ax4.hist(k, bins=30, orientation="horizontal", color="C0", alpha=0.7)
    ax4.axhline(0.7, color="C1", ls="--", lw=1)
    ax4.set_xlabel("runs", fontsize=9)
    ax4.set_title("histogram", fontsize=10)
    ax4.tick_params(labelsize=8, labelleft=False)
    _finish(pdf, fig)


# ---------------------------------------------------------------------------- page 9
def coverage(idata, var: str, nominal=NOMINAL) -> np.ndarray:
    """Share of observations inside their central posterior-predictive intervals.

    Parameters
    ----------
    idata : arviz.InferenceData
        With ``posterior_predictive`` and ``observed_data`` of ``var``.
    var : str
        An observed variable, e.g. ``log_energy``.
    nominal : sequence of float
        Central interval probabilities.

    Returns
    -------
    numpy.ndarray
        Observed coverage at each nominal level (in-sample).
    """
    pp = sample_array(idata.posterior_predictive[var])
    obs = idata.observed_data[var].to_numpy()
    out = []
    for q in nominal:
        lo, hi = np.quantile(pp, [(1 - q) / 2, (1 + q) / 2], axis=0)
        out.append(np.mean((obs >= lo) & (obs <= hi)))
    return np.array(out)


def _page_calibration(pdf, f: _Fit) -> None:
    fig = _page(pdf, PAGE_TITLES[8], "Observed share of training runs inside their central posterior-predictive interval, "
                "against the interval's nominal probability. IN-SAMPLE: the same runs fitted the model, so this checks the "
                "noise model, not out-of-sample accuracy (see the validation harness for held-out coverage).")
    idata = f.idata
    if "posterior_predictive" not in idata.groups():
        fig.text(0.04, 0.8, "No posterior_predictive group: calibration cannot be computed.", fontsize=12)
        _finish(pdf, fig)
        return
    ax = fig.add_axes([0.07, 0.1, 0.45, 0.72])
    ax.plot([0, 1], [0, 1], color="k", ls="--", lw=0.8, label="perfect calibration")
    cov = {}
    labels = {"log_energy": "energy", "log_time": "time", "log_eta": "efficiency (curve rows)"}
    for k, var in enumerate(("log_energy", "log_time", "log_eta")):
        if var in idata.posterior_predictive and var in idata.observed_data:
            cov[var] = coverage(idata, var)
            ax.plot(NOMINAL, cov[var], marker="o", color=f"C{k}", label=labels[var])
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("nominal probability of the central interval")
    ax.set_ylabel("observed coverage (in-sample)")
    ax.grid(alpha=0.3, lw=0.4)
    ax.legend(frameon=False, fontsize=9, loc="upper left")
    rows = [[f"{q:.2f}"] + [f"{cov[v][i]:.3f}" for v in cov] for i, q in enumerate(NOMINAL)]
    ax2 = fig.add_axes([0.6, 0.3, 0.35, 0.52])
    _table(ax2, ["nominal"] + [labels[v].split()[0] for v in cov], rows, fontsize=9.5, row_height=1.5)
    fig.text(0.6, 0.24, _wrap("Above the diagonal: intervals too wide (conservative); below: too narrow "
                              "(overconfident). In-sample coverage is optimistic: held-out runs are covered less often.",
                              60), fontsize=9, va="top", color="#333333")
    _finish(pdf, fig)


# ---------------------------------------------------------------------------- page 10
def example_plan(f: _Fit):
    """An example plan with a deadline that binds.

    The workload is the largest model of the hardware x family cell measured
    with the most strategies; the candidates are the strategies measured there.
    """
    from .plan import Workload, evaluate, plan

    df = f.table
    cell_of = cell_labels(df)
    n_strat = df.groupby(cell_of)["strategy"].nunique()
    cell = n_strat.index[np.argmax(n_strat.to_numpy())]
    rows = df[cell_of == cell]
    size = rows["num_layers"] * rows["hidden_size"] ** 2
    r = rows.loc[size.idxmax()]
    strategies = [s for s in f.spec.strategies if s in set(rows["strategy"])]
    w = Workload(family=r["family"], num_layers=int(r["num_layers"]), hidden_size=int(r["hidden_size"]), ff=int(r["ff"]),
                 seq_len=int(r["seq_len"]), batch_size=int(r["batch_size"]), tokens=float(r["tokens"]),
                 grad_accum=int(r["grad_accum"]))
    n_max = int(max(8, df["n_gpus"].max()))
    counts = sorted({1, 2, 4, n_max} | {int(n) for n in df["n_gpus"].unique()})
    first = plan(f.idata, w, strategies=strategies, hardware=[r["hardware"]], n_gpus=counts, seed=11)
    single = first.table[first.table["strategy"] == "single"]
    ref = single.iloc[0] if len(single) else first.table.iloc[0]
    fastest = int(first.table["time_s_median"].idxmin())
    deadline = float(f"{np.quantile(first.draws['time_s'][:, fastest], 0.9):.3g}")
    budget = float(f"{1.25 * ref['energy_j_median']:.3g}")
    return evaluate(first.table[["hardware", "strategy", "n_gpus", "evidence"]], first.draws["energy_j"], first.draws["time_s"],
                    deadline_s=deadline, p=0.8, energy_budget_j=budget, prob=f.prob), w


def _page_plan(pdf, f: _Fit) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result, w = example_plan(f)
    t = result.table
    hw = _hw_short(t["hardware"].iloc[0])
    en, eu = _energy_unit(t["energy_j_median"])
    fig = _page(pdf, PAGE_TITLES[9],
                f"Workload: {w.family}, L={w.num_layers}, d={w.hidden_size}, ff={w.ff}, S={w.seq_len}, B={w.batch_size}, "
                f"{w.tokens:.3g} tokens, on {hw}. Deadline {result.deadline_s:.4g} s (the 90th percentile of the fastest candidate's "
                f"time), to be met with probability ≥ {result.p:g}; energy budget {result.energy_budget_j / eu:.4g} {en} (1.25 x the "
                "single-device median).")
    pct = int(round(result.prob * 100))
    rows, colours = [], []
    for _, r in t.iterrows():
        rows.append([f"{r['strategy']} x {int(r['n_gpus'])}" + ("  ◀ recommended" if r["recommended"] else ""), f"{r['energy_j_median'] / eu:.4g}",
                     f"{r['energy_j_lo'] / eu:.4g} – {r['energy_j_hi'] / eu:.4g}", f"{r['time_s_median']:.4g}",
                     f"{r['time_s_lo']:.4g} – {r['time_s_hi']:.4g}", f"{r['power_w_median']:.3g}",
                     f"{r['p_deadline']:.2f}", f"{r['p_budget']:.2f}",
                     "–" if not np.isfinite(r["p_energy_below_single"]) else f"{r['p_energy_below_single']:.2f}",
                     "yes" if r["pareto"] else "", r["evidence"]])
        colours.append([PASS_COLOUR if r["recommended"] else None] + [None] * 10)
    top = 0.8
    ax = fig.add_axes([0.03, 0.05, 0.9, top - 0.05])
    _table(ax, ["candidate", f"E median {en}", f"E {pct}% {en}", "T median s", f"T {pct}% s", "power W", "P(T≤deadline)",
                "P(E≤budget)", "P(E<E single)", "Pareto", "evidence"], rows, fontsize=8, colours=colours)
    rec = result.recommendation
    text = ("Recommendation: " + (f"{rec['strategy']} on {int(rec['n_gpus'])} device(s), the lowest median energy among "
                                  f"the candidates that meet the deadline with probability ≥ {result.p:g}." if rec is not None
                                  else "none; no candidate meets the deadline with the required probability.")
            + "".join("\n\n" + n[0].upper() + n[1:] + "." for n in result.notes) + "\n\nP(E<E single): probability of "
            "using less energy than the single-device run. Probabilities come from joint posterior-predictive draws"
            + ("; the candidates share one draw of the workload's configuration-family effect"
               if f.spec.config.get("group_effects") else "") +
            ". Command line: python -m bayes_energy.plan --posterior posterior.nc --family ... --deadline-s ... --p ... "
            "--energy-budget-j ...")
    fig.text(0.04, top - _table_height(len(rows)) - 0.05, _wrap(text, 150), fontsize=9, va="top", linespacing=1.4)
    _finish(pdf, fig)


# ---------------------------------------------------------------------------- page 11 (when asked)
def carbon_plan(f: _Fit, sites):
    """The example plan (:func:`example_plan`) at each site, ranked by CO2e (by cost without an intensity)."""
    from .carbon import cross_sites, factor_rng
    from .plan import evaluate

    base, w = example_plan(f)
    cands = base.table[["hardware", "strategy", "n_gpus", "evidence"]]
    cc, energy, time, conv = cross_sites(cands, base.draws["energy_j"], base.draws["time_s"], sites, factor_rng(11))
    objective = "co2e" if "co2e_kg" in conv else "cost"
    result = evaluate(cc, energy, time, deadline_s=base.deadline_s, p=base.p, prob=f.prob, co2e_kg=conv.get("co2e_kg"),
                      cost=conv.get("cost"), objective=objective, currency=sites[0].currency,
                      sites=[s.describe(f.prob) for s in sites])
    return result, w


def _page_carbon(pdf, f: _Fit, sites) -> None:
    from .carbon import ANNUAL_AVERAGE_NOTE
    from .schema import KWH_TO_J

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result, w = carbon_plan(f, sites)
    t = result.table
    pct = int(round(result.prob * 100))
    q = "co2e_kg" if result.objective == "co2e" else "cost"
    unit = "kg CO2e" if q == "co2e_kg" else (sites[0].currency or "cost")
    fig = _page(pdf, CARBON_PAGE_TITLE,
                f"The example plan of page 10 ({w.family}, L={w.num_layers}, d={w.hidden_size}, {w.tokens:.3g} tokens on "
                f"{_hw_short(t['hardware'].iloc[0])}; deadline {result.deadline_s:.4g} s with probability ≥ {result.p:g}) "
                "at each site. CO2e = energy x PUE x grid intensity, cost = energy x PUE x price, for every joint "
                f"posterior-predictive draw; intervals are central {pct} %. Note: {ANNUAL_AVERAGE_NOTE}.")
    en, eu = _energy_unit(t["energy_j_median"])
    has = {k: f"{k}_median" in t.columns for k in ("co2e_kg", "cost")}
    cur = f" {sites[0].currency}" if sites[0].currency else ""
    site_text = "\n".join(textwrap.fill("• " + s.describe(result.prob), 175, subsequent_indent="   ") for s in sites)
    site_text += ("\nA spread (MEAN+-SD) is drawn as a lognormal with that mean and standard deviation (the PUE as 1 plus "
                  "a lognormal); one factor draw per energy draw, shared by the candidates of a site.")
    fig.text(0.04, 0.83, site_text, fontsize=7.5, va="top", linespacing=1.35, color="#222222")
    top = 0.83 - 0.022 * (site_text.count("\n") + 1) - 0.03
    rows, colours = [], []
    for _, r in t.iterrows():
        row = [f"{r['strategy']} x {int(r['n_gpus'])}" + ("  ◀" if r["recommended"] else ""), str(r["region"]),
               f"{r['energy_j_median'] / eu:.4g}"]
        for k in ("co2e_kg", "cost"):
            if has[k]:
                row.append(f"{r[f'{k}_median']:.3g}   ({r[f'{k}_lo']:.3g} – {r[f'{k}_hi']:.3g})")
        row.append(f"{r['p_deadline']:.2f}")
        rows.append(row)
        colours.append([PASS_COLOUR if r["recommended"] else None] + [None] * (len(row) - 1))
    header = ["candidate", "site", f"E median {en}"]
    if has["co2e_kg"]:
        header.append(f"CO2e kg: median ({pct}%)")
    if has["cost"]:
        header.append(f"cost{cur}: median ({pct}%)")
    header.append("P(T≤deadline)")
    ax = fig.add_axes([0.03, 0.04, 0.56, top - 0.04])
    _table(ax, header, rows, fontsize=7.5 if len(rows) > 12 else 8.5, colours=colours,
           row_height=1.25 if len(rows) > 20 else 1.35)

    # intervals by site: the full ones (factor spreads included) and, shaded, those of the energy alone x mean factors
    ax2 = fig.add_axes([0.7, 0.27, 0.27, top - 0.3])
    y = np.arange(len(t))[::-1]
    for j, s in enumerate(sites):
        m = (t["region"] == s.label).to_numpy()
        col = f"C{j}"
        factor = s.pue.mean * ((s.intensity.mean / 1e3) if q == "co2e_kg" else s.price.mean) / KWH_TO_J
        ax2.hlines(y[m], t.loc[m, "energy_j_lo"] * factor, t.loc[m, "energy_j_hi"] * factor, color=col, lw=6, alpha=0.25)
        ax2.hlines(y[m], t.loc[m, f"{q}_lo"], t.loc[m, f"{q}_hi"], color=col, lw=1.6, label=s.label)
        ax2.plot(t.loc[m, f"{q}_median"], y[m], "o", color=col, ms=3.5)
    rec = result.recommendation
    if rec is not None:
        i = int(result.recommended)
        ax2.plot([rec[f"{q}_median"]], [y[i]], "o", ms=10, mfc="none", mec="k", mew=1.2, label="recommended")
    ax2.set_yticks(y, [f"{r['strategy']} x{int(r['n_gpus'])} {r['region']}" for _, r in t.iterrows()], fontsize=6.5)
    ax2.set_xscale("log")
    ax2.tick_params(axis="x", labelsize=7.5)
    ax2.set_xlabel(f"{'CO2e (kg)' if q == 'co2e_kg' else 'cost (' + unit + ')'}, log scale", fontsize=8.5)
    ax2.set_title(f"{pct} % intervals (lines); shaded: the energy's\nalone, times the factors' means", fontsize=8.5)
    ax2.grid(alpha=0.3, lw=0.4, which="both")
    ax2.legend(fontsize=7, frameon=False, loc="upper right")
    lines = []
    if rec is not None:
        lines.append(f"Recommended (lowest median {'CO2e' if q == 'co2e_kg' else 'cost'} among the candidates meeting the "
                     f"deadline): {rec['strategy']} on {int(rec['n_gpus'])} device(s) at {rec['region']}.")
    else:
        lines.append("Recommended: none; no candidate meets the deadline with the required probability.")
    lines += [n[0].upper() + n[1:] + "." for n in result.notes if "fastest" in n]
    fig.text(0.62, 0.19, "\n".join(textwrap.fill(x, 64) for x in lines), fontsize=7.5, va="top", linespacing=1.35)
    _finish(pdf, fig)


# ---------------------------------------------------------------------------- entry points
PAGES = (_page_data, _page_model, _page_coefficients, _page_diagnostics, _page_ppc, _page_curves,
         _page_device_count, _page_loo, _page_calibration, _page_plan)


def write_report(fit_dir, out_pdf=None, idata=None, table: pd.DataFrame | None = None, sites=None) -> Path:
    """Write the ten-page PDF report of a fit (eleven with ``sites``).

    Parameters
    ----------
    fit_dir : path
        A folder written by ``python -m bayes_energy.fit`` (``posterior.nc``,
        ``summary.csv``, ``diagnostics.json``, optionally ``compare.csv``).
    out_pdf : path, optional
        Where to write; default ``fit_dir/report.pdf``.
    idata : arviz.InferenceData, optional
        The posterior, when already in memory (skips reading ``posterior.nc``).
    table : pandas.DataFrame, optional
        The training table; default the one stored in the posterior.
    sites : bayes_energy.carbon.Site or sequence of Site, optional
        Add page 11: the example plan's CO2e and cost at these sites.

    Returns
    -------
    pathlib.Path
        The PDF written (atomically: a temporary file, then a rename).

    Examples
    --------
    >>> write_report("fits/default", "reports/default.pdf")  # doctest: +SKIP
    """
    import matplotlib
    from matplotlib.backends.backend_pdf import PdfPages

    fit_dir = Path(fit_dir)
    out = Path(out_pdf) if out_pdf is not None else fit_dir / "report.pdf"
    f = _load(fit_dir, idata=idata, table=table)
    if sites is not None:
        from .carbon import Site

        sites = [sites] if isinstance(sites, Site) else list(sites)
    rc = {"pdf.fonttype": 42, "font.size": 9, "axes.titlesize": 10, "figure.dpi": 100}

    def write(tmp):
        with matplotlib.rc_context(rc), PdfPages(tmp, metadata={"Title": f"bayes_energy report: {_folder(fit_dir)}",
                                                         "Creator": f"bayes_energy {__version__}"}) as pdf:
            for page in PAGES:
                page(pdf, f)
            if sites:
                _page_carbon(pdf, f, sites)

    write_file(out, write)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m bayes_energy.report DIR [--out PDF] [--overwrite]``; returns the exit status."""
    plain_warnings()
    ap = Parser(prog="python -m bayes_energy.report", description="Write the PDF report of a fit folder.")
    ap.add_argument("fit_dir", help="folder written by python -m bayes_energy.fit")
    ap.add_argument("--out", help="PDF to write (default FIT_DIR/report.pdf, replaced if there)")
    ap.add_argument("--overwrite", action="store_true", help="replace the --out file if it exists")
    from .carbon import add_site_arguments, sites_from_args

    add_site_arguments(ap, multiple=True)  # page 11: carbon and cost, when given
    args = ap.parse_args(argv)
    from .models.io import PosteriorFileError
    from .schema import SchemaError

    fit_dir = Path(args.fit_dir)
    try:
        if not fit_dir.is_dir():
            raise OutputError(f"{fit_dir}: {'is a file' if fit_dir.exists() else 'no such folder'}; "
                              "give a folder written by python -m bayes_energy.fit")
        sites = sites_from_args(args)
        if args.out is not None:
            check_output_file(args.out, "--out", overwrite=args.overwrite)
        else:
            check_output_file(fit_dir / "report.pdf", "report", overwrite=True)
        out = write_report(fit_dir, out_pdf=args.out, sites=sites or None)
    except (PosteriorFileError, OutputError, FileNotFoundError, ValueError, SchemaError) as err:
        return fail(err)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
