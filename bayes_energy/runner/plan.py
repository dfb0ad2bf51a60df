"""Sweep plans: a TOML file → the list of configurations to measure.

A plan has an optional ``[sweep]`` table of defaults and any number of
``[[grid]]`` and ``[[config]]`` tables. Each of those is a cartesian product
of the values it lists (a scalar is a one-value list), with the defaults
filling what it leaves out::

    [sweep]
    steps = 4            # measured optimiser steps per window (at least)
    min_window_s = 1.0   # optional: more steps until a window lasts this long
    warmup = 2           # steps before the first window, excluded
    repeats = 1          # measured windows, aggregated into one row
    vocab_size = 4096
    grad_accum = 1

    [[grid]]
    num_layers = [1, 2, 4]
    hidden_size = [64, 128]
    heads = 2
    ff_mult = 4          # ff = ff_mult * hidden_size (or give ff = [...])
    seq_len = [32, 64]
    batch_size = [4, 8]
    strategies = ["single", "ddp", "fsdp", "tp"]
    n_gpus = [1, 2]      # devices, or processes on CPU
    sample = 10          # optional: 10 combinations drawn with `seed`
    seed = 0

    [[grid]]             # fields that vary together: one entry per shape
    shapes = [
      {num_layers = 1, hidden_size = 64, heads = 4, seq_len = 32, batch_size = 8},
      {num_layers = 4, hidden_size = 128, heads = 8, seq_len = 16, batch_size = 4},
    ]
    ff_mult = 4
    strategies = ["single", "ddp"]
    n_gpus = [1, 2]

    [[config]]           # explicit; an invalid combination is an error here
    num_layers = 6
    ...

In a ``[[grid]]`` the combinations that cannot run are skipped: ``single``
on more than one device, ``hidden_size`` not a multiple of ``heads``, and
``tp`` whose ``heads`` or ``ff`` the device count does not divide. The same
run key listed twice is measured once.

Pure Python: no torch, no pandas.
"""

from __future__ import annotations

import itertools
import random
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from ..schema import RUN_KEY, STRATEGIES

__all__ = ["PlanError", "RunConfig", "SweepPlan", "load_plan", "parse_plan", "parse_shard", "shard", "config_key"]


class PlanError(ValueError):
    """A plan file is wrong; the message names the file, the table and the field."""


@dataclass(frozen=True)
class RunConfig:
    """One configuration to measure (one row of the sweep table).

    ``n_gpus`` is the number of devices, or of processes on CPU.
    """

    num_layers: int
    hidden_size: int
    heads: int
    ff: int
    seq_len: int
    batch_size: int
    strategy: str
    n_gpus: int
    grad_accum: int = 1
    steps: int = 5
    warmup: int = 2
    repeats: int = 1
    vocab_size: int = 30522
    min_window_s: float = 0.0
    family: str = "bert"
    workload: str = "synthetic"

    def problems(self) -> list[str]:
        """Why this configuration cannot run (empty when it can)."""
        out = []
        for f in ("num_layers", "hidden_size", "heads", "ff", "seq_len", "batch_size", "n_gpus", "grad_accum", "steps", "repeats", "vocab_size"):
            v = getattr(self, f)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                out.append(f"{f} must be a positive whole number, got {v!r}")
        if not isinstance(self.min_window_s, (int, float)) or isinstance(self.min_window_s, bool) or self.min_window_s < 0:
            out.append(f"min_window_s must be a number >= 0, got {self.min_window_s!r}")
        if not isinstance(self.warmup, int) or self.warmup < 0:
            out.append(f"warmup must be a whole number >= 0, got {self.warmup!r}")
        if self.strategy not in STRATEGIES:
            out.append(f"strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")
        if self.family != "bert":
            out.append(f"family must be 'bert' (the only workload the runner builds), got {self.family!r}")
        if out:
            return out
        if self.hidden_size % self.heads:
            out.append(f"hidden_size {self.hidden_size} is not a multiple of heads {self.heads}")
        if self.strategy == "single" and self.n_gpus != 1:
            out.append(f"strategy 'single' runs on 1 device, got n_gpus={self.n_gpus}")
        if self.strategy == "tp":
            if self.heads % self.n_gpus:
                out.append(f"tp over {self.n_gpus} devices needs heads divisible by {self.n_gpus}, got {self.heads}")
            if self.ff % self.n_gpus:
                out.append(f"tp over {self.n_gpus} devices needs ff divisible by {self.n_gpus}, got {self.ff}")
        return out

    def to_dict(self) -> dict:
        """The configuration as a plain dict (JSON-ready)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> RunConfig:
        """Inverse of :meth:`to_dict` (unknown keys ignored)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in names})

    @property
    def label(self) -> str:
        """A short human label, e.g. ``tp×2 L2 d64 h2 ff256 S32 B4``."""
        return (
            f"{self.strategy}×{self.n_gpus} L{self.num_layers} d{self.hidden_size} h{self.heads} "
            f"ff{self.ff} S{self.seq_len} B{self.batch_size}" + (f" ga{self.grad_accum}" if self.grad_accum > 1 else "")
        )


def config_key(cfg: RunConfig | dict, hardware: str) -> tuple:
    """The run key of ``cfg`` on ``hardware``: :data:`bayes_energy.schema.RUN_KEY` plus ``workload``.

    Values are normalised to strings so keys read back from CSV compare equal.
    """
    d = cfg.to_dict() if isinstance(cfg, RunConfig) else cfg
    d = {**d, "hardware": hardware}
    return tuple(_norm(d[c]) for c in RUN_KEY) + (_norm(d.get("workload", "")),)


def _norm(v) -> str:
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return str(v).strip().lower()


_FIELDS = {f.name for f in fields(RunConfig)}
_ALIASES = {"strategies": "strategy", "devices": "n_gpus", "layers": "num_layers"}
_DEFAULTS_ONLY = {"timeout_s", "name", "description"}
_TABLE_EXTRA = {"ff_mult", "sample", "seed", "name", "shapes"}


@dataclass
class SweepPlan:
    """A parsed plan.

    Attributes
    ----------
    configs : list of RunConfig
        Unique configurations, in plan order.
    skipped : list of str
        Why grid combinations were left out (one line each).
    timeout_s : float or None
        Per-configuration timeout the plan asks for.
    source : str
        The file it came from.
    """

    configs: list[RunConfig]
    skipped: list[str]
    timeout_s: float | None
    source: str
    name: str = ""


def load_plan(path: str | Path) -> SweepPlan:
    """Read a plan file.

    Raises
    ------
    PlanError
        On unreadable TOML, unknown fields, or an invalid explicit ``[[config]]``.
    """
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError:
        raise PlanError(f"{path}: no such plan file") from None
    except tomllib.TOMLDecodeError as err:
        raise PlanError(f"{path}: not valid TOML ({err})") from None
    return parse_plan(data, source=str(path))


def parse_plan(data: dict, source: str = "plan") -> SweepPlan:
    """Turn a parsed TOML document into a :class:`SweepPlan` (see the module docstring)."""
    unknown_top = set(data) - {"sweep", "grid", "config"}
    if unknown_top:
        raise PlanError(f"{source}: unknown table(s) {', '.join(sorted(unknown_top))}; expected [sweep], [[grid]], [[config]]")
    defaults = dict(data.get("sweep", {}))
    bad = set(defaults) - _DEFAULTS_ONLY - _FIELDS
    if bad:
        raise PlanError(f"{source}: [sweep] has unknown field(s) {', '.join(sorted(bad))}")
    timeout_s = defaults.pop("timeout_s", None)
    name = str(defaults.pop("name", ""))
    defaults.pop("description", None)
    tables = [("grid", i, t) for i, t in enumerate(data.get("grid", []))] + [
        ("config", i, t) for i, t in enumerate(data.get("config", []))
    ]
    if not tables:
        raise PlanError(f"{source}: the plan lists no [[grid]] or [[config]] table")
    configs: list[RunConfig] = []
    skipped: list[str] = []
    seen: set[tuple] = set()
    for kind, i, table in tables:
        where = f"{source}: [[{kind}]] #{i + 1}"
        for cfg in _expand(table, defaults, where, strict=(kind == "config"), skipped=skipped):
            key = config_key(cfg, "")
            if key in seen:
                skipped.append(f"{where}: {cfg.label} listed before; measured once")
                continue
            seen.add(key)
            configs.append(cfg)
    return SweepPlan(configs=configs, skipped=skipped, timeout_s=timeout_s, source=source, name=name)


def _as_list(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _expand(table: dict, defaults: dict, where: str, strict: bool, skipped: list[str]) -> list[RunConfig]:
    spec: dict[str, list] = {}
    for k, v in table.items():
        name = _ALIASES.get(k, k)
        if name not in _FIELDS and name not in _TABLE_EXTRA:
            raise PlanError(f"{where}: unknown field {k!r}; expected one of {', '.join(sorted(_FIELDS | _TABLE_EXTRA | set(_ALIASES)))}")
        if name in spec:
            raise PlanError(f"{where}: field {name!r} given twice (once as an alias)")
        spec[name] = _as_list(v)
    shapes = spec.pop("shapes", None)
    if shapes is not None:
        if not all(isinstance(x, dict) for x in shapes):
            raise PlanError(f"{where}: shapes must be a list of inline tables, e.g. [{{num_layers = 2, hidden_size = 64}}]")
        for x in shapes:
            unknown = set(x) - _FIELDS - {"ff_mult"}
            clash = set(x) & set(spec)
            if unknown:
                raise PlanError(f"{where}: shapes entry {x} has unknown field(s) {', '.join(sorted(unknown))}")
            if clash:
                raise PlanError(f"{where}: field(s) {', '.join(sorted(clash))} given both in shapes and in the table")
    sample = spec.pop("sample", [None])[0]
    seed = spec.pop("seed", [0])[0]
    spec.pop("name", None)
    ff_mult = spec.pop("ff_mult", None)
    shape_keys = set().union(*shapes) if shapes else set()
    if ff_mult is not None and ("ff" in spec or "ff" in shape_keys):
        raise PlanError(f"{where}: give either ff or ff_mult, not both")
    for k, v in defaults.items():
        if k not in shape_keys:
            spec.setdefault(k, [v])
    required = ["num_layers", "hidden_size", "heads", "seq_len", "batch_size", "strategy", "n_gpus"]
    given = set(spec) | shape_keys
    has_ff = "ff" in given or ff_mult is not None or "ff_mult" in shape_keys
    missing = [k for k in required if k not in given] + ([] if has_ff else ["ff (or ff_mult)"])
    if missing:
        raise PlanError(f"{where}: missing field(s) {', '.join(missing)}")
    if shapes:
        incomplete = [x for x in shapes if (shape_keys - set(x))]
        if incomplete:
            raise PlanError(f"{where}: every shapes entry needs the same fields ({', '.join(sorted(shape_keys))}); got {incomplete[0]}")
    names = list(spec) + (["ff_mult"] if ff_mult is not None else [])
    values = list(spec.values()) + ([ff_mult] if ff_mult is not None else [])
    out: list[RunConfig] = []
    for shape, combo in itertools.product(shapes or [{}], itertools.product(*values)):
        d = {**dict(zip(names, combo)), **shape}
        if "ff_mult" in d:
            m = d.pop("ff_mult")
            d["ff"] = int(round(m * d["hidden_size"])) if isinstance(d["hidden_size"], int) else d["hidden_size"]
        if isinstance(d.get("strategy"), str):
            d["strategy"] = d["strategy"].lower()
        try:
            cfg = RunConfig(**d)
        except TypeError as err:
            raise PlanError(f"{where}: {err}") from None
        problems = cfg.problems()
        hard = [p for p in problems if "must be" in p]
        if hard or (strict and problems):
            raise PlanError(f"{where}: {cfg.label}: {'; '.join(problems)}")
        if problems:
            skipped.append(f"{where}: {cfg.label} skipped: {'; '.join(problems)}")
            continue
        out.append(cfg)
    if sample is not None:
        if not isinstance(sample, int) or sample < 1:
            raise PlanError(f"{where}: sample must be a positive whole number, got {sample!r}")
        if sample < len(out):
            keep = sorted(random.Random(seed).sample(range(len(out)), sample))
            out = [out[k] for k in keep]
    return out


def parse_shard(text: str) -> tuple[int, int]:
    """Parse ``"i/n"`` (0-based ``i``, e.g. a Slurm array task id) into ``(i, n)``.

    Raises
    ------
    PlanError
        Unless ``0 <= i < n``.
    """
    try:
        i, n = (int(x) for x in str(text).split("/"))
    except ValueError:
        raise PlanError(f"--shard expects i/n with whole numbers, e.g. 0/4; got {text!r}") from None
    if not 0 <= i < n:
        raise PlanError(f"--shard {text}: expected 0 <= i < n")
    return i, n


def shard(configs: Sequence[RunConfig], i: int, n: int) -> list[RunConfig]:
    """Shard ``i`` of ``n``: every ``n``-th configuration from the ``i``-th.

    Round-robin keeps the shards' mix of sizes and strategies alike, so they
    take similar times. The shards partition the plan: each configuration is
    in exactly one.
    """
    return list(configs[i::n])
