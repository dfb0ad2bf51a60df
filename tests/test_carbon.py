"""bayes_energy.carbon: energy draws to kg CO2e and cost, the grid table, plan by CO2e or cost, the CLIs."""

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bayes_energy.carbon import (ANNUAL_AVERAGE_NOTE, Site, Uncertain, carbon_columns, convert, cross_sites,
                                 factor_rng, grid_intensity, load_grid_intensity, region_row, to_co2e, to_cost)
from bayes_energy.plan import Workload, evaluate, plan
from bayes_energy.schema import SchemaError

ROOT = Path(__file__).resolve().parents[1]
KWH = 3.6e6


def _lognormal_energy(median_j, sd=0.2, S=20_000, seed=0):
    rng = np.random.default_rng(seed)
    return np.exp(np.log(median_j) + sd * rng.standard_normal((S, len(median_j))))


def _width(x):
    lo, hi = np.quantile(x, [0.05, 0.95], axis=0)
    return hi / lo


# --------------------------------------------------------------------------- conversion maths
def test_one_kwh_at_400_g_with_pue_1_5_is_0_6_kg_and_costs_0_3():
    e = np.array([[KWH, 2 * KWH], [0.5 * KWH, 0.0]])  # (sample, candidate), joules
    np.testing.assert_allclose(to_co2e(e, 400.0, pue=1.5), [[0.6, 1.2], [0.3, 0.0]])
    np.testing.assert_allclose(to_cost(e, 0.2, pue=1.5), [[0.3, 0.6], [0.15, 0.0]])
    np.testing.assert_allclose(to_co2e(e, "400"), e / KWH * 0.4)  # PUE 1 by default; text is read as a number
    site = Site(intensity=400.0, pue=1.5, price=0.2)
    out = convert(e, site, np.random.default_rng(0))
    np.testing.assert_allclose(out["co2e_kg"], to_co2e(e, 400.0, pue=1.5))
    np.testing.assert_allclose(out["cost"], to_cost(e, 0.2, pue=1.5))


def test_carbon_columns_are_the_energy_quantiles_times_the_factors():
    logs = np.log(_lognormal_energy([1e6, 5e7], S=4001))
    cols = carbon_columns(logs, Site(intensity=300.0, pue=1.25, price=0.1), 0.9, np.random.default_rng(0))
    e_lo, e_med, e_hi = np.quantile(np.exp(logs), [0.05, 0.5, 0.95], axis=0, method="lower")
    for q, f in (("co2e_kg", 1.25 * 0.3 / KWH), ("cost", 1.25 * 0.1 / KWH)):
        np.testing.assert_allclose(cols[f"{q}_median"], e_med * f, rtol=1e-9)
        assert (cols[f"{q}_lo"] <= e_med * f).all() and (cols[f"{q}_hi"] >= e_med * f).all()
        np.testing.assert_allclose(cols[f"{q}_hi"] / cols[f"{q}_lo"], e_hi / e_lo, rtol=0.02)


def test_uncertain_is_read_from_text_and_checked():
    assert Uncertain.parse("0.35") == Uncertain(0.35)
    for text in ("0.35+-0.05", "0.35 ± 0.05", "0.35 +/- 0.05"):
        u = Uncertain.parse(text)
        assert (u.mean, u.sd) == (0.35, 0.05)
    assert Uncertain.parse("56+-10%").sd == pytest.approx(5.6)
    with pytest.raises(ValueError, match="MEAN\\+-SD"):
        Uncertain.parse("cheap")
    with pytest.raises(ValueError, match="below the lowest possible value 1"):
        Uncertain.parse("0.9", lower=1.0)
    with pytest.raises(ValueError, match="standard deviation must be >= 0"):
        Uncertain(1.0, -0.1)
    with pytest.raises(ValueError, match="a spread needs a mean above 1"):
        Uncertain(1.0, 0.1, lower=1.0)
    with pytest.raises(ValueError, match="PUE .* below the lowest possible value 1"):
        Site(intensity=100.0, pue=0.8)
    with pytest.raises(ValueError, match="price .*below the lowest possible value 0"):
        Site(intensity=100.0, price=-0.2)
    with pytest.raises(ValueError, match="PUE alone converts nothing"):
        Site(pue=1.2)


def test_a_spread_is_a_lognormal_with_that_mean_and_sd_and_a_pue_never_below_1():
    rng = np.random.default_rng(1)
    pue = Uncertain(1.1, 0.2, lower=1.0).draws(400_000, rng)
    assert pue.min() >= 1.0
    assert pue.mean() == pytest.approx(1.1, abs=0.003) and pue.std() == pytest.approx(0.2, rel=0.03)
    price = Uncertain(0.2, 0.05).draws(400_000, rng)
    assert price.min() > 0 and price.mean() == pytest.approx(0.2, rel=0.01) and price.std() == pytest.approx(0.05, rel=0.03)
    lo, hi = Uncertain(0.2, 0.05).interval(0.9)
    assert np.mean((price >= lo) & (price <= hi)) == pytest.approx(0.9, abs=0.005)
    with pytest.raises(ValueError, match="needs rng"):
        to_co2e(np.ones((3, 1)), "400+-50")


def test_uncertain_factors_widen_the_intervals_and_keep_the_centre():
    e = _lognormal_energy([1e7, 3e7])
    point = to_co2e(e, 400.0, pue=1.3, rng=np.random.default_rng(0))
    spread = to_co2e(e, "400+-100", pue="1.3+-0.1", rng=np.random.default_rng(0))
    assert (_width(spread) > 1.2 * _width(point)).all()
    np.testing.assert_allclose(spread.mean(axis=0), point.mean(axis=0), rtol=0.03)  # same means: the factors' own
    cost_point, cost_spread = to_cost(e, 0.2), to_cost(e, "0.2+-0.06", rng=np.random.default_rng(0))
    assert (_width(cost_spread) > 1.2 * _width(cost_point)).all()


def test_candidates_at_one_site_share_its_factor_draws():
    """One draw of the site's intensity and PUE goes with all its candidates: comparing them adds no factor noise."""
    e = _lognormal_energy([1e7, 2e7], S=4000)
    t = e / 100.0
    sites = [Site(intensity="300+-80", pue="1.4+-0.2", name="A"), Site(intensity="300+-80", pue="1.4+-0.2", name="B")]
    cands = pd.DataFrame({"hardware": ["h", "h"], "strategy": ["single", "fsdp"], "n_gpus": [1, 2]})
    c, ee, tt, conv = cross_sites(cands, e, t, sites, factor_rng(0))
    assert c["region"].tolist() == ["A", "A", "B", "B"]
    np.testing.assert_array_equal(ee[:, 2:], e)  # the same energy draws at every site
    ratio = conv["co2e_kg"] / ee
    np.testing.assert_allclose(ratio[:, 0], ratio[:, 1])  # shared within a site
    assert np.corrcoef(ratio[:, 0], ratio[:, 2])[0, 1] < 0.1  # independent between sites
    # at one site, the cleaner candidate is always cleaner; across sites the factors' noise enters
    assert (conv["co2e_kg"][:, 0] < conv["co2e_kg"][:, 1]).mean() == (e[:, 0] < e[:, 1]).mean()
    with pytest.raises(ValueError, match="sites must differ in name"):
        cross_sites(cands, e, t, [sites[0], sites[0]], factor_rng(0))


# --------------------------------------------------------------------------- the table
def test_grid_table_is_sourced_and_says_it_is_an_annual_average():
    table = load_grid_intensity()
    assert {"FR", "DE", "PL", "SE", "NO", "GB", "US", "CN", "IN", "JP", "AU", "CA", "BR"} <= set(table.index)
    assert any(code.startswith("US-") for code in table.index)
    assert 15 <= len(table) <= 30
    assert (table["source"].str.len() > 10).all() and table["year"].between(2019, 2025).all()
    assert set(table["basis"]) <= {"lifecycle", "direct"}
    assert table["gco2e_per_kwh"].between(5, 1200).all()
    # the physics the numbers must show: hydro and nuclear grids far below coal grids
    assert table.loc["NO", "gco2e_per_kwh"] < table.loc["FR", "gco2e_per_kwh"] < table.loc["DE", "gco2e_per_kwh"] \
        < table.loc["PL", "gco2e_per_kwh"]
    assert "ANNUAL AVERAGES" in load_grid_intensity.__doc__ and "annual average" in ANNUAL_AVERAGE_NOTE
    assert grid_intensity("fr") == grid_intensity("France") == Uncertain(float(table.loc["FR", "gco2e_per_kwh"]))


def test_unknown_region_names_close_matches():
    with pytest.raises(ValueError, match=r"unknown region 'Frnace'; close matches: FR\b"):
        region_row("Frnace")
    with pytest.raises(ValueError, match="close matches: .*DE"):
        region_row("Germny")
    with pytest.raises(ValueError, match="close matches: US-CAMX"):
        region_row("camx")
    with pytest.raises(ValueError, match="Known: WORLD, FR"):
        region_row("Atlantis")


def test_own_grid_table_with_spreads_and_its_errors(tmp_path):
    good = tmp_path / "grid.csv"
    good.write_text("region,year,gco2e_per_kwh,sd_gco2e_per_kwh,source\nmy-dc,2024,120,40,operator hourly data\n")
    site = Site.from_region("MY-DC", table=load_grid_intensity(good))
    assert site.intensity == Uncertain(120.0, 40.0) and site.year == 2024
    assert "(2024; operator hourly data)" in site.describe() and "ANNUAL" not in site.describe()  # not ours to say
    assert "ANNUAL AVERAGE 2023, lifecycle; Ember" in Site.from_region("FR").describe()
    bad = tmp_path / "bad.csv"
    bad.write_text("region,year,gco2e_per_kwh,source\nA,2024,100,x\nB,2024,-5,y\n")
    with pytest.raises(SchemaError, match="bad.csv: row 3, column 'gco2e_per_kwh': expected a number >= 0, got '-5'"):
        load_grid_intensity(bad)
    (tmp_path / "dup.csv").write_text("region,year,gco2e_per_kwh,source\nA,2024,100,x\na,2023,90,y\n")
    with pytest.raises(SchemaError, match="region 'a' appears more than once"):
        load_grid_intensity(tmp_path / "dup.csv")
    (tmp_path / "short.csv").write_text("region,gco2e_per_kwh\nA,100\n")
    with pytest.raises(SchemaError, match="missing column\\(s\\) year, source"):
        load_grid_intensity(tmp_path / "short.csv")


# --------------------------------------------------------------------------- plans by CO2e and cost
def _two_site_plan(objective, **kw):
    """single x1 (100 kWh-ish) and fsdp x2 (+20 % energy, faster) in a coal grid and in a clean one."""
    cands = pd.DataFrame({"hardware": ["A", "A"], "strategy": ["single", "fsdp"], "n_gpus": [1, 2]})
    rng = np.random.default_rng(0)
    e = np.exp(np.log([100 * KWH, 120 * KWH]) + 0.05 * rng.standard_normal((4000, 2)))
    t = np.exp(np.log([1000.0, 600.0]) + 0.05 * rng.standard_normal((4000, 2)))
    sites = [Site.from_region("PL", pue=1.1, price=0.10, currency="EUR"),
             Site.from_region("FR", pue="1.5+-0.1", price=0.25, currency="EUR")]
    c, ee, tt, conv = cross_sites(cands, e, t, sites, factor_rng(0))
    return evaluate(c, ee, tt, co2e_kg=conv["co2e_kg"], cost=conv["cost"], objective=objective, currency="EUR",
                    sites=[s.describe() for s in sites], **kw)


def test_ranking_by_co2e_or_cost_differs_from_energy_across_sites():
    by_energy, by_co2e, by_cost = (_two_site_plan(o) for o in ("energy", "co2e", "cost"))
    tab = by_co2e.table
    pick = {name: (p.recommendation["strategy"], p.recommendation["region"])
            for name, p in (("energy", by_energy), ("co2e", by_co2e), ("cost", by_cost))}
    assert pick["energy"][0] == "single"  # the least energy (the same at either site)
    assert pick["co2e"] == ("single", "FR")  # clean grid, despite PUE 1.5 against 1.1
    assert pick["cost"] == ("single", "PL")  # cheap power
    # a candidate using 20 % more energy in the clean grid emits far less than the frugal one in the coal grid
    fr_fsdp = tab[(tab["region"] == "FR") & (tab["strategy"] == "fsdp")].iloc[0]
    pl_single = tab[(tab["region"] == "PL") & (tab["strategy"] == "single")].iloc[0]
    assert fr_fsdp["energy_j_median"] > pl_single["energy_j_median"]
    assert fr_fsdp["co2e_kg_hi"] < pl_single["co2e_kg_lo"]
    # the PUE spread widens FR's intervals, not PL's (a point PUE and intensity there)
    width = tab["co2e_kg_hi"] / tab["co2e_kg_lo"]
    e_width = tab["energy_j_hi"] / tab["energy_j_lo"]
    fr = tab["region"] == "FR"
    assert (np.log(width[fr]) > 1.3 * np.log(e_width[fr])).all()  # the interval is 30 % wider on the log scale
    np.testing.assert_allclose(width[tab["region"] == "PL"], e_width[tab["region"] == "PL"], rtol=1e-9)
    # the single-device reference is per site
    assert tab.loc[tab["strategy"] == "single", "p_energy_below_single"].isna().all()
    text = by_co2e.to_text()
    assert "lowest median CO2e" in text and "annual average" in text and "in FR" in text
    assert "co2e_kg_median" in by_co2e.to_frame() and "cost_EUR_90%" in by_co2e.to_frame()


def test_budgets_in_kg_and_money():
    # fsdp in FR: ~120 kWh x PUE 1.5 x 56 g = ~10 kg and x 0.25 EUR = ~45 EUR
    p = _two_site_plan("co2e", deadline_s=800, p=0.9, co2_budget_kg=15.0, cost_budget=60.0)
    tab = p.table
    np.testing.assert_allclose(tab["p_co2_budget"], (p.draws["co2e_kg"] <= 15.0).mean(axis=0))
    np.testing.assert_allclose(tab["p_cost_budget"], (p.draws["cost"] <= 60.0).mean(axis=0))
    rec = p.recommendation  # only fsdp meets the deadline; FR is the cleaner site
    assert (rec["strategy"], rec["region"]) == ("fsdp", "FR")
    assert rec["p_co2_budget"] > 0.99 and rec["p_cost_budget"] > 0.99
    assert not any("budget" in n for n in p.notes)
    pl = tab[(tab["region"] == "PL") & (tab["strategy"] == "fsdp")].iloc[0]
    assert pl["p_co2_budget"] < 0.01  # ~120 x 1.1 x 662 g = ~87 kg
    tight = _two_site_plan("co2e", deadline_s=800, p=0.9, co2_budget_kg=5.0, cost_budget=20.0)
    assert tight.recommendation["p_co2_budget"] < 0.01
    assert any("within the CO2e budget with probability 0.00 only" in n for n in tight.notes)
    assert any("within the cost budget with probability 0.00 only" in n for n in tight.notes)
    assert "CO2e budget 5 kg" in tight.to_text() and "cost budget 20 EUR" in tight.to_text()
    with pytest.raises(ValueError, match="objective 'co2e' needs a grid intensity"):
        evaluate(tab[["hardware", "strategy", "n_gpus"]], p.draws["energy_j"], p.draws["time_s"], objective="co2e")
    with pytest.raises(ValueError, match="a cost budget needs a price"):
        evaluate(tab[["hardware", "strategy", "n_gpus"]], p.draws["energy_j"], p.draws["time_s"], cost_budget=1.0)


# --------------------------------------------------------------------------- with the session's posterior
BERT_BASE = Workload.from_architecture("bert-base", seq_len=128, batch_size=32, tokens=6e6)


def _measured_singles(table, n=3):
    rows = table[table["strategy"] == "single"].drop_duplicates("group").head(n)
    return rows.drop(columns=[c for c in ("time_s", "energy_j", "speedup", "efficiency") if c in rows.columns])


@pytest.mark.slow
def test_predict_table_gains_co2e_and_cost_from_the_same_draws(small_fit):
    from bayes_energy.carbon import with_carbon
    from bayes_energy.predict import predict

    idata, table = small_fit
    pred, draws = predict(idata, _measured_singles(table), seed=0, return_draws=True)
    out = with_carbon(pred, draws, Site.from_region("DE", pue=1.2, price=0.3, currency="EUR"), prob=0.9)
    for s in ("median", "lo", "hi"):  # point factors: exactly the energy's quantiles, scaled (kWh -> kg, money)
        np.testing.assert_allclose(out[f"co2e_kg_{s}"], out[f"energy_kwh_{s}"] * 1.2 * 0.381, rtol=1e-5)
        np.testing.assert_allclose(out[f"cost_{s}"], out[f"energy_kwh_{s}"] * 1.2 * 0.3, rtol=1e-5)
    assert out["region"].eq("DE").all() and out["pue"].eq("1.2").all() and out["currency"].eq("EUR").all()
    wide = with_carbon(pred, draws, Site.from_region("DE", pue="1.2+-0.15"), prob=0.9, seed=0)
    assert (wide["co2e_kg_hi"] / wide["co2e_kg_lo"] > out["co2e_kg_hi"] / out["co2e_kg_lo"]).all()
    assert wide["pue"].eq("1.2+-0.15").all()


@pytest.mark.slow
def test_plan_by_co2e_picks_the_cleaner_site_and_the_same_configuration(small_fit):
    idata, _ = small_fit
    sites = [Site.from_region("FR", pue=1.6), Site.from_region("SE", pue="1.1+-0.05")]  # 90 against ~45 g per IT kWh
    kw = dict(strategies=["single", "fsdp"], n_gpus=[1, 2, 4], hardware=["2080"], deadline_s=600, p=0.8, seed=3,
              sites=sites)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        energy = plan(idata, BERT_BASE, objective="energy", **kw)
        co2e = plan(idata, BERT_BASE, objective="co2e", co2_budget_kg=0.01, **kw)
    assert energy.recommended is not None and co2e.recommended is not None
    e_rec, c_rec = energy.recommendation, co2e.recommendation
    assert c_rec["region"] == "SE" and e_rec["region"] == "FR"  # energy ties between sites: the first one
    assert (c_rec["strategy"], c_rec["n_gpus"]) == (e_rec["strategy"], e_rec["n_gpus"])
    assert len(co2e.table) == 2 * 3 and set(co2e.table["region"]) == {"FR", "SE"}
    assert {"co2e_kg_median", "co2e_kg_lo", "co2e_kg_hi", "p_co2_budget"} <= set(co2e.table.columns)
    assert "cost_median" not in co2e.table.columns  # no price given
    assert co2e.draws["co2e_kg"].shape == co2e.draws["energy_j"].shape


def _run(*args, env=None):
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_predict_and_plan_cli_report_co2e_and_cost(small_fit, small_fit_dir, tmp_path, isolated_env):
    _, table = small_fit
    configs = tmp_path / "cands.csv"
    _measured_singles(table, 2).to_csv(configs, index=False)
    out = tmp_path / "pred.csv"
    r = _run("-m", "bayes_energy.predict", "--posterior", str(small_fit_dir / "posterior.nc"), "--configs", str(configs),
             "--out", str(out), "--seed", "1", "--region", "FR", "--pue", "1.2+-0.1", "--price-per-kwh", "0.2",
             "--currency", "EUR", env=isolated_env)
    assert r.returncode == 0, r.stderr
    assert "annual average" in r.stdout and "ANNUAL AVERAGE 2023" in r.stdout and "CO2e" in r.stdout
    pred = pd.read_csv(out)
    assert {"co2e_kg_median", "co2e_kg_lo", "co2e_kg_hi", "cost_median", "cost_lo", "cost_hi"} <= set(pred.columns)
    mid = pred["energy_kwh_median"] * 1.2
    assert np.allclose(pred["co2e_kg_median"], mid * 0.056, rtol=0.1) and np.allclose(pred["cost_median"], mid * 0.2,
                                                                                      rtol=0.1)
    assert (pred["co2e_kg_hi"] / pred["co2e_kg_lo"] > pred["energy_kwh_hi"] / pred["energy_kwh_lo"]).all()

    plan_csv = tmp_path / "plan.csv"
    r = _run("-m", "bayes_energy.plan", "--posterior", str(small_fit_dir / "posterior.nc"), "--arch", "bert-base",
             "--seq-len", "128", "--batch-size", "32", "--tokens", "6e6", "--hardware", "2080", "--n-gpus", "1", "2",
             "--strategies", "single", "fsdp", "--deadline-s", "600", "--p", "0.8", "--seed", "1",
             "--region", "PL", "FR", "--pue", "1.1", "1.4", "--price-per-kwh", "0.1", "0.3", "--currency", "EUR",
             "--objective", "co2e", "--co2-budget-kg", "2", "--cost-budget", "5", "--out", str(plan_csv),
             env=isolated_env)
    assert r.returncode == 0, r.stderr
    assert "lowest median CO2e" in r.stdout and "annual average" in r.stdout and "in FR" in r.stdout
    tab = pd.read_csv(plan_csv)
    assert sorted(tab["region"].unique()) == ["FR", "PL"] and len(tab) == 2 * 2
    assert tab.loc[tab["recommended"], "region"].tolist() == ["FR"]
    assert {"p_co2_budget", "p_cost_budget", "co2e_kg_median", "cost_median"} <= set(tab.columns)


def _main_error(module, argv, capsys):
    """Run ``module.main(argv)`` in-process; return (status, stderr) of a refusal."""
    try:
        status = module.main(argv)
    except SystemExit as exit_:
        status = exit_.code
    return status, capsys.readouterr().err


@pytest.mark.parametrize("extra, message", [
    (["--region", "FR", "--price-per-kwh", "-0.2"], "argument --price-per-kwh: a price: expected a number >= 0, got '-0.2'"),
    (["--region", "FR", "--pue", "0.9"], "argument --pue: expected a PUE >= 1 (facility energy / IT energy), got '0.9'"),
    (["--region", "Frnace"], "unknown region 'Frnace'; close matches: FR"),
    (["--region", "FR", "--grid-gco2-per-kwh", "50"], "argument --grid-gco2-per-kwh: not allowed with argument --region"),
    (["--pue", "1.2"], "--pue applies to CO2e and cost: give --region"),
    (["--grid-gco2-per-kwh", "50+-x"], "argument --grid-gco2-per-kwh: a grid intensity: expected a number"),
])
def test_bad_carbon_options_fail_as_one_line(extra, message, capsys, tmp_path):
    plan_module, predict_module = (importlib.import_module(f"bayes_energy.{m}") for m in ("plan", "predict"))
    never = str(tmp_path / "no-posterior.nc")  # refused before the posterior would be read
    for module, argv in ((predict_module, ["--posterior", never, "--configs", "c.csv", "--out", str(tmp_path / "o.csv")]),
                         (plan_module, ["--posterior", never, "--arch", "bert-base", "--seq-len", "128",
                                        "--batch-size", "8", "--tokens", "1e6"])):
        status, err = _main_error(module, argv + extra, capsys)
        assert status == 2 and message in err, (module.__name__, err)
        assert err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err


@pytest.mark.parametrize("extra, message", [
    (["--objective", "co2e"], "--objective co2e needs --region or --grid-gco2-per-kwh"),
    (["--region", "FR", "--objective", "cost"], "--objective cost needs --price-per-kwh"),
    (["--co2-budget-kg", "1", "--price-per-kwh", "0.2"], "--co2-budget-kg needs --region or --grid-gco2-per-kwh"),
    (["--region", "FR", "DE", "--pue", "1.1", "1.2", "1.3"], "--pue: give one value for all, or one per region (2), got 3"),
    (["--region", "FR", "fr"], "the regions repeat"),
    (["--co2-budget-kg", "-1", "--region", "FR"], "argument --co2-budget-kg: expected a positive number"),
])
def test_plan_refuses_objectives_and_budgets_it_cannot_compute(extra, message, capsys, tmp_path):
    plan_module = importlib.import_module("bayes_energy.plan")
    status, err = _main_error(plan_module, ["--posterior", str(tmp_path / "none.nc"), "--arch", "bert-base",
                                            "--seq-len", "128", "--batch-size", "8", "--tokens", "1e6", *extra], capsys)
    assert status == 2 and message in err and err.count("\n") == 1, err


# --------------------------------------------------------------------------- the report's page
@pytest.mark.slow
def test_report_adds_a_carbon_and_cost_page_with_intervals(small_fit, small_fit_dir, tmp_path, isolated_env):
    pdfium = pytest.importorskip("pypdfium2")
    from bayes_energy.report import CARBON_PAGE_TITLE, PAGE_TITLES, _load, carbon_plan

    out = tmp_path / "carbon.pdf"
    r = _run("-m", "bayes_energy.report", str(small_fit_dir), "--out", str(out), "--region", "FR", "PL",
             "--pue", "1.2+-0.1", "1.1", "--price-per-kwh", "0.2", "--currency", "EUR", env=isolated_env)
    assert r.returncode == 0, r.stderr
    pdf = pdfium.PdfDocument(str(out))
    try:
        assert len(pdf) == len(PAGE_TITLES) + 1
        text = " ".join(pdf[len(pdf) - 1].get_textpage().get_text_range().split())  # lines wrapped: one space
        img = np.asarray(pdf[len(pdf) - 1].render(scale=0.5).to_pil().convert("L"))
    finally:
        pdf.close()
    assert CARBON_PAGE_TITLE.split("  ", 1)[1] in text and "ANNUAL AVERAGE 2023" in text and "annual average" in text
    assert "FR" in text and "PL" in text and "CO2e kg: median (90%)" in text and "cost EUR: median (90%)" in text
    assert img.shape[1] > img.shape[0] and (img < 128).mean() > 0.005  # landscape, something drawn
    # the numbers on the page are those of the plan at these sites (same seed)
    idata, table = small_fit
    sites = [Site.from_region("FR", pue="1.2+-0.1", price=0.2, currency="EUR"),
             Site.from_region("PL", pue=1.1, price=0.2, currency="EUR")]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result, _ = carbon_plan(_load(small_fit_dir, idata=idata, table=table), sites)
    rec = result.recommendation
    assert rec["region"] == "FR"  # 56 g x 1.2 against 662 g x 1.1
    assert f"{rec['co2e_kg_lo']:.3g} – {rec['co2e_kg_hi']:.3g}" in text
