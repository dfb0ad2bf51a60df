"""NVML and estimate meters, without a GPU.

``pynvml`` is patched where the meters import it
(``bayes_energy.runner.meters.pynvml``) with ``autospec``, so every call
must match the real nvidia-ml-py signatures.
"""

from __future__ import annotations

import subprocess
import sys
import time
import warnings
from unittest import mock

import pytest

pynvml = pytest.importorskip("pynvml")

from bayes_energy.runner import meters  # noqa: E402
from bayes_energy.runner.meters import (  # noqa: E402
    EstimateMonitor,
    MeterError,
    MeterUnavailable,
    NVMLMonitor,
    ShortWindowWarning,
    nvml_gpus,
    parse_visible_devices,
)

PASCAL, VOLTA, HOPPER = 4, 5, 9


class FakeNVML:
    """State behind an autospecced ``pynvml``: per-device counters and power."""

    def __init__(self, nv, archs, power_w=None, counter=None, power=None):
        n = len(archs)
        self.nv = nv
        self.handles = [f"handle-{i}" for i in range(n)]
        self.arch = dict(zip(self.handles, archs))
        self.energy_mj = {h: 1_000_000 * (i + 1) for i, h in enumerate(self.handles)}
        self.power_mw = {h: int((power_w or [100.0] * n)[i] * 1000) for i, h in enumerate(self.handles)}
        self.counter = dict(zip(self.handles, counter or [a >= VOLTA for a in archs]))
        self.power_ok = dict(zip(self.handles, power or [True] * n))
        nv.nvmlDeviceGetCount.return_value = n
        nv.nvmlDeviceGetHandleByIndex.side_effect = lambda i: self.handles[i]
        nv.nvmlDeviceGetName.side_effect = lambda h: f"Fake GPU {h[-1]}"
        nv.nvmlDeviceGetUUID.side_effect = lambda h: f"GPU-{h[-1] * 8}-0000"
        nv.nvmlDeviceGetArchitecture.side_effect = lambda h: self.arch[h]
        nv.nvmlSystemGetDriverVersion.return_value = "550.54.15"
        nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = self._energy
        nv.nvmlDeviceGetPowerUsage.side_effect = self._power

    def _energy(self, h):
        if not self.counter[h]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.energy_mj[h]

    def _power(self, h):
        if not self.power_ok[h]:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return self.power_mw[h]

    def spend(self, joules_by_index):
        for i, j in joules_by_index.items():
            self.energy_mj[self.handles[i]] += int(j * 1000)


@pytest.fixture
def nv(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with mock.patch("bayes_energy.runner.meters.pynvml", autospec=True) as patched:
        yield patched


def _window(mon, seconds=0.15, spend=None, fake=None):
    mon.begin_window("w")
    time.sleep(seconds)
    if spend:
        fake.spend(spend)
    return mon.end_window("w")


# ----------------------------------------------------------------------- counter
def test_counter_delta_is_the_window_energy_with_sync_at_both_ends(nv):
    fake = FakeNVML(nv, [HOPPER])
    sync = mock.Mock()
    mon = NVMLMonitor(nvml_gpus(), sync=sync)
    m = _window(mon, 0.15, {0: 45.5}, fake)
    assert m.source == "nvml"
    assert m.energy_j == pytest.approx(45.5)
    assert m.time_s >= 0.15
    assert sync.call_count == 2
    assert m.per_device_j == {"cuda:0": pytest.approx(45.5)}
    nv.nvmlInit.assert_called_once_with()


@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_window_sums_every_device(nv, n):
    fake = FakeNVML(nv, [VOLTA] * n)
    mon = NVMLMonitor(nvml_gpus())
    m = _window(mon, 0.12, {i: 10.0 * (i + 1) for i in range(n)}, fake)
    assert m.energy_j == pytest.approx(sum(10.0 * (i + 1) for i in range(n)))
    assert len(m.per_device_j) == n


@pytest.mark.parametrize(
    ("visible", "expected"),
    [("1,3", [1, 3]), ("3,1", [3, 1]), ("2", [2]), ("0,7,1", [0]), ("", []), ("-1", []), ("GPU-22", [2]), (None, [0, 1, 2, 3])],
)
def test_cuda_visible_devices_selects_nvml_devices(nv, monkeypatch, visible, expected):
    FakeNVML(nv, [HOPPER] * 4)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    gpus = nvml_gpus()
    assert gpus.nvml_indices == expected
    assert [d.nvml_index for d in gpus.devices] == expected


def test_cuda_visible_devices_only_visible_devices_are_counted(nv, monkeypatch):
    fake = FakeNVML(nv, [HOPPER] * 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,3")
    gpus = nvml_gpus()
    mon = NVMLMonitor(gpus)
    m = _window(mon, 0.12, {0: 100.0, 1: 1.0, 2: 100.0, 3: 2.0}, fake)
    assert m.energy_j == pytest.approx(3.0)
    # per-rank selection: rank 1 measures cuda:1, which is NVML device 3
    per_rank = NVMLMonitor(gpus, [1])
    m1 = _window(per_rank, 0.12, {3: 7.0}, fake)
    assert m1.energy_j == pytest.approx(7.0)
    assert per_rank.devices[0].nvml_index == 3


def test_mig_devices_are_refused():
    with pytest.raises(MeterUnavailable, match="MIG"):
        parse_visible_devices("MIG-abc", 2)


def test_node_and_per_rank_never_count_a_device_twice(nv):
    """Two ranks measuring their own device sum to what one node-level monitor sees."""
    fake = FakeNVML(nv, [HOPPER] * 2)
    gpus = nvml_gpus()
    node = NVMLMonitor(gpus, [0, 1])
    ranks = [NVMLMonitor(gpus, [0]), NVMLMonitor(gpus, [1])]
    node.begin_window("w")
    for r in ranks:
        r.begin_window("w")
    time.sleep(0.12)
    fake.spend({0: 5.0, 1: 6.0})
    total_node = node.end_window("w").energy_j
    total_ranks = sum(r.end_window("w").energy_j for r in ranks)
    assert total_node == pytest.approx(11.0) == pytest.approx(total_ranks)


# ----------------------------------------------------------------------- sampled fallback
@pytest.mark.parametrize(("arch", "counter"), [(PASCAL, False), (VOLTA, False)], ids=["pascal", "volta-no-counter"])
def test_devices_without_counter_integrate_sampled_power(nv, arch, counter):
    FakeNVML(nv, [arch], power_w=[200.0], counter=[counter])
    mon = NVMLMonitor(nvml_gpus(), sample_period_s=0.02)
    assert mon.counter == [False]
    m = _window(mon, 0.2)
    assert m.source == "nvml-sampled"
    assert m.energy_j == pytest.approx(200.0 * m.time_s, rel=1e-6)
    assert nv.nvmlDeviceGetPowerUsage.call_count >= 5  # the thread sampled
    assert mon._sampler is None  # and stopped with the window


def test_mixed_devices_use_counter_and_samples(nv):
    fake = FakeNVML(nv, [HOPPER, PASCAL], power_w=[300.0, 150.0])
    mon = NVMLMonitor(nvml_gpus(), sample_period_s=0.02)
    m = _window(mon, 0.15, {0: 40.0}, fake)
    assert m.source == "nvml-sampled"
    assert m.per_device_j["cuda:0"] == pytest.approx(40.0)
    assert m.per_device_j["cuda:1"] == pytest.approx(150.0 * m.time_s, rel=1e-6)


def test_trapezoid_of_a_power_ramp():
    # power rises 0 -> 1000 mW over 1 s: 500 mJ; sampled every 0.1 s, clipped to [0.25, 0.75]
    pts = [(k / 10, 1000.0 * k / 10) for k in range(11)]
    assert meters._trapezoid_mw(pts, 0.0, 1.0) == pytest.approx(500.0)
    assert meters._trapezoid_mw(pts, 0.25, 0.75) == pytest.approx(250.0)
    assert meters._trapezoid_mw([(0.5, 100.0)], 0.0, 2.0) == pytest.approx(200.0)


def test_device_without_counter_or_power_is_unavailable_not_zero(nv):
    FakeNVML(nv, [PASCAL], power=[False])
    with pytest.raises(MeterUnavailable, match="power usage"):
        NVMLMonitor(nvml_gpus())


# ----------------------------------------------------------------------- short windows
def test_short_window_warns_and_is_never_zero(nv):
    FakeNVML(nv, [HOPPER], power_w=[250.0])
    mon = NVMLMonitor(nvml_gpus())
    mon.begin_window("w")
    with pytest.warns(ShortWindowWarning, match="shorter than the nvml meter's update period"):
        m = mon.end_window("w")  # the counter did not advance
    assert m.energy_j > 0
    assert m.energy_j == pytest.approx(250.0 * m.time_s, rel=0.05)
    assert "short window" in m.notes
    assert any("counter did not advance" in n for n in m.notes)


def test_short_sampled_window_warns(nv):
    FakeNVML(nv, [PASCAL], power_w=[120.0])
    mon = NVMLMonitor(nvml_gpus(), sample_period_s=0.1)
    mon.begin_window("w")
    with pytest.warns(ShortWindowWarning):
        m = mon.end_window("w")
    assert m.energy_j > 0


def test_long_window_does_not_warn(nv):
    fake = FakeNVML(nv, [HOPPER])
    mon = NVMLMonitor(nvml_gpus())
    with warnings.catch_warnings():
        warnings.simplefilter("error", ShortWindowWarning)
        _window(mon, 0.12, {0: 1.0}, fake)


def test_window_names_are_checked(nv):
    FakeNVML(nv, [HOPPER])
    mon = NVMLMonitor(nvml_gpus())
    with pytest.raises(ValueError, match="never opened"):
        mon.end_window("nope")
    mon.begin_window("a")
    with pytest.raises(ValueError, match="already open"):
        mon.begin_window("a")


# ----------------------------------------------------------------------- NVML missing or failing
def test_nvml_library_missing_gives_a_null_device(nv):
    nv.nvmlInit.side_effect = pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    gpus = nvml_gpus()
    assert not gpus.available and len(gpus) == 0
    assert "NVML library was not found" in gpus.reason
    with pytest.raises(MeterUnavailable, match="no NVIDIA GPU"):
        NVMLMonitor(gpus)


def test_nvidia_ml_py_not_installed_gives_a_null_device(monkeypatch):
    monkeypatch.setattr(meters, "pynvml", None)
    gpus = nvml_gpus()
    assert not gpus.available
    assert "nvidia-ml-py" in gpus.reason
    with pytest.raises(MeterUnavailable):
        gpus[0]


def test_import_without_pynvml_does_not_crash():
    code = (
        "import sys; sys.modules['pynvml'] = None\n"
        "from bayes_energy.runner import meters\n"
        "assert meters.pynvml is None\n"
        "g = meters.nvml_gpus(); assert len(g) == 0 and not g.available\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_other_nvml_errors_become_meter_errors(nv):
    FakeNVML(nv, [HOPPER])
    gpus = nvml_gpus()
    nv.nvmlDeviceGetTotalEnergyConsumption.side_effect = pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
    with pytest.raises(MeterError, match="GPU 0 .total energy counter.: NVML error") as info:
        gpus[0].energy_mj()
    assert not isinstance(info.value, MeterUnavailable)


# ----------------------------------------------------------------------- estimate
def test_estimate_uses_tdp_and_measured_utilisation():
    cpu = iter([10.0, 10.0 + 0.3])  # 0.3 CPU seconds in the window
    mon = EstimateMonitor(tdp_w=40.0, idle_w=10.0, cores=2, cpu_time=lambda: next(cpu), reduce=lambda c: 2 * c)
    mon.begin_window("w")
    time.sleep(0.6)
    m = mon.end_window("w")
    util = 0.6 / (m.time_s * 2)  # the reduce doubled it (two ranks)
    assert m.source == "estimate"
    assert m.extra["cpu_util"] == pytest.approx(util)
    assert m.energy_j == pytest.approx((10.0 + 30.0 * util) * m.time_s)
    assert m.energy_j > 0


def test_estimate_defaults_and_clipping():
    mon = EstimateMonitor(cores=4)
    assert mon.tdp_w == 40.0 and mon.idle_w == pytest.approx(12.0)
    assert meters.estimate_power_w(1.7, 40.0, 12.0) == 40.0
    assert meters.estimate_power_w(-1.0, 40.0, 12.0) == 12.0
    with pytest.raises(ValueError, match="idle_w < tdp_w"):
        EstimateMonitor(tdp_w=10.0, idle_w=20.0)


def test_idle_window_of_the_estimate_is_the_idle_power():
    mon = EstimateMonitor(tdp_w=20.0, idle_fraction=0.25, cores=2)
    mon.begin_window("idle")
    time.sleep(0.2)
    m = mon.end_window("idle")
    assert m.power_w == pytest.approx(5.0, abs=0.5)


def test_cpu_model_name_reads_cpuinfo(tmp_path):
    f = tmp_path / "cpuinfo"
    f.write_text("processor\t: 0\nmodel name\t: Fake CPU 9000 @ 3.00GHz\n")
    assert meters.cpu_model_name(f) == "Fake CPU 9000 @ 3.00GHz"


# ----------------------------------------------------------------------- who measures under torchrun
@pytest.mark.parametrize("local_world", [2, 4])
def test_worker_ranks_measure_each_device_once(nv, local_world):
    from types import SimpleNamespace

    from bayes_energy.runner.worker import _make_monitor

    FakeNVML(nv, [HOPPER] * local_world)
    for mode in ("per-rank", "node"):
        args = SimpleNamespace(meter="auto", measured_by=mode, sample_period_s=0.1)
        measured = []
        for rank in range(local_world):
            mon, counts, label, _ = _make_monitor(args, True, rank, local_world, None, None)
            assert label == mode
            if mon is not None and counts:
                measured += [d.nvml_index for d in mon.devices]
        assert sorted(measured) == list(range(local_world))  # every device, once


def test_sweep_node_on_gpus_names_hardware_and_idle_power(nv, monkeypatch):
    from bayes_energy.runner.plan import RunConfig
    from bayes_energy.runner.sweep import Node

    FakeNVML(nv, [HOPPER] * 4, power_w=[60.0, 70.0, 80.0, 90.0])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    node = Node()
    assert node.device == "cuda" and node.meter == "nvml"
    assert node.hardware(1) == "Fake GPU 2" and node.hardware(2) == "Fake GPU 2+Fake GPU 3"
    node.measure_idle(0.15)  # the fake counters stand still: energy from the power readings
    assert node.idle_power_w(1) == pytest.approx(80.0, rel=0.05)
    assert node.idle_power_w(2) == pytest.approx(170.0, rel=0.05)
    assert node.fits(RunConfig(1, 32, 2, 64, 8, 1, "ddp", 4)) == "needs 4 GPUs, 2 visible"
