"""A GPU never measured but in the GPU table is placed by its specifications (issue 11)."""

from __future__ import annotations

import copy
import json
import warnings

import numpy as np
import pandas as pd
import pytest

from bayes_energy.hardware import roofline
from bayes_energy.predict import NewLevelWarning, SpecPlacementWarning, placement, predict_draws

A100 = "NVIDIA A100-SXM4-40GB"
H100 = "NVIDIA H100 80GB HBM3"


def _without_placement(idata):
    other = copy.deepcopy(idata)
    cfg = json.loads(other.posterior.attrs["bayes_energy_config"])
    cfg["spec_placement"] = False
    other.posterior.attrs["bayes_energy_config"] = json.dumps(cfg)
    return other


@pytest.fixture(scope="module")
def gpt_single(small_fit):
    _, table = small_fit
    row = table[(table["hardware"] == A100) & (table["strategy"] == "single")].iloc[[0]].reset_index(drop=True)
    both = pd.concat([row, row.assign(hardware=H100)], ignore_index=True)
    return both.drop(columns=["energy_j", "time_s", "efficiency", "speedup"], errors="ignore")


def test_placement_picks_the_same_family_on_measured_hardware(small_fit):
    from bayes_energy.models.io import load_spec

    idata, _ = small_fit
    spec = load_spec(idata)
    placed = placement(spec, [f"{H100}|gpt", f"{H100}|llama", "Some CPU|gpt"])
    assert set(placed) == {f"{H100}|gpt"}  # unknown family and unknown hardware are not placed
    donor, dh_e, dh_t = placed[f"{H100}|gpt"]
    assert spec.config["levels"]["cell"][donor].startswith("NVIDIA ")
    assert dh_e < 0 and dh_t < 0  # an H100 spends less energy and time per FLOP and byte than either GPU


def test_placed_gpu_is_centred_where_its_specs_say_and_narrower_than_a_population_draw(small_fit, gpt_single):
    idata, _ = small_fit
    with pytest.warns(SpecPlacementWarning, match="placed by the GPU's specifications"):
        d = predict_draws(idata, gpt_single, seed=1)["log_energy_j"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NewLevelWarning)
        pop = predict_draws(_without_placement(idata), gpt_single, seed=1)["log_energy_j"]
        t_donor = predict_draws(idata, gpt_single, seed=1, residual=False)["log_time_s"][:, 0]
    rf = roofline([A100, H100])
    w = 0.5
    h = w * rf["log_j_per_flop"] + (1 - w) * rf["log_j_per_byte"]
    ratio = h[H100] - h[A100]  # the donor here is the A100 x GPT cell (closest in J/FLOP and J/byte)
    # the roofline with a fixed overhead: only the donor time's work-bound share scales by the spec ratio
    row = gpt_single.iloc[0]
    params = row["num_layers"] * (12 * row["hidden_size"] ** 2 + 2 * row["hidden_size"] * row["ff"])
    f = min(1.0, 6 * params * row["tokens"] / (np.exp(np.median(t_donor)) * 0.5 * rf["peak_flop_per_s"][A100]))
    expected = np.log(f * np.exp(ratio) + 1 - f)
    shift = np.median(d[:, 1]) - np.median(d[:, 0])
    assert ratio < expected < 0 and abs(shift - expected) < 0.1, (shift, expected, ratio, f)
    width = lambda x: np.subtract(*np.quantile(x, [0.95, 0.05]))  # noqa: E731
    assert width(d[:, 1]) < 0.6 * width(pop[:, 1])
    assert width(d[:, 1]) > width(d[:, 0])  # but wider than the measured GPU: the hardware is unmeasured


def test_spec_shift_moves_compute_bound_runs_by_the_spec_ratio_and_overhead_bound_runs_not_at_all():
    from bayes_energy.models.predictive import PLACED, spec_shift

    S = 3
    P = {PLACED: np.full((S, 2), np.nan), "place_work_E": np.zeros((S, 2)), "place_work_T": np.zeros((S, 2)),
         "place_stray_E": np.zeros((S, 2)), "place_stray_T": np.zeros((S, 2))}
    P[PLACED][:, 1] = np.log(0.5 * 312e12)  # cell 1 placed from an A100 donor
    P["place_work_E"][:, 1], P["place_work_T"][:, 1] = -0.9, -1.3
    # runs on cell 1 doing 6ND = 1.56e14 FLOP per device in 1 s (at u x peak: compute-bound), in 1000 s
    # (0.1 % of it: overhead-bound), and a run on the unplaced cell 0
    A = {"cell_idx": np.array([1, 1, 0]), "n_gpus": np.array([2.0, 1.0, 1.0]),
         "log_train_flop": np.log([2 * 0.5 * 312e12, 0.5 * 312e12, 1e14])}
    log_t = np.zeros((S, 3)) + np.log([1.0, 1000.0, 5.0])
    log_e = np.zeros((S, 3))
    spec_shift(P, A, np.zeros((S, 3)), log_e, log_t, {"log_time": 0.0})
    np.testing.assert_allclose(log_t[:, 0], -1.3, atol=1e-9)  # the whole spec ratio
    np.testing.assert_allclose(log_e[:, 0], -0.9, atol=1e-9)
    assert np.all(np.abs(log_e[:, 1]) < 1e-3) and np.all(np.abs(log_t[:, 1] - np.log(1000.0)) < 1e-3)
    np.testing.assert_array_equal(log_e[:, 2], 0.0)  # a measured cell is untouched


def test_gpu_in_neither_the_fit_nor_the_table_is_refused(small_fit, tmp_path):
    from bayes_energy.predict import unknown_hardware

    idata, _ = small_fit
    assert unknown_hardware(idata, [H100]) == ""
    msg = unknown_hardware(idata, ["NVIDIA Quantum 9000"])
    assert "neither in the fit" in msg and "--allow-unknown-hardware" in msg


def test_plan_says_which_hardware_was_placed_by_specs(small_fit):
    from bayes_energy.plan import PLACED_BY_SPECS, plan

    idata, _ = small_fit
    w = {"family": "gpt", "num_layers": 10, "hidden_size": 640, "ff": 2560, "seq_len": 64, "batch_size": 8,
         "tokens": 2e6, "heads": 10}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        p = plan(idata, w, hardware=["NVIDIA H100 PCIe", "A100"], strategies=["single", "fsdp"], n_gpus=[1, 2], seed=0)
    ev = dict(zip(p.table["hardware"] + "/" + p.table["strategy"], p.table["evidence"]))
    assert ev["H100-PCIE-80GB/single"] == PLACED_BY_SPECS
    assert not ev[f"{A100}/single"].startswith("new hardware")
    with pytest.raises(ValueError, match="not in the fit.*close|not in the fit.*gpu_specs"):
        plan(idata, w, hardware=["NVIDIA H1000"], strategies=["single"], n_gpus=[1])
