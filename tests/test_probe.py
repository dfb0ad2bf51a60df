"""Probe, then predict: the update of a job's prediction from measured windows of it (bayes_energy.probe)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from bayes_energy.schema import KWH_TO_J, SchemaError

OFFSET = np.log(1.5)  # the job runs 50 % above what the table measured for its family


def _family(table: pd.DataFrame, n_parallel: int = 2) -> pd.DataFrame:
    """A family with a single-device run and at least ``n_parallel`` FSDP runs (A100, GPT)."""
    for _, fam in table[table["hardware"].str.contains("A100")].groupby("group"):
        if (fam["strategy"] == "single").sum() == 1 and (fam["strategy"] == "fsdp").sum() >= n_parallel:
            return fam.sort_values("n_gpus").reset_index(drop=True)
    raise AssertionError("no such family")


def _shifted(rows: pd.DataFrame) -> pd.DataFrame:
    out = rows.drop(columns=["speedup", "efficiency"]).copy()
    out["energy_j"] = out["energy_j"] * np.exp(OFFSET)
    return out


@pytest.fixture(scope="module")
def case(small_fit):
    from bayes_energy.probe import probe_update

    idata, table = small_fit
    fam = _family(table)
    probe, targets = fam.iloc[[1]], fam.iloc[2:]  # probe the FSDP run on the fewest devices
    res = probe_update(idata, _shifted(probe), targets, seed=3)
    truth = targets["energy_j"].to_numpy(float) * np.exp(OFFSET) / KWH_TO_J
    return idata, table, fam, res, truth


def test_a_hot_probe_moves_the_centre_to_the_truth_and_covers_it(case):
    """The job runs 1.5x what the table measured for its family: the probe must say so and be believed."""
    _, _, _, res, truth = case
    t = res.table
    before = np.abs(np.log(t["energy_kwh_median_before"] / truth))
    after = np.abs(np.log(t["energy_kwh_median_after"] / truth))
    assert np.all(after < before), (before, after)
    assert np.all((t["energy_kwh_lo_after"] <= truth) & (truth <= t["energy_kwh_hi_after"]))
    # the probe says the job runs hot: the learned factor is above 1 and its interval excludes 1
    assert res.offset["energy_factor_lo"] > 1.0
    assert 1.4 < res.offset["energy_ratio"] < 1.6  # the window's raw ratio to the law: the 1.5 put in


def test_a_probe_that_agrees_with_the_law_narrows_the_interval(small_fit):
    """A measured window of the family itself (no shift): the law is confirmed, the job's interval shrinks.

    (A probe far outside the before interval, like ``case``'s, may widen it instead: it says the
    before interval was too sure about this job, and the after interval covers the truth.)
    """
    from bayes_energy.probe import probe_update

    idata, table = small_fit
    fam = _family(table)
    targets = fam.iloc[2:]
    # 98 %, not the default 90 %: two targets at 90 % are jointly covered only ~80 % of the time even by a
    # calibrated update, and the fixture's draws differ between a cold and a warm compile cache
    # (docs/speed.md): at 90 % the first target sat on the lower edge (0.01210 against 0.01223) on a
    # fresh-cache fit and inside it on a warm one. At 98 % a calibrated update fails ~4 % of the time.
    res = probe_update(idata, fam.iloc[[1]].drop(columns=["speedup", "efficiency"]), targets, seed=3, prob=0.98)
    t = res.table
    truth = targets["energy_j"].to_numpy(float) / KWH_TO_J
    assert np.all(t["width_ratio"] < 1.0), t["width_ratio"]
    assert np.all((t["energy_kwh_lo_after"] <= truth) & (truth <= t["energy_kwh_hi_after"]))


def test_a_single_device_probe_also_moves_the_family(small_fit):
    from bayes_energy.probe import probe_update

    idata, table = small_fit
    fam = _family(table)
    res = probe_update(idata, _shifted(fam.iloc[[0]]), fam.iloc[1:], seed=3)
    truth = fam["energy_j"].to_numpy(float)[1:] * np.exp(OFFSET) / KWH_TO_J
    before = np.abs(np.log(res.table["energy_kwh_median_before"] / truth))
    after = np.abs(np.log(res.table["energy_kwh_median_after"] / truth))
    assert np.all(after < before)
    assert res.offset["energy_factor"] > 1.1


def test_before_is_the_ordinary_pre_run_prediction(case):
    from bayes_energy.predict import predict

    idata, _, fam, res, _ = case
    plain = predict(idata, fam.iloc[2:], seed=4)
    ratio = np.log(res.table["energy_kwh_median_before"].to_numpy() / plain["energy_kwh_median"].to_numpy())
    assert np.all(np.abs(ratio) < 0.1)  # Monte Carlo error of 300 draws


def test_the_job_is_predicted_through_the_law_not_per_token(small_fit):
    """Double the job's tokens: the prediction follows the law's token terms, not a factor of 2 by fiat."""
    from bayes_energy.probe import probe_update

    idata, table = small_fit
    fam = _family(table)
    job = fam.iloc[2:].copy()
    a = probe_update(idata, fam.iloc[[1]], job, seed=5).table["energy_kwh_median_after"].to_numpy()
    job["tokens"] = job["tokens"] * 2
    b = probe_update(idata, fam.iloc[[1]], job, seed=5).table["energy_kwh_median_after"].to_numpy()
    ratio = b / a
    assert np.all(ratio > 1.2) and np.all(np.abs(ratio - 2.0) > 1e-3)


def test_startup_energy_is_removed_from_the_window_and_added_once(small_fit):
    from bayes_energy.probe import probe_update

    idata, table = small_fit
    fam = _family(table)
    probe, job = fam.iloc[[1]].copy(), fam.iloc[2:]
    startup = 0.2 * float(probe["energy_j"].iloc[0])
    with_start = probe.assign(energy_j=probe["energy_j"] + startup, startup_j=startup)
    a = probe_update(idata, probe, job, seed=6).table
    b = probe_update(idata, with_start, job, seed=6).table
    np.testing.assert_allclose(b["energy_kwh_median_after"] - a["energy_kwh_median_after"], startup / KWH_TO_J, rtol=1e-6)


def test_probe_column_selects_rows_and_the_text_shows_both(tmp_path, small_fit):
    from bayes_energy.probe import probe_update

    idata, table = small_fit
    fam = _family(table)
    csv = tmp_path / "probe.csv"
    fam.assign(probe=[0, 1] + [0] * (len(fam) - 2)).to_csv(csv, index=False)
    res = probe_update(idata, csv, fam.iloc[2:], seed=7)
    assert res.offset["n_windows"] == 1
    text = res.to_text()
    assert "before" in text and "after" in text and "noise" in text
    assert ((res.table["noise_share"] >= 0) & (res.table["noise_share"] <= 1)).all()


@pytest.mark.parametrize("change, column", [
    ({"hardware": "NVIDIA H100 80GB HBM3"}, "hardware"),
    ({"seq_len": 999}, "seq_len"),
    ({"batch_size": 3}, "batch_size"),
    ({"num_layers": 48}, "num_layers"),
    ({"time_s": 0.0}, "time_s"),
    ({"tokens": 0}, "tokens"),
])
def test_bad_probes_name_file_row_and_column(tmp_path, small_fit, change, column):
    from bayes_energy.probe import probe_update

    idata, table = small_fit
    fam = _family(table)
    probe = fam.iloc[[1]].drop(columns=["group"]).assign(**change)
    csv = tmp_path / "probe.csv"
    probe.to_csv(csv, index=False)
    with pytest.raises(SchemaError) as err:
        probe_update(idata, csv, fam.iloc[2:].drop(columns=["group"]))
    msg = str(err.value)
    assert str(csv) in msg and "row 2" in msg and f"'{column}'" in msg


def test_job_of_several_families_is_refused(small_fit):
    from bayes_energy.probe import probe_update

    idata, table = small_fit
    fam = _family(table)
    other = table[(table["group"] != fam["group"].iloc[0])].iloc[[0]]
    with pytest.raises(ValueError, match="one job"):
        probe_update(idata, fam.iloc[[1]], pd.concat([fam.iloc[2:], other]))


def test_family_scales_are_estimated_and_sensible(small_fit):
    from bayes_energy.probe import job_scales

    sc = job_scales(small_fit[0])
    assert 0.01 < sc.loc["tau_energy", "median"] < 0.5
    assert ((sc.filter(like="rho", axis=0)["median"] >= 0) & (sc.filter(like="rho", axis=0)["median"] <= 0.95)).all()


def test_plan_cli_probe_shows_before_and_after(tmp_path, small_fit, small_fit_dir, capsys):
    from bayes_energy.plan import main

    _, table = small_fit
    fam = _family(table)
    row = fam.iloc[0]
    probe = tmp_path / "probe.csv"
    _shifted(fam.iloc[[1]]).to_csv(probe, index=False)
    argv = ["--posterior", str(small_fit_dir / "posterior.nc"), "--family", row["family"],
            "--num-layers", str(row["num_layers"]), "--hidden-size", str(row["hidden_size"]), "--ff", str(row["ff"]),
            "--seq-len", str(row["seq_len"]), "--batch-size", str(row["batch_size"]), "--tokens", str(row["tokens"]),
            "--grad-accum", str(row["grad_accum"]),
            "--hardware", row["hardware"], "--strategies", "single", "fsdp", "--n-gpus", "1", "2", "4", "--seed", "0"]
    assert main(argv + ["--probe", str(probe)]) == 0
    out = capsys.readouterr().out
    assert "probe: 1 window(s)" in out and "after" in out and "fsdp x4" in out
    bad = tmp_path / "bad.csv"
    _shifted(fam.iloc[[1]]).assign(seq_len=999).to_csv(bad, index=False)
    assert main(argv + ["--probe", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "seq_len" in err and "Traceback" not in err
