"""Energy meters in two layers.

*Device layer* (raw vendor units, the unit in every name):

* :class:`NVMLGPU` - one NVIDIA GPU: :meth:`~NVMLGPU.energy_mj` (the NVML
  total-energy counter, Volta and newer) and :meth:`~NVMLGPU.power_mw`.
* :class:`NVMLGPUs` - the GPUs visible to this process, honouring
  ``CUDA_VISIBLE_DEVICES``; :class:`NullGPUs` stands in when NVML or its
  library is missing, so importing this module never fails.
* :class:`RAPLZone` - one Linux powercap zone (``energy_uj``), found by
  :func:`rapl_zones`.

*Monitor layer* (seconds and joules, measurement windows):

* :class:`NVMLMonitor` - counter deltas, or power sampled by a thread and
  integrated with the trapezoid rule on devices without the counter.
* :class:`RAPLMonitor` - CPU package and DRAM energy, wrap-around handled.
* :class:`EstimateMonitor` - no meter at all: CPU power estimated from a TDP
  and the measured CPU utilisation; always labelled ``estimate``.

Every monitor has ``begin_window(name)`` / ``end_window(name)`` with device
synchronisation at both ends and returns a :class:`Measurement`. Vendor
errors become :class:`MeterError` subclasses. No monitor ever returns 0 J
because a device lacks a feature: it falls back to another meter or raises.

This module imports neither torch nor anything from the modelling side.
"""

from __future__ import annotations

import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

try:  # nvidia-ml-py; GPU nodes have it, a laptop may not
    import pynvml
except ImportError:  # pragma: no cover - exercised by patching in tests
    pynvml = None


class _NVMLMissing(Exception):
    """Placeholder for ``pynvml.NVMLError`` when nvidia-ml-py is not installed."""

    value = -1


# Captured once from the real module: tests replace ``pynvml`` with an
# autospec mock, whose classes and constants are mocks too.
_NVMLError: type[BaseException] = getattr(pynvml, "NVMLError", _NVMLMissing)
_ERR_NOT_SUPPORTED = int(getattr(pynvml, "NVML_ERROR_NOT_SUPPORTED", 3))
_ERR_LIBRARY_NOT_FOUND = int(getattr(pynvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12))
_ERR_NO_PERMISSION = int(getattr(pynvml, "NVML_ERROR_NO_PERMISSION", 4))
_ARCH_VOLTA = int(getattr(pynvml, "NVML_DEVICE_ARCH_VOLTA", 5))
_ARCH_UNKNOWN = int(getattr(pynvml, "NVML_DEVICE_ARCH_UNKNOWN", 0xFFFFFFFF))

__all__ = [
    "MeterError",
    "MeterUnavailable",
    "MeterPermissionError",
    "ShortWindowWarning",
    "Measurement",
    "NVMLGPU",
    "NVMLGPUs",
    "NullGPUs",
    "nvml_gpus",
    "parse_visible_devices",
    "RAPLZone",
    "rapl_zones",
    "NVMLMonitor",
    "RAPLMonitor",
    "EstimateMonitor",
    "estimate_power_w",
    "process_cpu_s",
    "logical_cores",
    "cpu_model_name",
]


# --------------------------------------------------------------------------- errors
class MeterError(RuntimeError):
    """A meter failed; the message says which device and what to do."""


class MeterUnavailable(MeterError):
    """The meter does not exist on this machine (no library, device or feature)."""


class MeterPermissionError(MeterError, PermissionError):
    """The meter exists but this user may not read it."""


class ShortWindowWarning(UserWarning):
    """A window was shorter than the meter's update period; its energy is coarse."""


def _nvml_error(err: BaseException, what: str) -> MeterError:
    value = getattr(err, "value", None)
    if value == _ERR_NOT_SUPPORTED:
        return MeterUnavailable(f"{what}: not supported by this device ({err})")
    if value == _ERR_LIBRARY_NOT_FOUND:
        return MeterUnavailable(f"{what}: the NVML library was not found; is the NVIDIA driver installed? ({err})")
    if value == _ERR_NO_PERMISSION:
        return MeterPermissionError(f"{what}: permission denied by NVML ({err})")
    return MeterError(f"{what}: NVML error ({err})")


# --------------------------------------------------------------------------- NVML device layer
class NVMLGPU:
    """One NVIDIA GPU, in NVML's raw units.

    Parameters
    ----------
    nvml_index : int
        The device's NVML index (PCI bus order).
    handle : object
        The NVML device handle.
    """

    def __init__(self, nvml_index: int, handle: object) -> None:
        self.nvml_index = nvml_index
        self.handle = handle
        self.name = self._call(pynvml.nvmlDeviceGetName, "name")
        if isinstance(self.name, bytes):
            self.name = self.name.decode()
        try:
            self.architecture = int(pynvml.nvmlDeviceGetArchitecture(handle))
        except _NVMLError:
            self.architecture = _ARCH_UNKNOWN
        self._has_counter: bool | None = None

    def _call(self, fn: Callable, what: str, *args):
        try:
            return fn(self.handle, *args)
        except _NVMLError as err:
            raise _nvml_error(err, f"GPU {self.nvml_index} ({what})") from None

    def energy_mj(self) -> int:
        """Total energy since the driver loaded, millijoules (Volta and newer).

        Raises
        ------
        MeterUnavailable
            If the device has no energy counter.
        """
        return int(self._call(pynvml.nvmlDeviceGetTotalEnergyConsumption, "total energy counter"))

    def power_mw(self) -> int:
        """Current board power draw, milliwatts."""
        return int(self._call(pynvml.nvmlDeviceGetPowerUsage, "power usage"))

    @property
    def has_energy_counter(self) -> bool:
        """Whether the total-energy counter exists (probed once)."""
        if self._has_counter is None:
            if self.architecture != _ARCH_UNKNOWN and self.architecture < _ARCH_VOLTA:
                self._has_counter = False
            else:
                try:
                    self.energy_mj()
                    self._has_counter = True
                except MeterUnavailable:
                    self._has_counter = False
        return self._has_counter

    def __repr__(self) -> str:
        return f"NVMLGPU({self.nvml_index}, {self.name!r})"


def parse_visible_devices(value: str | None, count: int, uuids: Sequence[str] = ()) -> list[int]:
    """NVML indices of the devices a process sees, in CUDA ordinal order.

    Follows the CUDA runtime's rules for ``CUDA_VISIBLE_DEVICES``: unset means
    every device; the list is read up to its first invalid entry; entries are
    indices or (prefixes of) ``GPU-`` UUIDs. Indices are NVML (PCI bus) order,
    which is the CUDA order when ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (the runner
    sets it for its workers).

    Parameters
    ----------
    value : str or None
        The variable's value.
    count : int
        Number of NVML devices.
    uuids : sequence of str
        NVML UUIDs by index, used for UUID entries.

    Raises
    ------
    MeterUnavailable
        For MIG entries: MIG instances have no energy counter of their own.
    """
    if value is None:
        return list(range(count))
    out: list[int] = []
    for token in (t.strip() for t in value.split(",")):
        if not token:
            break
        if token.startswith("MIG-"):
            raise MeterUnavailable(
                f"CUDA_VISIBLE_DEVICES lists a MIG instance ({token}); NVML has no per-instance energy counter"
            )
        if token.startswith("GPU-"):
            hits = [i for i, u in enumerate(uuids) if u.startswith(token)]
            if len(hits) != 1:
                break
            idx = hits[0]
        else:
            try:
                idx = int(token)
            except ValueError:
                break
            if not 0 <= idx < count:
                break
        if idx in out:
            break
        out.append(idx)
    return out


class NVMLGPUs:
    """The NVIDIA GPUs visible to this process (``CUDA_VISIBLE_DEVICES``).

    Indexing is by CUDA ordinal: ``gpus[0]`` is ``cuda:0`` of this process.

    Parameters
    ----------
    visible : str or None, optional
        Overrides ``CUDA_VISIBLE_DEVICES``; default reads the environment.

    Raises
    ------
    MeterUnavailable
        If nvidia-ml-py is not installed or the NVML library is missing.
    """

    available = True

    def __init__(self, visible: str | None = ...) -> None:  # type: ignore[assignment]
        if pynvml is None:
            raise MeterUnavailable("nvidia-ml-py (module pynvml) is not installed")
        try:
            pynvml.nvmlInit()
        except _NVMLError as err:
            raise _nvml_error(err, "NVML initialisation") from None
        try:
            count = int(pynvml.nvmlDeviceGetCount())
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            env = os.environ.get("CUDA_VISIBLE_DEVICES") if visible is ... else visible
            uuids: list[str] = []
            if env and "GPU-" in env:
                uuids = [_text(pynvml.nvmlDeviceGetUUID(h)) for h in handles]
            self.nvml_indices = parse_visible_devices(env, count, uuids)
            self.devices = [NVMLGPU(i, handles[i]) for i in self.nvml_indices]
            self.driver_version = _text(pynvml.nvmlSystemGetDriverVersion())
        except _NVMLError as err:
            raise _nvml_error(err, "NVML device discovery") from None

    def __len__(self) -> int:
        return len(self.devices)

    def __getitem__(self, cuda_index: int) -> NVMLGPU:
        return self.devices[cuda_index]

    def close(self) -> None:
        """Shut NVML down."""
        try:
            pynvml.nvmlShutdown()
        except _NVMLError:
            pass


class NullGPUs:
    """No GPUs: NVML or its library is missing. ``reason`` says which."""

    available = False
    devices: list[NVMLGPU] = []
    nvml_indices: list[int] = []
    driver_version = ""

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def __len__(self) -> int:
        return 0

    def __getitem__(self, cuda_index: int) -> NVMLGPU:
        raise MeterUnavailable(f"no GPU {cuda_index}: {self.reason}")

    def close(self) -> None:
        """Nothing to close."""


def nvml_gpus(visible: str | None = ...) -> NVMLGPUs | NullGPUs:  # type: ignore[assignment]
    """The visible GPUs, or a :class:`NullGPUs` when NVML is absent (never raises for that)."""
    try:
        return NVMLGPUs(visible)
    except MeterUnavailable as err:
        return NullGPUs(str(err))


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# --------------------------------------------------------------------------- RAPL device layer
POWERCAP = "/sys/class/powercap"
_ZONE_DIR = re.compile(r"^intel-rapl:\d+(:\d+)?$")


def _read_int(path: Path) -> int:
    return int(path.read_text().strip())


class RAPLZone:
    """One powercap RAPL zone (``package-N`` or ``dram``), raw microjoules.

    Parameters
    ----------
    path : path
        The zone folder, e.g. ``/sys/class/powercap/intel-rapl:0``.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.name = (self.path / "name").read_text().strip()
        self.max_energy_range_uj = _read_int(self.path / "max_energy_range_uj")

    def energy_uj(self) -> int:
        """The zone's energy counter, microjoules (wraps at ``max_energy_range_uj``).

        Raises
        ------
        MeterPermissionError
            If the counter is readable only by root (Linux >= 5.10 default).
        """
        f = self.path / "energy_uj"
        try:
            return _read_int(f)
        except PermissionError:
            raise MeterPermissionError(
                f"{f}: permission denied. Since Linux 5.10 RAPL counters are readable only by root. "
                f"Run as root, or grant read access with `sudo chmod a+r {self.path.parent}/intel-rapl:*/energy_uj "
                f"{self.path.parent}/intel-rapl:*:*/energy_uj`, or pass --meter estimate."
            ) from None

    def delta_uj(self, start_uj: int, end_uj: int) -> int:
        """Energy between two readings, allowing for one wrap-around of the counter."""
        if end_uj >= start_uj:
            return end_uj - start_uj
        return self.max_energy_range_uj - start_uj + end_uj

    def __repr__(self) -> str:
        return f"RAPLZone({str(self.path)!r}, {self.name!r})"


def rapl_zones(root: str | os.PathLike = POWERCAP) -> list[RAPLZone]:
    """CPU package and DRAM zones under ``root``.

    ``core``/``uncore`` zones (parts of a package) and ``psys`` (the whole
    platform) are left out, so nothing is counted twice.

    Raises
    ------
    MeterUnavailable
        If there is no RAPL zone.
    MeterPermissionError
        If a counter cannot be read.
    """
    root = Path(root)
    if not root.is_dir():
        raise MeterUnavailable(f"{root}: no powercap folder, so no RAPL on this machine")
    # Zones sit at the top level (sysfs links them all there) or nested one level
    # under their package. No deeper walk: sysfs links point back up the tree.
    candidates = [d for d in sorted(root.iterdir()) if _ZONE_DIR.match(d.name)]
    candidates += [c for d in list(candidates) if d.is_dir() for c in sorted(d.iterdir()) if _ZONE_DIR.match(c.name)]
    found: dict[Path, RAPLZone] = {}
    for d in candidates:
        if not (d / "energy_uj").exists():
            continue
        real = d.resolve()
        if real in found:
            continue
        zone = RAPLZone(d)
        if zone.name.startswith("package") or zone.name == "dram":
            found[real] = zone
    if not found:
        raise MeterUnavailable(f"{root}: no RAPL package or dram zone")
    zones = list(found.values())
    for z in zones:  # fail now, with the message, rather than mid-sweep
        z.energy_uj()
    return zones


# --------------------------------------------------------------------------- CPU helpers
def process_cpu_s() -> float:
    """User plus system CPU seconds of this process, all threads."""
    return time.process_time()


def logical_cores() -> int:
    """Logical CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def cpu_model_name(cpuinfo: str | os.PathLike = "/proc/cpuinfo") -> str:
    """The CPU model name from ``/proc/cpuinfo`` (falls back to :func:`platform.processor`)."""
    try:
        for line in Path(cpuinfo).read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown CPU"


def estimate_power_w(util: float, tdp_w: float, idle_w: float) -> float:
    r"""CPU power from utilisation: :math:`P = P_{idle} + (P_{TDP} - P_{idle})\,u`, ``u`` clipped to [0, 1]."""
    u = min(max(float(util), 0.0), 1.0)
    return idle_w + (tdp_w - idle_w) * u


# --------------------------------------------------------------------------- monitor layer
@dataclass
class Measurement:
    """One measurement window.

    Attributes
    ----------
    time_s : float
        Wall time of the window.
    energy_j : float
        Energy of every measured device over the window.
    source : str
        ``nvml``, ``nvml-sampled``, ``rapl`` or ``estimate``.
    per_device_j : dict
        Energy by device label.
    started_at, ended_at : float
        Unix times of the window's ends.
    notes : list of str
        Anything the reader should know (short window, fallbacks).
    extra : dict
        Meter-specific numbers (e.g. ``cpu_s`` and ``cpu_util`` of the estimate).
    """

    time_s: float
    energy_j: float
    source: str
    per_device_j: dict[str, float] = field(default_factory=dict)
    started_at: float = 0.0
    ended_at: float = 0.0
    notes: list[str] = field(default_factory=list)
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def power_w(self) -> float:
        """Mean power over the window."""
        return self.energy_j / self.time_s if self.time_s > 0 else float("nan")


def _noop() -> None:
    return None


class _Window:
    __slots__ = ("t0", "wall0", "start")

    def __init__(self, t0: float, wall0: float, start) -> None:
        self.t0, self.wall0, self.start = t0, wall0, start


class _Monitor:
    """Shared window bookkeeping; subclasses read and combine their meters."""

    source = "none"
    #: Shortest window the meter resolves, seconds.
    update_period_s = 0.0

    def __init__(self, sync: Callable[[], None] | None = None) -> None:
        self.sync = sync or _noop
        self._windows: dict[str, _Window] = {}

    def begin_window(self, name: str, sync: bool = True) -> None:
        """Open a window: synchronise the devices, then read the meters."""
        if name in self._windows:
            raise ValueError(f"measurement window {name!r} is already open")
        if sync:
            self.sync()
        self._on_open()
        t0 = time.perf_counter()
        self._windows[name] = _Window(t0, time.time(), self._read_start(t0))

    def end_window(self, name: str, sync: bool = True) -> Measurement:
        """Close a window: synchronise the devices, read the meters, return the measurement."""
        try:
            win = self._windows.pop(name)
        except KeyError:
            raise ValueError(f"measurement window {name!r} was never opened") from None
        if sync:
            self.sync()
        t1 = time.perf_counter()
        m = self._measure(win, t1)
        m.time_s = t1 - win.t0
        m.started_at, m.ended_at = win.wall0, win.wall0 + m.time_s
        if not self._windows:
            self._on_idle()
        if m.time_s < self.update_period_s:
            msg = (
                f"window {name!r} lasted {m.time_s * 1e3:.1f} ms, shorter than the {self.source} meter's update period "
                f"({self.update_period_s * 1e3:.0f} ms); its energy is coarse. Measure more steps."
            )
            m.notes.append("short window")
            warnings.warn(msg, ShortWindowWarning, stacklevel=2)
        return m

    def describe(self) -> dict[str, object]:
        """Meter details for provenance columns."""
        return {"meter": self.source}

    def close(self) -> None:
        """Release threads and libraries."""
        self._on_idle()

    # hooks
    def _on_open(self) -> None:
        pass

    def _on_idle(self) -> None:
        pass

    def _read_start(self, t0: float):  # pragma: no cover - abstract
        raise NotImplementedError

    def _measure(self, win: _Window, t1: float) -> Measurement:  # pragma: no cover - abstract
        raise NotImplementedError


class _Sampler:
    """A thread that calls ``fn`` every ``period_s`` until stopped."""

    def __init__(self, fn: Callable[[], None], period_s: float) -> None:
        self.fn, self.period_s = fn, period_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bayes-energy-meter", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.fn()
            except MeterError:
                pass  # one lost sample; the window's end samples still bound it

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


class NVMLMonitor(_Monitor):
    """GPU energy from NVML: counter deltas, or integrated sampled power.

    Devices with the total-energy counter (Volta and newer) are measured by
    its difference over the window. Devices without it are measured by a
    sampling thread reading board power every ``sample_period_s`` and
    integrating with the trapezoid rule, with extra samples at both ends.
    The window's source is ``nvml`` when every device has the counter and
    ``nvml-sampled`` otherwise.

    Parameters
    ----------
    gpus : NVMLGPUs
        The visible GPUs.
    cuda_indices : sequence of int, optional
        The CUDA ordinals to measure (default all visible). Under torchrun
        either one process passes every device of the node or each rank
        passes its own, never both.
    sync : callable, optional
        Synchronises the devices (e.g. ``torch.cuda.synchronize`` for each).
    sample_period_s : float, default 0.1
        Sampling period for devices without the counter.
    counter_update_s : float, default 0.1
        The counter's update period; shorter windows warn.

    Raises
    ------
    MeterUnavailable
        If there is no device, or a device has neither the counter nor power
        readings (it would otherwise read 0 J).
    """

    def __init__(
        self,
        gpus: NVMLGPUs | NullGPUs,
        cuda_indices: Sequence[int] | None = None,
        sync: Callable[[], None] | None = None,
        sample_period_s: float = 0.1,
        counter_update_s: float = 0.1,
    ) -> None:
        super().__init__(sync)
        if not gpus.available or len(gpus) == 0:
            raise MeterUnavailable(f"no NVIDIA GPU to measure ({getattr(gpus, 'reason', 'none visible')})")
        idx = list(range(len(gpus))) if cuda_indices is None else list(cuda_indices)
        self.gpus = gpus
        self.devices = [gpus[i] for i in idx]
        self.cuda_indices = idx
        self.counter = [d.has_energy_counter for d in self.devices]
        self.sample_period_s = float(sample_period_s)
        for d, has in zip(self.devices, self.counter):
            if not has:
                d.power_mw()  # raises MeterUnavailable if power cannot be read either
        self.source = "nvml" if all(self.counter) else "nvml-sampled"
        self.update_period_s = counter_update_s if all(self.counter) else self.sample_period_s
        self._samples: dict[int, list[tuple[float, float]]] = {k: [] for k, c in enumerate(self.counter) if not c}
        self._lock = threading.Lock()
        self._sampler: _Sampler | None = None

    def _label(self, k: int) -> str:
        return f"cuda:{self.cuda_indices[k]}"

    def _sample(self) -> None:
        for k in self._samples:
            t = time.perf_counter()
            p = self.devices[k].power_mw()
            with self._lock:
                self._samples[k].append((t, p))

    def _on_open(self) -> None:
        if self._samples and self._sampler is None:
            self._sampler = _Sampler(self._sample, self.sample_period_s)

    def _on_idle(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler = None
            with self._lock:
                for k in self._samples:
                    self._samples[k].clear()

    def _read_start(self, t0: float):
        start = {}
        for k, d in enumerate(self.devices):
            if self.counter[k]:
                start[k] = d.energy_mj()
        self._sample()
        return start

    def _measure(self, win: _Window, t1: float) -> Measurement:
        per: dict[str, float] = {}
        notes: list[str] = []
        if self._samples:
            self._sample()
        for k, d in enumerate(self.devices):
            if self.counter[k]:
                delta = d.energy_mj() - win.start[k]
                if delta <= 0:
                    # The counter has not ticked yet (window shorter than its update period):
                    # fall back to the power reading rather than report 0 J.
                    delta = d.power_mw() * (t1 - win.t0)
                    notes.append(f"{self._label(k)}: counter did not advance; energy from one power reading")
                per[self._label(k)] = delta / 1e3
            else:
                with self._lock:
                    pts = [(t, p) for t, p in self._samples[k] if win.t0 - self.sample_period_s <= t <= t1 + 1e-9]
                per[self._label(k)] = _trapezoid_mw(pts, win.t0, t1) / 1e3
        return Measurement(time_s=0.0, energy_j=float(sum(per.values())), source=self.source, per_device_j=per, notes=notes)

    def describe(self) -> dict[str, object]:
        return {
            "meter": self.source,
            "devices": ";".join(d.name for d in self.devices),
            "counter": ";".join("counter" if c else "sampled" for c in self.counter),
            "sample_period_s": self.sample_period_s if self._samples else None,
        }


def _trapezoid_mw(points: list[tuple[float, float]], t0: float, t1: float) -> float:
    """Integral of power samples (seconds, mW) over [t0, t1], millijoules.

    The curve is extended flat beyond the first and last samples.
    """
    if not points:
        raise MeterError("no power sample in the window")
    pts = sorted(points)
    if pts[0][0] > t0:
        pts.insert(0, (t0, pts[0][1]))
    if pts[-1][0] < t1:
        pts.append((t1, pts[-1][1]))
    total = 0.0
    for (ta, pa), (tb, pb) in zip(pts, pts[1:]):
        a, b = max(ta, t0), min(tb, t1)
        if b <= a:
            continue
        # interpolate the segment's ends when it crosses the window's ends
        slope = (pb - pa) / (tb - ta) if tb > ta else 0.0
        va, vb = pa + slope * (a - ta), pa + slope * (b - ta)
        total += 0.5 * (va + vb) * (b - a)
    return total


class RAPLMonitor(_Monitor):
    """CPU package and DRAM energy from RAPL counters.

    The counters wrap at ``max_energy_range_uj``; each reading is compared
    with the previous one, and a thread reads them every ``poll_s`` while a
    window is open, so windows longer than one wrap period stay correct.

    Parameters
    ----------
    zones : list of RAPLZone, optional
        Default :func:`rapl_zones` under ``root``.
    root : path, default ``/sys/class/powercap``
    poll_s : float, default 30
        Reading period of the wrap-guard thread.
    """

    source = "rapl"
    update_period_s = 0.001

    def __init__(
        self,
        zones: list[RAPLZone] | None = None,
        root: str | os.PathLike = POWERCAP,
        sync: Callable[[], None] | None = None,
        poll_s: float = 30.0,
    ) -> None:
        super().__init__(sync)
        self.zones = zones if zones is not None else rapl_zones(root)
        self.poll_s = poll_s
        self._last = [z.energy_uj() for z in self.zones]
        self._total_uj = [0] * len(self.zones)
        self._lock = threading.Lock()
        self._sampler: _Sampler | None = None

    def _advance(self) -> list[int]:
        with self._lock:
            for k, z in enumerate(self.zones):
                now = z.energy_uj()
                self._total_uj[k] += z.delta_uj(self._last[k], now)
                self._last[k] = now
            return list(self._total_uj)

    def _on_open(self) -> None:
        if self._sampler is None and self.poll_s:
            self._sampler = _Sampler(self._advance, self.poll_s)

    def _on_idle(self) -> None:
        if self._sampler is not None:
            self._sampler.stop()
            self._sampler = None

    def _read_start(self, t0: float):
        return self._advance()

    def _measure(self, win: _Window, t1: float) -> Measurement:
        end = self._advance()
        per: dict[str, float] = {}
        for k, z in enumerate(self.zones):
            label = f"{z.path.name}:{z.name}"
            per[label] = (end[k] - win.start[k]) / 1e6
        return Measurement(time_s=0.0, energy_j=float(sum(per.values())), source=self.source, per_device_j=per)

    def describe(self) -> dict[str, object]:
        return {"meter": "rapl", "devices": ";".join(f"{z.path.name}:{z.name}" for z in self.zones)}


class EstimateMonitor(_Monitor):
    r"""CPU energy *estimated* from a TDP and the measured CPU utilisation.

    Used only when nothing can be measured. Over a window of wall time
    :math:`t` in which the processes used :math:`c` CPU seconds on
    :math:`n` logical cores, the utilisation is :math:`u = c / (t n)` and the
    power is :math:`P = P_{idle} + (P_{TDP} - P_{idle})\,u`, so the energy is
    :math:`E = P t`. The source is always ``estimate``.

    Parameters
    ----------
    tdp_w : float, optional
        Power of the cores at full load. Default ``10 W`` per logical core.
    idle_w : float, optional
        Power at zero load. Default ``idle_fraction * tdp_w``.
    idle_fraction : float, default 0.3
    cores : int, optional
        Logical cores available (default :func:`logical_cores`).
    cpu_time : callable, default :func:`process_cpu_s`
        CPU seconds of this process.
    reduce : callable, optional
        Maps this process's CPU seconds to those of every process of the run
        (e.g. an all-reduce sum under torchrun).
    """

    source = "estimate"
    #: Default full-load power per logical core, watts.
    TDP_PER_CORE_W = 10.0
    IDLE_FRACTION = 0.3

    def __init__(
        self,
        tdp_w: float | None = None,
        idle_w: float | None = None,
        idle_fraction: float = IDLE_FRACTION,
        cores: int | None = None,
        cpu_time: Callable[[], float] = process_cpu_s,
        reduce: Callable[[float], float] | None = None,
        sync: Callable[[], None] | None = None,
    ) -> None:
        super().__init__(sync)
        self.cores = int(cores or logical_cores())
        self.tdp_w = float(tdp_w) if tdp_w is not None else self.TDP_PER_CORE_W * self.cores
        self.idle_w = float(idle_w) if idle_w is not None else idle_fraction * self.tdp_w
        if not 0 < self.idle_w < self.tdp_w:
            raise ValueError(f"need 0 < idle_w < tdp_w, got idle_w={self.idle_w} W and tdp_w={self.tdp_w} W")
        self.cpu_time = cpu_time
        self.reduce = reduce

    def _read_start(self, t0: float):
        return self.cpu_time()

    def _measure(self, win: _Window, t1: float) -> Measurement:
        cpu_s = self.cpu_time() - win.start
        if self.reduce is not None:
            cpu_s = self.reduce(cpu_s)
        wall = t1 - win.t0
        util = cpu_s / (wall * self.cores) if wall > 0 else 0.0
        power = estimate_power_w(util, self.tdp_w, self.idle_w)
        return Measurement(
            time_s=0.0,
            energy_j=power * wall,
            source=self.source,
            per_device_j={"cpu": power * wall},
            extra={"cpu_s": cpu_s, "cpu_util": min(max(util, 0.0), 1.0)},
        )

    def describe(self) -> dict[str, object]:
        return {"meter": "estimate", "tdp_w": self.tdp_w, "idle_model_w": self.idle_w, "cores": self.cores}
