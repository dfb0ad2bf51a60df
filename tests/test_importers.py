"""Existing logs into the sweep table: CodeCarbon and Zeus, and our meters against Zeus's.

The authors' table is CodeCarbon output (``energy_consumed_kWh``,
``duration_s``), so it goes through :func:`load_codecarbon` as a log and must
give what :func:`load_mayaki2026` gives. The Zeus cross-checks run only where
``zeus`` is installed (the optional ``zeus`` extra).
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pandas as pd
import pytest

from bayes_energy.datasets import load_mayaki2026, load_sweep
from bayes_energy.runner.importers import load_codecarbon, load_zeus, read_zeus_log
from bayes_energy.schema import KWH_TO_J
from bayes_energy.schema import ENERGY_SOURCES, SchemaError
from tests._data import mayaki_path

CONFIG = {"family": "bert", "num_layers": 2, "hidden_size": 64, "heads": 4, "ff": 256, "seq_len": 128,
          "batch_size": 8, "grad_accum": 1, "tokens": 1_000_000, "strategy": "single", "n_gpus": 1}
#: CodeCarbon 3's emissions.csv header (output_methods/emissions_data.py), in its order.
CODECARBON_HEADER = (
    "timestamp,project_name,run_id,experiment_id,duration,emissions,emissions_rate,cpu_power,gpu_power,ram_power,"
    "cpu_energy,gpu_energy,ram_energy,energy_consumed,water_consumed,country_name,country_iso_code,region,"
    "cloud_provider,cloud_region,os,python_version,codecarbon_version,cpu_count,cpu_model,gpu_count,gpu_model,"
    "longitude,latitude,ram_total_size,tracking_mode,cpu_utilization_percent,gpu_utilization_percent,"
    "ram_utilization_percent,ram_used_gb,on_cloud,pue,wue"
).split(",")


def _emissions(rows):
    """CodeCarbon rows with every column of its header; ``rows`` give the ones a test cares about."""
    base = {c: "" for c in CODECARBON_HEADER}
    base.update(timestamp="2026-11-30T10:00:00", project_name="codecarbon", experiment_id="5b0fa12a", pue=1.0,
                gpu_model="1 x NVIDIA A100-SXM4-40GB", gpu_count=1, cpu_model="AMD EPYC 7742", tracking_mode="machine",
                codecarbon_version="3.3.2", country_iso_code="FRA")
    return pd.DataFrame([{**base, **r} for r in rows], columns=CODECARBON_HEADER)


def _write(df, path):
    df.to_csv(path, index=False)
    return path


# ----------------------------------------------------------------------- CodeCarbon
def test_the_authors_codecarbon_table_reproduces_load_mayaki2026(tmp_path):
    path = mayaki_path()
    raw = pd.read_csv(path)
    ref = load_mayaki2026(path)
    run_id = "mayaki-" + raw.iloc[:, 0].astype(str)  # the unnamed row id column
    log = _emissions([{} for _ in range(len(raw))])
    log["run_id"] = run_id.to_numpy()
    log["duration"] = raw["duration_s"].to_numpy()
    log["energy_consumed"] = raw["energy_consumed_kWh"].to_numpy()
    log["gpu_model"] = (raw["gpus"].astype(str) + " x " + raw["GPU model"]).to_numpy()
    configs = ref[["family", "num_layers", "hidden_size", "heads", "ff", "seq_len", "batch_size", "grad_accum",
                   "tokens", "strategy", "n_gpus", "workload", "group", "repeats"]].copy()
    configs.insert(0, "run_id", run_id.to_numpy())  # no hardware column: read from CodeCarbon's gpu_model
    out = load_codecarbon(_write(log, tmp_path / "emissions.csv"), _write(configs, tmp_path / "configs.csv"))
    assert len(out) == len(ref) == len(raw)
    got = out.set_index("run_id").loc[run_id]
    np.testing.assert_allclose(got["energy_j"].to_numpy(), ref["energy_j"].to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(got["time_s"].to_numpy(), ref["time_s"].to_numpy(), rtol=1e-12)
    assert (got["hardware"].to_numpy() == ref["hardware"].to_numpy()).all()
    assert (got["energy_source"] == "codecarbon").all() and (got["repeats"].to_numpy() == ref["repeats"].to_numpy()).all()
    assert set(out["source_file"]) == {"emissions.csv"}


def test_a_log_row_without_a_configuration_is_refused_by_file_line_and_key(tmp_path):
    log = _write(_emissions([{"run_id": "a", "duration": 10, "energy_consumed": 0.001},
                             {"run_id": "b", "duration": 10, "energy_consumed": 0.001},
                             {"run_id": "c-typo", "duration": 12, "energy_consumed": 0.002}]), tmp_path / "emissions.csv")
    configs = _write(pd.DataFrame([{"run_id": "a", **CONFIG}, {"run_id": "b", **CONFIG, "batch_size": 16}]),
                     tmp_path / "configs.csv")
    with pytest.raises(SchemaError, match=r"emissions.csv: line 4, column 'run_id': no configuration with run_id "
                                          r"'c-typo' in .*configs.csv"):
        load_codecarbon(log, configs)


def test_the_join_key_can_be_the_project_name(tmp_path):
    log = _emissions([{"run_id": "u1", "project_name": "bert-b8", "duration": 10, "energy_consumed": 0.001},
                      {"run_id": "u2", "project_name": "bert-b16", "duration": 8, "energy_consumed": 0.0009}])
    configs = pd.DataFrame([{"project_name": "bert-b8", **CONFIG}, {"project_name": "bert-b16", **CONFIG, "batch_size": 16}])
    out = load_codecarbon(log, configs, on="project_name")
    assert out.set_index("project_name").loc["bert-b16", "energy_j"] == pytest.approx(0.0009 * KWH_TO_J)
    assert sorted(out["run_id"]) == ["u1", "u2"]
    with pytest.raises(SchemaError, match=r"configurations \(DataFrame\): no column 'run_id'"):
        load_codecarbon(log, configs)  # the default key is run_id, which these configurations lack


def test_flush_snapshots_of_one_run_keep_the_last_total(tmp_path):
    # CodeCarbon writes the running total at each flush() and at stop(): one run, three rows
    log = _emissions([{"run_id": "r1", "duration": 60, "energy_consumed": 0.01},
                      {"run_id": "r1", "duration": 120, "energy_consumed": 0.02},
                      {"run_id": "r1", "duration": 150, "energy_consumed": 0.025}])
    out = load_codecarbon(log, pd.DataFrame([{"run_id": "r1", **CONFIG}]))
    assert len(out) == 1 and out["repeats"].iloc[0] == 1
    assert out["time_s"].iloc[0] == 150 and out["energy_j"].iloc[0] == pytest.approx(0.025 * KWH_TO_J)
    assert "3 CodeCarbon snapshots" in out["notes"].iloc[0]


def test_codecarbon_pue_is_divided_out(tmp_path):
    log = _emissions([{"run_id": "r1", "duration": 100, "energy_consumed": 0.0015, "pue": 1.5}])
    out = load_codecarbon(log, pd.DataFrame([{"run_id": "r1", **CONFIG}]))
    assert out["energy_j"].iloc[0] == pytest.approx(3600.0)  # device energy; PUE is applied later, once
    assert "PUE 1.5 divided out" in out["notes"].iloc[0]


def test_runs_of_one_configuration_become_repeats(tmp_path):
    log = _emissions([{"run_id": "r1", "duration": 100, "energy_consumed": 0.010},
                      {"run_id": "r2", "duration": 110, "energy_consumed": 0.012}])
    configs = pd.DataFrame([{"run_id": "r1", **CONFIG}, {"run_id": "r2", **CONFIG}])
    out = load_codecarbon(log, configs)
    assert len(out) == 1
    row = out.iloc[0]
    assert row["repeats"] == 2 and row["run_id"] == "r1;r2"
    assert row["time_s"] == pytest.approx(105.0) and row["energy_j"] == pytest.approx(0.011 * KWH_TO_J)
    assert row["energy_j_sd"] == pytest.approx(np.std([0.010, 0.012], ddof=1) * KWH_TO_J)
    with pytest.raises(SchemaError, match="expected one row per run key"):
        load_codecarbon(log, configs, aggregate=False)


def test_bad_input_is_named_by_file_line_and_column(tmp_path):
    configs = _write(pd.DataFrame([{"run_id": "r1", **CONFIG}, {"run_id": "r2", **CONFIG, "num_layers": 0}]),
                     tmp_path / "configs.csv")
    good = _emissions([{"run_id": "r1", "duration": 10, "energy_consumed": 0.001}])
    with pytest.raises(SchemaError, match=r"configs.csv: row 3, column 'num_layers'"):
        load_codecarbon(good, configs)
    bad = _write(_emissions([{"run_id": "r1", "duration": 10, "energy_consumed": "n/a"}]), tmp_path / "em.csv")
    with pytest.raises(SchemaError, match=r"em.csv: line 2, column 'energy_consumed': expected a positive number"):
        load_codecarbon(bad, pd.DataFrame([{"run_id": "r1", **CONFIG}]))
    dup = _write(pd.DataFrame([{"run_id": "r1", **CONFIG}, {"run_id": "r1", **CONFIG}]), tmp_path / "dup.csv")
    with pytest.raises(SchemaError, match=r"dup.csv: line 2, line 3, column 'run_id': expected one configuration per key"):
        load_codecarbon(good, dup)
    with pytest.raises(SchemaError, match=r"missing column\(s\) energy_consumed"):
        load_codecarbon(good.drop(columns="energy_consumed"), pd.DataFrame([{"run_id": "r1", **CONFIG}]))
    cpu_only = _emissions([{"run_id": "r1", "duration": 10, "energy_consumed": 0.001, "gpu_model": "", "cpu_model": ""}])
    with pytest.raises(SchemaError, match=r"no hardware in the configuration and none in the log"):
        load_codecarbon(cpu_only, pd.DataFrame([{"run_id": "r1", **CONFIG}]))
    with pytest.raises(SchemaError, match=r"outcomes come from"):
        load_codecarbon(good, pd.DataFrame([{"run_id": "r1", **CONFIG, "energy_j": 5.0}]))


# ----------------------------------------------------------------------- Zeus
ZEUS_LOG = (
    # exactly what ZeusMonitor(log_file=...) writes: header at construction, one line per end_window
    "start_time,window_name,elapsed_time,gpu0_energy,gpu1_energy\n"
    "1764583200.25,finetune-b8,12.5,1500.0,1490.5\n"
    "1764583300.0,finetune-b16,10.0,1800.0,1795.0\n"
)


def _zeus_configs(**changes):
    cfg = {**CONFIG, "strategy": "ddp", "n_gpus": 2, "hardware": "NVIDIA H100 80GB HBM3"}
    return pd.DataFrame([{"window_name": "finetune-b8", **cfg, **changes},
                         {"window_name": "finetune-b16", **cfg, "batch_size": 16, **changes}])


def test_a_zeus_window_log_becomes_rows(tmp_path):
    log = tmp_path / "zeus.csv"
    log.write_text(ZEUS_LOG)
    out = load_zeus(log, _zeus_configs())
    by = out.set_index("window_name")
    assert by.loc["finetune-b8", "energy_j"] == pytest.approx(2990.5)  # the sum over the GPU columns
    assert by.loc["finetune-b8", "time_s"] == 12.5
    assert by.loc["finetune-b16", "started_at"] == "2025-12-01T10:01:40+00:00"
    assert set(out["energy_source"]) == {"zeus"} and set(out["meter_devices"]) == {"gpu0;gpu1"}
    assert set(out["source_file"]) == {"zeus.csv"}
    out.to_csv(tmp_path / "imported.csv", index=False)
    assert len(load_sweep(tmp_path / "imported.csv")) == 2  # the documented round trip


def test_zeus_windows_that_cannot_be_used_are_refused_by_line(tmp_path):
    log = tmp_path / "zeus.csv"
    log.write_text(ZEUS_LOG)
    with pytest.raises(SchemaError, match=r"zeus.csv: line 2, line 3: the window measured 2 GPU\(s\) but its "
                                          r"configuration says n_gpus=1"):
        load_zeus(log, _zeus_configs(n_gpus=1, strategy="single"))
    with pytest.raises(SchemaError, match=r"zeus.csv: line 3, column 'window_name': no configuration with window_name "
                                          r"'finetune-b16'"):
        load_zeus(log, _zeus_configs().iloc[:1])
    log.write_text(ZEUS_LOG + "1764583400.0,tiny,0.05,0.0,0.0\n")
    with pytest.raises(SchemaError, match=r"zeus.csv: line 4: 0 J on every GPU"):
        read_zeus_log(log)
    log.write_text("start,name,seconds\n1,a,2\n")
    with pytest.raises(SchemaError, match="missing column.*ZeusMonitor"):
        read_zeus_log(log)


def _measurement_class():
    try:
        from zeus.monitor.energy import Measurement
    except ImportError:
        @dataclasses.dataclass
        class Measurement:  # the fields of zeus.monitor.energy.Measurement
            time: float
            gpu_energy: dict
            cpu_energy: dict | None = None
            dram_energy: dict | None = None
    return Measurement


def test_zeus_measurement_objects_become_rows():
    Measurement = _measurement_class()
    windows = {"finetune-b8": Measurement(time=12.5, gpu_energy={0: 1500.0, 1: 1490.5}, cpu_energy={0: 300.0})}
    out = load_zeus(windows, _zeus_configs().iloc[:1])
    assert out["energy_j"].iloc[0] == pytest.approx(2990.5)  # GPU energy only, as Zeus's total_energy
    cpu_run = {"cpu-job": Measurement(time=5.0, gpu_energy={}, cpu_energy={0: 40.0}, dram_energy={0: 4.0})}
    cfg = pd.DataFrame([{"window_name": "cpu-job", **CONFIG, "hardware": "AMD EPYC 7742"}])
    assert load_zeus(cpu_run, cfg)["energy_j"].iloc[0] == pytest.approx(44.0)  # package + DRAM, as RAPL rows
    with pytest.raises(SchemaError, match=r"window 'finetune-b8': expected a positive 'time'"):
        load_zeus({"finetune-b8": Measurement(time=0.0, gpu_energy={0: 1.0, 1: 1.0})}, _zeus_configs().iloc[:1])


def test_every_source_the_importers_write_is_documented():
    assert {"codecarbon", "zeus", "nvml", "nvml-sampled", "rapl", "estimate"} <= set(ENERGY_SOURCES)


# ----------------------------------------------------------------------- our meters against Zeus
@pytest.fixture
def zeus_and_fake_nvml(monkeypatch):
    """Zeus's monitor and ours over one patched NVML (the same functions on the real pynvml module)."""
    pytest.importorskip("zeus.monitor")
    import zeus.device.gpu as zeus_gpu
    from zeus.device.gpu import nvidia as zeus_nvidia

    from tests.test_job_meter import patch_nvml

    monkeypatch.setattr(zeus_gpu, "_gpus", None)  # Zeus keeps a module-global GPU set
    zeus_nvidia.nvml_is_available.cache_clear()
    with patch_nvml() as nv:
        yield nv
    zeus_nvidia.nvml_is_available.cache_clear()


def test_our_nvml_windows_agree_with_zeus_and_its_log_reads_back(tmp_path, monkeypatch, zeus_and_fake_nvml):
    from zeus.monitor import ZeusMonitor

    from bayes_energy.runner.meters import NVMLMonitor, nvml_gpus
    from tests.test_job_meter import HOPPER, ClockNVML

    ClockNVML(zeus_and_fake_nvml, [HOPPER] * 4, power_w=[90.0, 120.0, 150.0, 210.0])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    log = tmp_path / "zeus.csv"
    theirs = ZeusMonitor(log_file=str(log))
    ours = NVMLMonitor(nvml_gpus())
    assert theirs.gpu_indices == ours.cuda_indices == [0, 1]
    ours.begin_window("w")
    theirs.begin_window("w", sync_execution=False)
    import time

    time.sleep(0.4)
    z = theirs.end_window("w", sync_execution=False)
    m = ours.end_window("w")
    theirs.log_file.close()
    # the same CUDA devices (NVML 1 and 3), the same joules per device
    assert z.gpu_energy[0] == pytest.approx(m.per_device_j["cuda:0"], rel=0.02)
    assert z.gpu_energy[1] == pytest.approx(m.per_device_j["cuda:1"], rel=0.02)
    assert z.total_energy / z.time == pytest.approx(120.0 + 210.0, rel=0.02)
    cfg = pd.DataFrame([{"window_name": "w", **CONFIG, "strategy": "ddp", "n_gpus": 2, "hardware": "Fake GPU 1"}])
    row = load_zeus(log, cfg).iloc[0]  # Zeus's own log file through our reader
    assert row["energy_j"] == pytest.approx(z.total_energy, rel=1e-9) and row["time_s"] == pytest.approx(z.time)


def test_where_zeus_and_our_meters_differ_a_window_shorter_than_the_counter(zeus_and_fake_nvml):
    """A counter that did not tick: Zeus reports 0 J and warns; ours falls back to the power reading."""
    from zeus.monitor import ZeusMonitor

    from bayes_energy.runner.meters import NVMLMonitor, ShortWindowWarning, nvml_gpus
    from tests.test_job_meter import HOPPER, FakeNVML

    FakeNVML(zeus_and_fake_nvml, [HOPPER], power_w=[200.0])  # counters stand still
    theirs, ours = ZeusMonitor(), NVMLMonitor(nvml_gpus())
    ours.begin_window("w")
    theirs.begin_window("w", sync_execution=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        z = theirs.end_window("w", sync_execution=False)
        m = ours.end_window("w")
    assert z.gpu_energy[0] == 0.0
    assert m.energy_j > 0 and m.energy_j == pytest.approx(200.0 * m.time_s, rel=0.05)
    assert any(issubclass(w.category, ShortWindowWarning) for w in caught)
    assert "counter did not advance" in m.notes[0]
