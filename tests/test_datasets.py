"""Loaders: the reference table mapped onto the schema; sweep files validated whole."""

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from bayes_energy.datasets import (MAYAKI_COMMIT, find_mayaki2026, load_mayaki2026, load_sweep)
from bayes_energy.proxies import add_proxies
from bayes_energy.schema import SchemaError
from tests._data import mayaki_path
from tests.test_schema import good_table


@pytest.fixture(scope="module")
def mayaki():
    return load_mayaki2026(mayaki_path())


def test_mayaki_mapping(mayaki):
    raw = pd.read_csv(mayaki_path(), index_col=0)
    assert len(mayaki) == 629
    np.testing.assert_allclose(mayaki["energy_j"], raw["energy_consumed_kWh"].to_numpy() * 3.6e6)
    assert set(mayaki["strategy"]) == {"single", "fsdp", "tp"}
    assert set(mayaki["family"]) == {"bert", "gpt"}
    assert mayaki["group"].nunique() == 210  # the authors' configuration families
    assert (mayaki["energy_source"] == "codecarbon").all()
    # the loader's seq_len reproduces the authors' proxies exactly
    p = add_proxies(mayaki)
    np.testing.assert_allclose(p["memory"], raw["M_proxy"].to_numpy(), rtol=1e-12)
    np.testing.assert_allclose(p["compute"], raw["compute"].to_numpy(), rtol=1e-12)


def test_env_var_and_folder_lookup(monkeypatch):
    monkeypatch.setenv("BAYES_ENERGY_DATA", str(mayaki_path().parent))
    assert find_mayaki2026() == mayaki_path()


def test_missing_file_explains_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv("BAYES_ENERGY_DATA", raising=False)
    with pytest.raises(FileNotFoundError) as err:
        find_mayaki2026(tmp_path)
    assert MAYAKI_COMMIT in str(err.value) and "system-aware-energy-prediction" in str(err.value)


def test_load_sweep_names_file_and_line(tmp_path):
    good = tmp_path / "good.csv"
    good_table().to_csv(good, index=False)
    bad = tmp_path / "bad.csv"
    t = good_table()
    t.loc[2, "energy_j"] = -3
    t.to_csv(bad, index=False)
    assert len(load_sweep(good)) == 4
    with pytest.raises(SchemaError, match=r"bad\.csv: row 4, column 'energy_j'"):
        load_sweep([good, bad])


def test_load_sweep_duplicates_across_files(tmp_path):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    good_table().to_csv(a, index=False)
    good_table().to_csv(b, index=False)
    with pytest.raises(SchemaError, match="duplicates"):
        load_sweep([a, b])


def test_package_imports_without_torch_or_pymc():
    code = ("import sys, bayes_energy, bayes_energy.datasets, bayes_energy.schema; "
            "assert 'torch' not in sys.modules and 'pymc' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.fixture
def loopback(tmp_path):
    """A loopback HTTP server over tmp_path/www."""
    import functools
    import http.server
    import threading

    www = tmp_path / "www"
    www.mkdir()
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(www))
    handler.log_message = lambda *a, **k: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield www, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_download_checks_and_places_file(loopback, tmp_path):
    from bayes_energy.datasets import download_mayaki2026

    www, base = loopback
    (www / "configurations.csv").write_bytes(mayaki_path().read_bytes())
    dest = tmp_path / "cache"
    path = download_mayaki2026(dest, url=f"{base}/configurations.csv")
    assert len(load_mayaki2026(path)) == 629


def test_download_rejects_wrong_file_and_leaves_nothing(loopback, tmp_path):
    from bayes_energy.datasets import download_mayaki2026

    www, base = loopback
    (www / "tiny.csv").write_text("a,b\n1,2\n")
    dest = tmp_path / "cache"
    with pytest.raises(SchemaError, match="bytes"):
        download_mayaki2026(dest, url=f"{base}/tiny.csv")
    with pytest.raises(SchemaError, match="SHA-256"):
        (www / "configurations.csv").write_bytes(mayaki_path().read_bytes())
        download_mayaki2026(dest, url=f"{base}/configurations.csv", sha256="0" * 64)
    assert not any(dest.iterdir())
