"""What every command line shares: one-line errors, checked options, safe outputs.

The promises (``docs/reliability.md`` lists each with its test):

* bad input exits with status 2 and one line, ``error: ...``, naming the file,
  row and column or the option, and what was expected; never a traceback;
* a command never deletes or replaces anything it did not write: an existing
  output file is replaced only with ``--overwrite``, and an existing folder
  only when it is a fit folder written by this package (it holds
  :data:`FIT_MARKER`) and ``--overwrite`` is given;
* outputs appear whole or not at all: files are written to a hidden
  temporary name beside the target and renamed into place; a folder is
  built beside the target, the old one moved aside, the new one renamed in,
  then the old one removed;
* temporary folders left by a killed run are removed by the next run (they
  carry the pid of the process that made them).

This module uses the standard library only: the sweep runner imports it on
GPU nodes without PyMC.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path

__all__ = [
    "OutputError", "Parser", "positive_int", "nonnegative_int", "positive_float", "nonnegative_float", "probability",
    "check_output_file", "write_file", "check_fit_dir", "is_fit_dir", "scratch_dir", "replace_dir",
    "FIT_MARKER", "clean_stale", "fail", "plain_warnings", "write_fit_marker",
]

#: The file that marks a folder as a fit folder written by this package.
FIT_MARKER = ".bayes_energy_fit.json"
#: The file that marks a temporary folder of this package (with the pid that owns it).
SCRATCH_MARKER = ".bayes_energy_scratch.json"


class OutputError(ValueError):
    """An output path cannot be written without losing something (or at all)."""


# --------------------------------------------------------------------------- options
class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors are one line, ``error: ...``, with exit status 2."""

    def error(self, message: str):  # noqa: D401 - argparse's signature
        self.exit(2, f"error: {message} (see {self.prog} --help)\n")


def _number(text: str, kind: type):
    try:
        value = kind(text)
    except ValueError:
        if kind is int:
            try:
                f = float(text)
            except ValueError:
                f = math.nan
            if math.isfinite(f) and f == int(f):
                return int(f)
        raise argparse.ArgumentTypeError(f"expected a {'whole number' if kind is int else 'number'}, got {text!r}") from None
    if kind is float and not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return value


def _checked(kind: type, ok: Callable[[float], bool], expected: str, doc: str) -> Callable[[str], float]:
    """An argparse type: ``text`` read as ``kind`` (see :func:`_number`), refused unless ``ok(value)``."""

    def parse(text: str):
        v = _number(text, kind)
        if not ok(v):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return v

    parse.__doc__ = f"argparse type: {doc}."
    return parse


positive_int = _checked(int, lambda v: v >= 1, "a whole number >= 1", "a whole number >= 1")
nonnegative_int = _checked(int, lambda v: v >= 0, "a whole number >= 0", "a whole number >= 0")
positive_float = _checked(float, lambda v: v > 0, "a positive number", "a finite number > 0")
nonnegative_float = _checked(float, lambda v: v >= 0, "a number >= 0", "a finite number >= 0")
probability = _checked(float, lambda v: 0 < v < 1, "a probability strictly between 0 and 1",
                       "a probability strictly between 0 and 1")


def plain_warnings() -> None:
    """Show warnings as one line, ``warning: ...`` (for command lines), and hide ArviZ's refactor notice."""
    warnings.filterwarnings("ignore", category=FutureWarning, module="arviz")
    warnings.formatwarning = lambda message, category, *args, **kwargs: f"warning: {' '.join(str(message).split())}\n"


def fail(message: str, status: int = 2) -> int:
    """Print ``error: message`` on stderr and return ``status`` (for ``return fail(...)`` in a main)."""
    print(f"error: {' '.join(str(message).split())}", file=sys.stderr)
    return status


# --------------------------------------------------------------------------- files
def _check_parent(path: Path, option: str) -> None:
    for parent in path.parents:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(f"{option} {path}: {parent} is a file, not a folder")
            return


def check_output_file(path: str | os.PathLike, option: str = "--out", overwrite: bool = False) -> Path:
    """Check that a file can be written at ``path`` without losing anything.

    Raises
    ------
    OutputError
        If ``path`` is a folder, lies under a file, or exists and
        ``overwrite`` is false.
    """
    path = Path(path)
    if str(path) in ("", "."):
        raise OutputError(f"{option}: expected a file name, got {str(path)!r}")
    if path.is_dir():
        raise OutputError(f"{option} {path}: is a folder; give a file name")
    _check_parent(path, option)
    if path.exists() and not overwrite:
        raise OutputError(f"{option} {path}: the file exists; pass --overwrite to replace it")
    return path


def write_file(path: str | os.PathLike, write: Callable[[Path], object]) -> Path:
    """Call ``write(tmp)`` for a hidden temporary file beside ``path``, then rename it into place.

    The temporary file is removed if ``write`` fails, so ``path`` is either
    the previous file, untouched, or the new one, whole.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


# --------------------------------------------------------------------------- folders
def is_fit_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a fit folder written by this package.

    It is when it holds :data:`FIT_MARKER`, or (folders written before the
    marker) a ``posterior.nc`` whose attributes name a bayes_energy model.
    """
    path = Path(path)
    marker = path / FIT_MARKER
    if marker.is_file():
        try:
            return str(json.loads(marker.read_text()).get("written_by", "")).startswith("bayes_energy")
        except (ValueError, OSError, AttributeError):
            return False
    nc = path / "posterior.nc"
    if not nc.is_file():
        return False
    try:
        import xarray as xr

        with xr.open_dataset(nc, group="posterior") as ds:
            return "bayes_energy_model" in ds.attrs
    except Exception:  # noqa: BLE001 - any unreadable file is not ours
        return False


def check_fit_dir(path: str | os.PathLike, option: str = "--out", overwrite: bool = False) -> Path:
    """Check that a fit folder can be written at ``path`` without losing anything.

    A missing or empty folder is fine. An existing fit folder of this
    package is fine with ``overwrite``. Anything else is refused.

    Raises
    ------
    OutputError
    """
    path = Path(path)
    if str(path) in ("", ".", "..") or path.resolve() in (Path.cwd().resolve(), *Path.cwd().resolve().parents):
        raise OutputError(f"{option} {path}: is the current folder or one above it; give a new folder, e.g. fits/mine")
    _check_parent(path, option)
    if not path.exists():
        return path
    if not path.is_dir():
        raise OutputError(f"{option} {path}: is a file, not a folder; give a new folder name")
    if not any(path.iterdir()):
        return path
    if not is_fit_dir(path):
        raise OutputError(f"{option} {path}: the folder exists and is not a bayes_energy fit folder; "
                          "nothing was written. Give a new folder name")
    if not overwrite:
        raise OutputError(f"{option} {path}: a fit folder is already there; pass --overwrite to replace it")
    return path


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def clean_stale(parent: str | os.PathLike, prefix: str) -> list[Path]:
    """Remove folders ``parent/prefix*`` left by dead processes of this package; return them.

    Only folders that hold :data:`SCRATCH_MARKER` naming a process that no
    longer runs are removed: a user's folder with a similar name is never touched.
    """
    removed = []
    parent = Path(parent)
    if not parent.is_dir():
        return removed
    for d in parent.glob(f"{prefix}*"):
        marker = d / SCRATCH_MARKER
        try:
            info = json.loads(marker.read_text())
            pid, host = int(info["pid"]), info.get("host")
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if host not in (None, os.uname().nodename):
            continue
        if not _pid_alive(pid):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed


def scratch_dir(parent: str | os.PathLike, prefix: str) -> Path:
    """A new temporary folder ``parent/prefix<pid>-XXXX`` marked with this process's pid.

    Stale ones of dead processes are removed first (:func:`clean_stale`).
    """
    parent = Path(parent)
    parent.mkdir(parents=True, exist_ok=True)
    clean_stale(parent, prefix)
    d = Path(tempfile.mkdtemp(prefix=f"{prefix}{os.getpid()}-", dir=parent))
    (d / SCRATCH_MARKER).write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename,
                                                "started": time.time()}))
    return d


def replace_dir(new: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Put the folder ``new`` at ``target``: old one aside, new one in, old one removed.

    ``target`` must have passed :func:`check_fit_dir` (or be empty). The
    scratch marker in ``new`` is dropped. Between the two renames a crash
    leaves the old folder whole under a hidden name beside the target.
    """
    new, target = Path(new), Path(target)
    (new / SCRATCH_MARKER).unlink(missing_ok=True)
    old = None
    if target.exists():
        old = target.with_name(f".{target.name}.old-{os.getpid()}")
        if old.exists():
            shutil.rmtree(old)
        target.rename(old)
    try:
        new.rename(target)
    except BaseException:
        if old is not None:
            old.rename(target)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return target


def write_fit_marker(folder: str | os.PathLike, version: str, **info) -> None:
    """Mark ``folder`` as a fit folder of this package."""
    Path(folder, FIT_MARKER).write_text(json.dumps({"written_by": f"bayes_energy {version}", **info}, indent=2))
