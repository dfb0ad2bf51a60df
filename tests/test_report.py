"""bayes_energy.report: the ten-page PDF, its numbers against summary.csv, the CLI."""

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayes_energy.report import PAGE_TITLES, coefficient_rows, diagnostic_rows

ROOT = Path(__file__).resolve().parents[1]
LAW_ROWS = ("E_mu[log_compute]", "E_mu[log_memory]", "E_mu[log_eta]", "E_psi[fsdp]", "E_psi[tp]",
            "curve_mu[usl_sigma]", "curve_mu[usl_omega]", "curve_mu[tp_gain]", "curve_mu[tp_rate]")


def _pages_text(path):
    pdfium = pytest.importorskip("pypdfium2")
    pdf = pdfium.PdfDocument(str(path))
    try:
        return [pdf[i].get_textpage().get_text_range().replace("\u2212", "-").replace("\r", "") for i in range(len(pdf))]
    finally:
        pdf.close()


def test_diagnostic_rows_say_pass_or_fail_plainly():
    diag = {"divergences": 3, "max_rhat": 1.005, "min_ess_bulk": 120.0, "min_ess_tail": 500.0, "min_bfmi": 0.8,
            "max_pareto_k": 0.5, "n_pareto_k_gt_0_7": 0,
            "thresholds": {"max_rhat": 1.01, "min_ess_bulk": 400, "min_ess_tail": 400, "divergences": 0, "min_bfmi": 0.3}}
    rows, _ = diagnostic_rows(diag)
    verdict = {r[0]: r[3] for r in rows}
    assert verdict == {"divergent transitions": "FAIL", "largest R-hat": "PASS", "smallest bulk ESS": "FAIL",
                       "smallest tail ESS": "PASS", "smallest E-BFMI": "PASS", "Pareto k > 0.7 (LOO, energy)": "ok"}


@pytest.fixture(scope="module")
def report_pdf(small_fit_dir, tmp_path_factory, isolated_env):
    """The report written by the CLI from a fit folder (no compare.csv)."""
    out = tmp_path_factory.mktemp("report") / "nested" / "small.pdf"
    r = subprocess.run([sys.executable, "-m", "bayes_energy.report", str(small_fit_dir), "--out", str(out)],
                       cwd=ROOT, env=isolated_env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert out.is_file() and f"wrote {out}" in r.stdout
    return out


@pytest.mark.slow
def test_report_has_ten_titled_pages(report_pdf):
    texts = _pages_text(report_pdf)
    assert len(texts) == len(PAGE_TITLES) == 10
    for i, (text, title) in enumerate(zip(texts, PAGE_TITLES)):
        words = title.split("  ", 1)[1].split()[0]
        assert words in text, (i + 1, title)
    assert "IN-SAMPLE" in texts[8] and "compare.csv is absent" in texts[7] and "Recommendation" in texts[9]


@pytest.mark.slow
def test_coefficient_table_matches_summary_csv(report_pdf, small_fit_dir):
    summary = pd.read_csv(small_fit_dir / "summary.csv", index_col=0)
    page = _pages_text(report_pdf)[2]
    for name in LAW_ROWS:
        row = summary.loc[name]
        for col in ["mean", "sd", *[c for c in summary.columns if c.startswith("hdi_")]]:
            assert f"{row[col]:.3f}" in page, (name, col, row[col])
        assert name in page
    assert "αC" in page and "αM" in page and "αη" in page and "Ψ fsdp" in page
    # the rows are in the order coefficient_rows gives, with summary values
    from bayes_energy.models.io import load_spec
    from bayes_energy.models.io import load

    spec = load_spec(load(small_fit_dir / "posterior.nc"))
    rows, _, names = coefficient_rows(summary, spec)
    for r, name in zip(rows, names):
        if name:
            assert r[2] == f"{summary.loc[name, 'mean']:.3f}"


@pytest.mark.slow
def test_diagnostics_page_agrees_with_diagnostics_json(report_pdf, small_fit_dir):
    diag = json.loads((small_fit_dir / "diagnostics.json").read_text())
    page = _pages_text(report_pdf)[3]
    assert ("PASSED" in page) == diag["passed"] and ("FAILED" in page) == (not diag["passed"])
    assert f"{diag['max_rhat']:.3f}" in page


@pytest.mark.slow
def test_report_pages_render(report_pdf, tmp_path):
    pdfium = pytest.importorskip("pypdfium2")
    pdf = pdfium.PdfDocument(str(report_pdf))
    try:
        for i in (2, 5, 6):  # coefficients, speedup curves, energy vs device count
            img = np.asarray(pdf[i].render(scale=0.5).to_pil().convert("L"))
            assert img.shape[1] > img.shape[0]  # landscape
            assert (img < 128).mean() > 0.005  # something is drawn
    finally:
        pdf.close()


@pytest.mark.slow
def test_write_report_in_memory_with_model_comparison(small_fit, small_fit_dir, tmp_path):
    import arviz as az

    from bayes_energy.report import write_report

    idata, table = small_fit
    fit_dir = tmp_path / "fit"
    fit_dir.mkdir()
    for name in ("summary.csv", "diagnostics.json"):
        shutil.copy(small_fit_dir / name, fit_dir / name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cmp = az.compare({"hierarchical": idata, "same_again": idata}, ic="loo", var_name="log_energy")
    cmp.rename_axis("model").to_csv(fit_dir / "compare.csv")
    out = write_report(fit_dir, idata=idata, table=table)  # no posterior.nc in the folder: idata is used
    assert out == fit_dir / "report.pdf" and not list(fit_dir.glob("*.tmp"))
    texts = _pages_text(out)
    assert len(texts) == 10
    assert "model comparison (compare.csv)" in texts[7] and "same_again" in texts[7]


def test_report_cli_refuses_a_folder_without_posterior(tmp_path, isolated_env):
    r = subprocess.run([sys.executable, "-m", "bayes_energy.report", str(tmp_path)], cwd=ROOT, env=isolated_env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "posterior.nc: no such file" in r.stderr and "Traceback" not in r.stderr
