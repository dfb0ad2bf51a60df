"""The GPU spec table, name lookup and roofline ratios (bayes_energy/hardware.py).

The table's values were recalled from vendor datasheets (no network); these
tests check what can be checked without the PDFs: coverage, name matching,
internal consistency (dense vs. sparse, chip arithmetic, the per-value
sources table agreeing with the main table) and physical sanity.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from bayes_energy.hardware import (SPEC_COLUMNS, UnknownHardwareError, load_gpu_spec_sources, load_gpu_specs,
                                   lookup, match_gpu, roofline)

# the GPUs issue 11 asks for, by table key
REQUIRED = ["V100-SXM2-16GB", "V100-SXM2-32GB", "V100-PCIE-16GB", "V100-PCIE-32GB", "T4", "A10",
            "A100-SXM4-40GB", "A100-SXM4-80GB", "A100-PCIE-40GB", "A100-PCIE-80GB", "L4", "L40S",
            "H100-SXM5-80GB", "H100-PCIE-80GB", "H200-SXM-141GB", "RTX-2080-Ti", "RTX-3090", "RTX-4090",
            "MI250", "MI250X", "MI300X"]

# names as NVML / torch / ROCm / CodeCarbon report them -> table key
REPORTED = {
    "Tesla V100-PCIE-16GB": "V100-PCIE-16GB",
    "Tesla V100-PCIE-32GB": "V100-PCIE-32GB",
    "Tesla V100-SXM2-16GB": "V100-SXM2-16GB",
    "Tesla V100-SXM2-32GB": "V100-SXM2-32GB",
    "Tesla V100S-PCIE-32GB": "V100S-PCIE-32GB",
    "Tesla T4": "T4",
    "NVIDIA T4": "T4",
    "NVIDIA A10": "A10",
    "NVIDIA A100-SXM4-40GB": "A100-SXM4-40GB",
    "A100-SXM4-40GB": "A100-SXM4-40GB",  # older drivers, no vendor prefix
    "NVIDIA A100-SXM4-80GB": "A100-SXM4-80GB",
    "NVIDIA A100-PCIE-40GB": "A100-PCIE-40GB",
    "NVIDIA A100 80GB PCIe": "A100-PCIE-80GB",
    "NVIDIA L4": "L4",
    "NVIDIA L40": "L40",
    "NVIDIA L40S": "L40S",
    "NVIDIA H100 80GB HBM3": "H100-SXM5-80GB",
    "NVIDIA H100 PCIe": "H100-PCIE-80GB",
    "NVIDIA H100 NVL": "H100-NVL-94GB",
    "NVIDIA H200": "H200-SXM-141GB",
    "NVIDIA GeForce RTX 2080 Ti": "RTX-2080-Ti",
    "GeForce RTX 2080 Ti": "RTX-2080-Ti",  # older drivers
    "NVIDIA GeForce RTX 3090": "RTX-3090",
    "NVIDIA GeForce RTX 4090": "RTX-4090",
    "NVIDIA RTX A6000": "RTX-A6000",
    "AMD Instinct MI250X": "MI250X",
    "AMD Instinct MI250": "MI250",
    "AMD Instinct MI300X": "MI300X",
    # CodeCarbon's gpu_model prefixes the device count
    "4 x NVIDIA A100-SXM4-40GB": "A100-SXM4-40GB",
    "1 x NVIDIA GeForce RTX 2080 Ti": "RTX-2080-Ti",
    # case, spacing and punctuation do not matter; table keys resolve to themselves
    "nvidia a100-sxm4-40gb ": "A100-SXM4-40GB",
    "RTX-2080-Ti": "RTX-2080-Ti",
    "H100-SXM5-80GB": "H100-SXM5-80GB",
}

#: architectures without 2:4 structured sparsity
NO_SPARSITY = {"Volta", "Turing", "CDNA 2"}
#: the datasheet's sparse figure is not exactly 2 x its dense one (see the row's notes)
SPARSE_INEXACT = {"L40S"}


@pytest.fixture(scope="module")
def specs():
    return load_gpu_specs()


@pytest.fixture(scope="module")
def sources():
    return load_gpu_spec_sources()


# ------------------------------------------------------------------ coverage and schema

def test_every_required_gpu_present(specs):
    missing = sorted(set(REQUIRED) - set(specs.index))
    assert not missing


def test_table_schema(specs):
    assert specs.index.is_unique and specs.index.name == "gpu"
    for col in ("vendor", "architecture", "chip", "form_factor", "peak_16bit_dtype", "mem_type", "aliases",
                "source", "status", "notes", *SPEC_COLUMNS):
        assert col in specs.columns, col
    for col in SPEC_COLUMNS:
        assert specs[col].dtype == float, col
    required = [c for c in SPEC_COLUMNS if c != "peak_16bit_sparse_tflops"]
    assert specs[required].notna().all().all()
    assert set(specs["peak_16bit_dtype"]) <= {"bf16", "fp16"}
    assert set(specs["vendor"]) == {"NVIDIA", "AMD"}
    assert specs["source"].str.len().gt(10).all()


def test_every_value_has_a_source_and_a_status(specs, sources):
    """The long table covers every (gpu, column) once, agrees with the main table, and says how it knows."""
    cols = ["architecture", "chip", "form_factor", *SPEC_COLUMNS]
    assert not sources.duplicated(["gpu", "column"]).any()
    got = set(zip(sources["gpu"], sources["column"]))
    assert got == {(g, c) for g in specs.index for c in cols}
    assert set(sources["status"]) <= {"datasheet-recalled", "recalled", "derived", "recalled-unsure", "not-applicable"}
    assert sources["source"].str.len().gt(10).all()
    # nothing claims a check against the documents that was not made
    assert not sources["status"].str.contains("verified").any()
    for row in sources.itertuples():
        want = specs.loc[row.gpu, row.column]
        if row.status == "not-applicable":
            assert row.value == "" and (not isinstance(want, float) or math.isnan(want)), row
        elif row.column in SPEC_COLUMNS:
            assert float(row.value) == pytest.approx(want), row
        else:
            assert row.value == want, row
    # the main table's status names the unsure columns
    unsure = sources[sources["status"] == "recalled-unsure"].groupby("gpu")["column"].apply(set)
    for gpu, status in specs["status"].items():
        if gpu in unsure.index:
            assert status.startswith("recalled-unsure") and all(c in status for c in unsure[gpu]), gpu
        else:
            assert status == "datasheet-recalled", gpu


# ------------------------------------------------------------------ name lookup

@pytest.mark.parametrize("reported, key", sorted(REPORTED.items()))
def test_reported_names_resolve(reported, key):
    row = lookup(reported)
    assert row.name == key
    assert match_gpu(reported) == key


def test_memory_variants_get_the_right_memory():
    assert lookup("Tesla V100-PCIE-16GB")["mem_gb"] == 16
    assert lookup("Tesla V100-PCIE-32GB")["mem_gb"] == 32
    assert lookup("Tesla V100-SXM2-16GB")["mem_gb"] == 16
    a40, a80 = lookup("NVIDIA A100-SXM4-40GB"), lookup("NVIDIA A100-SXM4-80GB")
    assert (a40["mem_gb"], a80["mem_gb"]) == (40, 80)
    assert a80["mem_bandwidth_gbs"] > a40["mem_bandwidth_gbs"]


def test_dataset_hardware_names_resolve():
    """The two GPU types of the authors' dataset (Mayaki 2026)."""
    assert lookup("NVIDIA A100-SXM4-40GB").name == "A100-SXM4-40GB"
    assert lookup("NVIDIA GeForce RTX 2080 Ti").name == "RTX-2080-Ti"
    rf = roofline(["NVIDIA A100-SXM4-40GB", "NVIDIA GeForce RTX 2080 Ti"])
    assert rf["gpu"].tolist() == ["A100-SXM4-40GB", "RTX-2080-Ti"]


def test_every_alias_names_one_row(specs):
    from bayes_energy.hardware import _norm

    seen = {}
    for key, aliases in specs["aliases"].items():
        for n in {_norm(x) for x in [key, *aliases.split(";")]}:
            assert seen.setdefault(n, key) == key, f"{n!r} names both {seen[n]} and {key}"


@pytest.mark.parametrize("name, expected", [
    ("NVIDIA A10G", "A10"),  # the AWS part is not the A10: refused, A10 suggested
    ("NVIDIA GeForce RTX 5090", "RTX-4090"),
    ("NVIDIA H100", "H100-PCIE-80GB"),  # no form factor: all H100s suggested
    ("Tesla V100-SXM2", "V100-SXM2-16GB"),  # no memory size
    ("AMD Instinct MI210", "MI250"),
])
def test_unknown_name_raises_with_close_matches(name, expected):
    with pytest.raises(UnknownHardwareError) as info:
        lookup(name)
    err = info.value
    assert expected in err.close_matches
    msg = str(err)
    assert repr(name) in msg and repr(expected) in msg and "close matches" in msg
    assert "gpu_specs.csv" in msg
    assert not msg.startswith(('"', "'"))  # not KeyError's repr of the message
    assert match_gpu(name) is None


def test_unknown_error_is_a_key_error_and_a_value_error():
    with pytest.raises(KeyError):
        lookup("Cray-1")
    with pytest.raises(ValueError, match="unknown hardware 'Cray-1'.*known: .*'A100-SXM4-40GB'"):
        lookup("Cray-1")


def test_h100_without_form_factor_lists_every_h100():
    with pytest.raises(UnknownHardwareError) as info:
        lookup("H100")
    assert {"H100-SXM5-80GB", "H100-PCIE-80GB", "H100-NVL-94GB"} <= set(info.value.close_matches)


def test_ambiguous_driver_name_refused():
    with pytest.raises(UnknownHardwareError, match="ambiguous.*'MI250X' or 'MI250'"):
        lookup("AMD Instinct MI250X/MI250")


def test_lookup_takes_another_table(specs):
    small = specs.loc[["T4"]]
    assert lookup("Tesla T4", small).name == "T4"
    with pytest.raises(UnknownHardwareError, match="close matches: 'T4'|known: 'T4'"):
        lookup("NVIDIA L4", small)


# ------------------------------------------------------------------ physical sanity

def test_values_physically_sane(specs):
    assert specs["tdp_w"].between(50, 1000).all()
    assert specs["peak_16bit_dense_tflops"].between(10, 2000).all()
    assert specs["mem_bandwidth_gbs"].between(200, 6000).all()
    assert specs["mem_gb"].between(8, 256).all()
    assert specs["release_year"].between(2017, 2025).all()
    assert (specs["release_year"] % 1 == 0).all()


def test_sparse_is_twice_dense_where_the_vendor_has_sparsity(specs):
    has = ~specs["architecture"].isin(NO_SPARSITY)
    assert specs.loc[~has, "peak_16bit_sparse_tflops"].isna().all()
    assert specs.loc[has, "peak_16bit_sparse_tflops"].notna().all()
    ratio = (specs["peak_16bit_sparse_tflops"] / specs["peak_16bit_dense_tflops"])[has]
    exact = ratio.drop(list(SPARSE_INEXACT))
    np.testing.assert_allclose(exact, 2.0, rtol=0.002)
    np.testing.assert_allclose(ratio[list(SPARSE_INEXACT)], 2.0, rtol=0.03)


# units x dense 16-bit FLOP per clock per unit (FP32 accumulate) x boost clock in MHz
CHIP = {
    "V100-SXM2-16GB": (640, 128, 1530), "V100-PCIE-16GB": (640, 128, 1370), "T4": (320, 128, 1590),
    "RTX-2080-Ti": (544, 64, 1545), "A100-SXM4-40GB": (432, 512, 1410), "A10": (288, 256, 1695),
    "RTX-3090": (328, 128, 1695), "L4": (232, 256, 2040), "RTX-4090": (512, 128, 2520),
    "H100-SXM5-80GB": (132, 4096, 1830), "H100-PCIE-80GB": (114, 4096, 1620),
    "MI250X": (220, 1024, 1700), "MI250": (208, 1024, 1700), "MI300X": (304, 2048, 2100),
}


@pytest.mark.parametrize("gpu", sorted(CHIP))
def test_dense_flops_match_chip_arithmetic(specs, gpu):
    """A consistency check of the recalled figures, including the GeForce half rate (64/128 per clock)."""
    units, per_clock, mhz = CHIP[gpu]
    assert specs.loc[gpu, "peak_16bit_dense_tflops"] == pytest.approx(units * per_clock * mhz * 1e-6, rel=0.01)


def test_pitfalls_from_the_brief(specs):
    s = specs["peak_16bit_dense_tflops"]
    assert s["A100-SXM4-40GB"] == 312 and specs.loc["A100-SXM4-40GB", "peak_16bit_sparse_tflops"] == 624
    assert s["H100-SXM5-80GB"] == pytest.approx(989, abs=1)
    assert specs.loc["H100-SXM5-80GB", "peak_16bit_sparse_tflops"] == pytest.approx(1979, abs=1)
    assert s["H100-PCIE-80GB"] == pytest.approx(756, abs=1)
    assert tuple(specs.loc["H100-PCIE-80GB", ["tdp_w", "mem_bandwidth_gbs"]]) == (350, 2000)
    assert (s["V100-SXM2-32GB"], s["V100-PCIE-32GB"]) == (125, 112)
    assert (specs.loc[specs["architecture"] == "Volta", "peak_16bit_dtype"] == "fp16").all()
    assert (s["MI250X"], s["MI250"]) == (383, 362.1)
    assert specs.loc["MI250X", "tdp_w"] == specs.loc["MI250", "tdp_w"] == 560
    # GeForce: FP32 accumulate at half rate, so below the same generation's data-centre parts
    assert s["RTX-2080-Ti"] < s["T4"] and s["RTX-3090"] < s["A10"] and s["RTX-4090"] < s["L40S"]


@pytest.mark.parametrize("line", [
    ["V100-SXM2-16GB", "A100-SXM4-40GB", "H100-SXM5-80GB"],
    ["V100-PCIE-16GB", "A100-PCIE-40GB", "H100-PCIE-80GB"],
    ["T4", "L4"],
    ["RTX-2080-Ti", "RTX-4090"],
    ["RTX-3090", "RTX-4090"],
    ["MI250X", "MI300X"],
])
def test_j_per_flop_falls_with_generation(line):
    rf = roofline(line)
    assert rf["j_per_flop"].is_monotonic_decreasing and rf["j_per_flop"].is_unique


# ------------------------------------------------------------------ roofline

def test_roofline_values_and_units():
    rf = roofline("NVIDIA A100-SXM4-40GB")
    assert rf.index.tolist() == ["NVIDIA A100-SXM4-40GB"] and rf.index.name == "hardware"
    r = rf.iloc[0]
    assert r["peak_flop_per_s"] == pytest.approx(312e12)
    assert r["mem_bandwidth_byte_per_s"] == pytest.approx(1555e9)
    assert r["log_j_per_flop"] == pytest.approx(math.log(400 / 312e12))
    assert r["log_j_per_byte"] == pytest.approx(math.log(400 / 1555e9))
    assert r["ridge_flop_per_byte"] == pytest.approx(312e12 / 1555e9)


def test_roofline_whole_table(specs):
    rf = roofline()
    assert rf.index.tolist() == specs.index.tolist()
    assert np.isfinite(rf.drop(columns="gpu").to_numpy(float)).all()
    assert (rf["j_per_flop"].between(1e-13, 1e-11)).all()
    assert (rf["j_per_byte"].between(1e-11, 1e-9)).all()
    assert (rf["tdp_w"] > 0).all() and (rf["mem_bandwidth_byte_per_s"] > 0).all()


def test_roofline_unknown_names():
    with pytest.raises(UnknownHardwareError, match="NVIDIA A10G"):
        roofline(["NVIDIA A10", "NVIDIA A10G"])
    rf = roofline(["NVIDIA A10", "NVIDIA A10G", "NVIDIA A10"], unknown="nan")
    assert rf.index.tolist() == ["NVIDIA A10", "NVIDIA A10G"]  # duplicates dropped, order kept
    assert rf.loc["NVIDIA A10G", "gpu"] == "" and rf.loc["NVIDIA A10G"].drop("gpu").isna().all()
    assert np.isfinite(rf.loc["NVIDIA A10", "log_j_per_flop"])
    with pytest.raises(ValueError, match="unknown must be"):
        roofline("T4", unknown="skip")


def test_specs_are_read_fresh_each_time():
    a = load_gpu_specs()
    a.loc["T4", "tdp_w"] = 1.0
    assert load_gpu_specs().loc["T4", "tdp_w"] == 70
    assert isinstance(load_gpu_spec_sources(), pd.DataFrame)
