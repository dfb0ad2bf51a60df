"""RAPL meter read from a fake powercap tree."""

from __future__ import annotations

import os
import time

import pytest

from bayes_energy.runner import meters
from bayes_energy.runner.meters import MeterPermissionError, MeterUnavailable, RAPLMonitor, rapl_zones

MAX_UJ = 262_143_328_850


def _zone(folder, name, energy_uj, max_uj=MAX_UJ):
    folder.mkdir(parents=True)
    (folder / "name").write_text(name + "\n")
    (folder / "energy_uj").write_text(f"{energy_uj}\n")
    (folder / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return folder


def _set(folder, energy_uj):
    (folder / "energy_uj").write_text(f"{energy_uj}\n")


@pytest.fixture
def powercap(tmp_path):
    """Two packages with core and dram subzones, a psys zone and an mmio zone, sysfs-style links."""
    root = tmp_path / "powercap"
    pkg0 = _zone(root / "intel-rapl:0", "package-0", 1_000_000)
    _zone(pkg0 / "intel-rapl:0:0", "core", 500_000)
    dram0 = _zone(pkg0 / "intel-rapl:0:1", "dram", 2_000_000)
    pkg1 = _zone(root / "intel-rapl:1", "package-1", 3_000_000)
    _zone(root / "intel-rapl:2", "psys", 9_000_000)
    _zone(root / "intel-rapl-mmio:0", "package-0", 7_000_000)
    os.symlink(dram0, root / "intel-rapl:0:1")  # sysfs links every zone at the top level too
    return {"root": root, "pkg0": pkg0, "dram0": dram0, "pkg1": pkg1}


def test_finds_packages_and_dram_once(powercap):
    zones = rapl_zones(powercap["root"])
    assert sorted(z.name for z in zones) == ["dram", "package-0", "package-1"]


def test_window_energy_is_the_counter_delta(powercap):
    mon = RAPLMonitor(root=powercap["root"])
    mon.begin_window("w")
    time.sleep(0.01)
    _set(powercap["pkg0"], 1_000_000 + 12_500_000)  # +12.5 J
    _set(powercap["dram0"], 2_000_000 + 1_500_000)  # +1.5 J
    _set(powercap["pkg1"], 3_000_000 + 4_000_000)  # +4 J
    m = mon.end_window("w")
    assert m.source == "rapl"
    assert m.energy_j == pytest.approx(18.0)
    assert m.per_device_j["intel-rapl:0:package-0"] == pytest.approx(12.5)


def test_wrap_around(powercap):
    _set(powercap["pkg0"], MAX_UJ - 1_000_000)
    mon = RAPLMonitor(root=powercap["root"])
    mon.begin_window("w")
    time.sleep(0.01)
    _set(powercap["pkg0"], 2_000_000)  # wrapped: 1 J to the top, 2 J after
    m = mon.end_window("w")
    assert m.per_device_j["intel-rapl:0:package-0"] == pytest.approx(3.0)
    assert m.energy_j > 0


def test_several_wraps_in_one_window_are_followed_by_polling(powercap):
    z = rapl_zones(powercap["root"])
    mon = RAPLMonitor(z, poll_s=0)  # drive the polls by hand
    pkg = next(k for k, zone in enumerate(z) if zone.name == "package-0")
    mon.begin_window("w")
    time.sleep(0.01)
    start = 1_000_000
    total = 0
    for k in range(3):  # three times around the counter, read in between
        now = (start + (k + 1) * (MAX_UJ // 2)) % MAX_UJ
        _set(powercap["pkg0"], now)
        mon._advance()
        total += MAX_UJ // 2
    m = mon.end_window("w")
    assert m.per_device_j[f"intel-rapl:0:{z[pkg].name}"] == pytest.approx(total / 1e6)


def test_poll_thread_runs_only_while_a_window_is_open(powercap):
    mon = RAPLMonitor(root=powercap["root"], poll_s=0.01)
    mon.begin_window("w")
    assert mon._sampler is not None
    time.sleep(0.05)
    mon.end_window("w")
    assert mon._sampler is None


def test_permission_denied_gives_a_clear_message(powercap, monkeypatch):
    real = meters._read_int

    def deny(path):
        if path.name == "energy_uj":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(meters, "_read_int", deny)
    with pytest.raises(MeterPermissionError, match="permission denied") as info:
        rapl_zones(powercap["root"])
    msg = str(info.value)
    assert "energy_uj" in msg and "root" in msg and "chmod" in msg and "--meter estimate" in msg
    assert isinstance(info.value, PermissionError)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_permission_denied_by_file_mode(powercap):
    (powercap["pkg0"] / "energy_uj").chmod(0o200)
    with pytest.raises(MeterPermissionError):
        rapl_zones(powercap["root"])


def test_no_powercap_is_unavailable(tmp_path):
    with pytest.raises(MeterUnavailable, match="no powercap folder"):
        rapl_zones(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(MeterUnavailable, match="no RAPL package or dram zone"):
        rapl_zones(tmp_path / "empty")


def test_sweep_falls_back_to_estimate_and_says_why(powercap, monkeypatch):
    from bayes_energy.runner.sweep import Node, SweepError

    monkeypatch.setattr(meters, "pynvml", None)  # no GPU here
    node = Node(powercap_root=str(powercap["root"]))
    assert node.meter == "rapl"

    def deny(path):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(meters, "_read_int", lambda p: deny(p) if p.name == "energy_uj" else int(p.read_text()))
    node = Node(powercap_root=str(powercap["root"]))
    assert node.meter == "estimate" and "permission denied" in node.why_estimate
    with pytest.raises(SweepError, match="permission denied"):
        Node(meter="rapl", powercap_root=str(powercap["root"]))
