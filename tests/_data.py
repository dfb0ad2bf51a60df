"""Locate the reference dataset for tests; fail loudly in CI when it is missing."""

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAYAKI_DIR = Path(os.environ.get("BAYES_ENERGY_DATA", ROOT.parent / "shared" / "datasets" / "mayaki2026"))


def mayaki_path() -> Path:
    """The reference CSV, or skip locally / fail in CI when it is absent."""
    for name in ("configurations_public.csv", "configurations.csv"):
        p = MAYAKI_DIR / name if MAYAKI_DIR.is_dir() else MAYAKI_DIR
        if p.is_file():
            return p
    msg = f"reference dataset not found at {MAYAKI_DIR} (set BAYES_ENERGY_DATA)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(msg)
    pytest.skip(msg)
