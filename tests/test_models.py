"""Model specification, the shared law, priors and the OLS law (no MCMC here)."""

import numpy as np
import pymc as pm
import pytensor.tensor as pt
import pytest

from bayes_energy.datasets import load_mayaki2026
from bayes_energy.models import default_config
from bayes_energy.models.build import build_model, model_data
from bayes_energy.models.curves import CURVE_PARAMS
from bayes_energy.models.law import (
    block_mean,
    curve_log_eta,
    curve_theta,
    log_eta_from_curves,
)
from bayes_energy.models.ols import fit_ols
from bayes_energy.models.spec import STRATEGY_SLOPE_FEATURES, ModelSpec
from tests._data import mayaki_path


@pytest.fixture(scope="module")
def table():
    return load_mayaki2026(mayaki_path())


@pytest.fixture(scope="module")
def spec(table):
    return ModelSpec.from_table(table, "hierarchical", default_config("hierarchical"))


def test_spec_coords_and_centring(spec, table):
    assert spec.coords["strategy"][0] == "single"
    assert len(spec.coords["cell"]) == 3  # A100|gpt, 2080Ti|bert, 2080Ti|gpt
    assert spec.coords["coef"][:4] == ["intercept", "log_compute", "log_memory", "log_eta"]
    A = spec.arrays(table)
    np.testing.assert_allclose(A["X"][:, 1:3].mean(axis=0), 0.0, atol=1e-9)  # centred
    assert abs(A["log_energy"].mean()) < 1e-9


def test_second_order_terms_are_standardised_squares(spec, table):
    """The default's second-order terms: z² centred on the training table, 0 for a feature it holds constant."""
    from bayes_energy.models.spec import SECOND_ORDER_FEATURES, design_frame

    coefs = spec.coords["coef"]
    first = coefs.index(f"sq_{SECOND_ORDER_FEATURES[0]}")  # after the linear terms, before the slopes per strategy
    assert coefs[first:first + len(SECOND_ORDER_FEATURES)] == [f"sq_{f}" for f in SECOND_ORDER_FEATURES]
    assert all(":" in c for c in coefs[first + len(SECOND_ORDER_FEATURES):])
    assert "log_params" in coefs and "sq_log_n_gpus" not in coefs  # device counts are the curves' business
    A = spec.arrays(table)
    x = design_frame(table)
    for f in SECOND_ORDER_FEATURES:
        col = A["X"][:, coefs.index(f"sq_{f}")]
        z = (x[f] - x[f].mean()) / x[f].std(ddof=0)
        np.testing.assert_allclose(col, z**2 - 1.0, atol=1e-9)
        assert abs(col.mean()) < 1e-9
    # one sequence length only: its square is 0 on the training rows (no coefficient to learn there),
    # and a candidate with another sequence length gets the prior's share of it
    one = table[table["seq_len"] == table["seq_len"].iloc[0]].reset_index(drop=True)
    s1 = ModelSpec.from_table(one, "hierarchical", default_config("hierarchical"))
    j = s1.coords["coef"].index("sq_log_seq_len")
    assert np.all(s1.arrays(one)["X"][:, j] == 0.0)
    other = one.head(1).assign(seq_len=int(one["seq_len"].iloc[0]) * 2)
    np.testing.assert_allclose(s1.arrays(other)["X"][0, j], np.log(2.0) ** 2)
    # the first-order model is still one config key away
    s0 = ModelSpec.from_table(table, "hierarchical", default_config("hierarchical") | {"second_order": False})
    assert not any(c.startswith("sq_") or c == "log_params" for c in s0.coords["coef"])


def test_unknown_levels_are_refused_unless_allowed(spec, table):
    new = table.head(2).assign(hardware="NVIDIA H100")
    with pytest.raises(ValueError, match="unknown cell level"):
        spec.arrays(new)
    A = spec.arrays(new, allow_new=True)
    assert (A["cell_idx"] >= len(spec.coords["cell"])).all()


@pytest.mark.parametrize("slopes_by_cell", [False, True], ids=["shared_curve_slopes", "curve_slopes_by_cell"])
def test_numpy_and_pytensor_law_agree(spec, table, slopes_by_cell):
    """The posterior-predictive path (numpy) computes what the model (PyTensor) does."""
    rng = np.random.default_rng(0)
    A = spec.arrays(table)
    ncell, ncoef, nstrat = len(spec.coords["cell"]), len(spec.coords["coef"]), len(spec.coords["strategy"])
    ncurve = len(spec.coords["curve_coef"])
    P = {
        "E_beta": rng.normal(size=(ncell, ncoef)) * 0.3,
        "E_psi": rng.normal(size=nstrat),
        "E_psi_cell": rng.normal(size=(ncell, nstrat)) * 0.1,
        "curve_cell": rng.normal(size=(ncell, len(CURVE_PARAMS))) * 0.5,
        "curve_beta": rng.normal(size=(ncell, ncurve, len(CURVE_PARAMS)) if slopes_by_cell
                                 else (ncurve, len(CURVE_PARAMS))) * 0.2,
    }
    eta_np = log_eta_from_curves(P, A, np)
    mu_np = block_mean(P, "E", A, eta_np, np)
    Pt = {k: pt.constant(v) for k, v in P.items()}
    At = {k: pt.constant(v) for k, v in A.items() if isinstance(v, np.ndarray)}
    eta_pt = curve_log_eta(At["n_gpus"], At["curve"], curve_theta(Pt, At, pt), pt)
    mu_pt = block_mean(Pt, "E", At, eta_pt, pt)
    np.testing.assert_allclose(eta_pt.eval(), eta_np, rtol=1e-10)
    np.testing.assert_allclose(mu_pt.eval(), mu_np, rtol=1e-10)
    # posterior draws (leading sample axis, the fast per-cell path), in float64 and in the float32 of predict()
    P2 = {k: np.stack([v, 0.5 * v, v]) for k, v in P.items()}
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-5)):
        Pd = {k: v.astype(dtype) for k, v in P2.items()}
        eta2 = log_eta_from_curves(Pd, A, np)
        mu2 = block_mean(Pd, "E", A, eta2, np)
        assert eta2.dtype == dtype and mu2.dtype == dtype
        np.testing.assert_allclose(eta2[2], eta_np, rtol=tol, atol=tol)
        np.testing.assert_allclose(mu2[2], mu_np, rtol=tol, atol=tol)
        half = {k: v[1] for k, v in P2.items()}
        np.testing.assert_allclose(mu2[1], block_mean(half, "E", A, log_eta_from_curves(half, A, np), np), rtol=tol, atol=tol)


def test_speedup_curves_shape():
    from bayes_energy.models.curves import saturating_log_eta, usl_log_eta

    n = np.array([1.0, 2.0, 4.0, 8.0])
    eta = np.exp(usl_log_eta(n, np.log(0.1), -np.inf, np))
    assert eta[0] == 1.0 and np.all(np.diff(eta) < 0)  # contention lowers efficiency
    onset = np.exp(usl_log_eta(n, np.log(0.1), np.log(2.0), np))
    assert onset[0] == 1.0 and onset[1] < 0.5 * eta[1]  # the distribution overhead: a step from one to two devices
    assert np.all(n * onset <= n)  # never super-linear
    # beyond two devices the overhead is a constant: efficiency then falls more slowly than without it
    assert onset[3] / onset[1] > eta[3] / eta[1]
    s = n * np.exp(saturating_log_eta(n, np.log(3.0), np.log(0.5), np))
    assert s[0] == 1.0 and np.all(np.diff(s) > 0) and s[-1] < 3.0  # saturates below S_inf
    s_slow = n * np.exp(saturating_log_eta(n, np.log(0.5), 0.0, np))
    assert np.all(s_slow[1:] < 1.0)  # TP over a slow link: slower than one device
    # a high ceiling with a fast rate would give S(2) ~ 20 uncapped: the curve never exceeds N
    s_fast = n * np.exp(saturating_log_eta(n, np.log(20.0), np.log(10.0), np))
    assert s_fast[0] == 1.0 and np.all(s_fast <= n) and s_fast[-1] > 0.95 * n[-1]


def test_prior_predictive_is_weakly_informative(table):
    """Priors put the data inside the prior predictive without allowing absurd energies."""
    spec = ModelSpec.from_table(table, "pooled", default_config("pooled"))
    model = build_model(spec, table)
    with model:
        prior = pm.sample_prior_predictive(draws=300, random_seed=1)
    y = prior.prior_predictive["log_energy"].to_numpy().ravel()
    obs = model_data(spec, table)["log_energy_obs"]
    lo, hi = np.quantile(y, [0.05, 0.95])
    assert lo < obs.min() and hi > obs.max()  # the data are plausible a priori
    assert hi - lo < 40  # but not e^40-fold spreads: ln-energy within about +-20 of the centre
    alpha_eta = prior.prior["E_mu"].sel(coef="log_eta").to_numpy()
    assert np.mean(alpha_eta < 0) > 0.9  # efficiency lowers energy, as in the paper


def test_ols_reproduces_published_coefficients(table):
    """On the public rows the OLS law lands next to the authors' cluster-robust fit (693 rows)."""
    pooled = fit_ols(table[table["strategy"] != "tp"])
    assert pooled.coef["log_eta"] == pytest.approx(-0.906, abs=0.03)
    assert pooled.coef["strategy[fsdp]"] == pytest.approx(-0.355, abs=0.03)
    assert pooled.coef["log_memory"] == pytest.approx(0.428, abs=0.05)
    bert = fit_ols(table[table["family"] == "bert"])
    assert bert.coef["log_eta"] == pytest.approx(-1.123, abs=0.05)
    assert bert.coef["strategy[tp]"] == pytest.approx(-0.571, abs=0.05)
    assert 0.85 < pooled.adj_r2 < 0.97


def test_ols_pre_run_needs_no_efficiency(table):
    gpt = table[table["family"] == "gpt"]
    fit = fit_ols(gpt)
    pre = fit.predict(gpt.drop(columns=["efficiency", "speedup"]), post_run=False)
    post = fit.predict(gpt)
    y = np.log(gpt["energy_j"].to_numpy())
    assert np.corrcoef(pre, y)[0, 1] > 0.8
    assert np.mean((post - y) ** 2) < np.mean((pre - y) ** 2)  # knowing eta helps


def test_crossed_pooling_keeps_the_prior_of_a_cell_and_splits_it_by_hardware_and_family(table):
    """Crossed cells: beta_c = mu + a_hardware + b_family + interaction, with the total prior scale unchanged."""
    cfg = default_config("hierarchical", {"crossed": True})
    spec = ModelSpec.from_table(table, "hierarchical", cfg)
    hw, fam = spec.cell_parents()
    for c, label in enumerate(spec.coords["cell"]):
        assert label == f"{spec.coords['hardware'][hw[c]]}|{spec.coords['family'][fam[c]]}"
    model = build_model(spec, table)
    names = {v.name for v in model.free_RVs}
    assert {"E_beta_hw", "E_beta_fam", "curve_cell_hw", "T_psi_cell_dev_fam", "curve_beta_cell_hw"} <= names
    with model:
        prior = pm.sample_prior_predictive(draws=2000, random_seed=2).prior
    # deviation of a cell's slope from the population mean: sd tau (0.25) as without crossing
    dev = (prior["E_beta"] - prior["E_mu"]).sel(coef="log_compute").to_numpy()
    np.testing.assert_allclose(dev.std(axis=(0, 1)), 0.25, rtol=0.1)
    # two cells on the same hardware share its effect: their deviations correlate by the hardware share
    same_hw = [c for c in range(len(hw)) if hw[c] == np.bincount(hw).argmax()]
    r = np.corrcoef(dev[0, :, same_hw[0]], dev[0, :, same_hw[1]])[0, 1]
    assert abs(r - cfg["priors"]["cell_shares"][0]) < 0.1


def test_efficiency_scatter_is_student_t_by_default_and_a_bad_choice_is_refused(spec, table):
    """The measured ln efficiency strays from the curves with heavy tails (eta_noise, chosen by LOO)."""
    from bayes_energy.models.predictive import rng_noise

    model = build_model(spec, table)
    assert type(model["log_eta"].owner.op).__name__ == "StudentTRV"
    assert "eta_nu" in {v.name for v in model.deterministics}
    normal = build_model(ModelSpec.from_table(table, "hierarchical", default_config("hierarchical", {"eta_noise": "normal"})), table)
    assert type(normal["log_eta"].owner.op).__name__ == "NormalRV"
    # the numpy predictive draws the scatter from the same family: heavy tails at nu = 2.5
    P = {"E_nu": np.full(4, 30.0), "eta_nu": np.full(4, 2.5)}
    z = rng_noise(P, np.random.default_rng(0))("eta", 50_000)
    assert np.mean(np.abs(z) > 4) > 0.01  # a normal puts 6e-5 there, t_2.5 about 0.02
    with pytest.raises(ValueError, match="eta_noise must be 'normal' or 'student_t'"):
        build_model(ModelSpec.from_table(table, "hierarchical", default_config("hierarchical", {"eta_noise": "laplace"})), table)


def test_noise_scales_have_a_zero_avoiding_prior_with_the_half_normals_mean(spec, table):
    """No repeated run reproduces its energy exactly: the noise scales' prior puts almost nothing near 0."""
    from bayes_energy.models.pooled import PRIORS

    model = build_model(spec, table)
    draws = pm.draw([model["E_sigma"], model["eta_sigma"]], draws=20_000, random_seed=1)
    for d, scale in zip(draws, (PRIORS["sigma"], PRIORS["eta_sigma"])):
        assert abs(d.mean() / (scale * np.sqrt(2 / np.pi)) - 1) < 0.03  # the half-normal's mean, kept
        assert np.mean(d < 0.01) < 0.003  # a half-normal of that scale puts 1.6 % there
    old = {"priors": {**PRIORS, "noise_prior": "halfnormal"}}
    half = build_model(ModelSpec.from_table(table, "hierarchical", default_config("hierarchical", old)), table)
    assert type(half["T_sigma"].owner.op).__name__ == "HalfNormalRV"
    bad = {"priors": {**PRIORS, "noise_prior": "exponential"}}
    with pytest.raises(ValueError, match="noise_prior must be 'gamma' or 'halfnormal'"):
        build_model(ModelSpec.from_table(table, "hierarchical", default_config("hierarchical", bad)), table)


def test_time_on_the_coordinates_given_energy_keeps_the_prior_and_refuses_a_bad_choice(table):
    """``time_coordinates``: sampling time's coefficients given energy's is a shift, so the prior is unchanged."""
    cfg = {"time_coordinates": "given_energy"}
    spec = ModelSpec.from_table(table, "hierarchical", default_config("hierarchical", cfg))
    model = build_model(spec, table)
    # the cells' coefficients on the rotated basis of their design (the default cell_basis): sheared there
    assert {"T_beta_rot_given_E", "T_mu_given_E", "T_psi_free_given_E"} <= {v.name for v in model.free_RVs}
    plain = build_model(ModelSpec.from_table(table, "hierarchical", default_config("hierarchical")), table)
    assert len(model.free_RVs) == len(plain.free_RVs)  # the same number of free variables, on other coordinates
    draws = {}
    for label, m in (("given", model), ("plain", plain)):
        t, e, lam = pm.draw([m["T_beta"], m["E_beta"], m["T_on_E_resid"]], draws=4000, random_seed=3)
        draws[label] = t[:, 0, 1], e[:, 0, 1], lam
    t, e, lam = draws["given"]
    assert abs(np.corrcoef(t, e)[0, 1]) < 0.06  # a priori time's slope ignores energy's, as before
    assert t.std() == pytest.approx(draws["plain"][0].std(), rel=0.06)
    assert t.mean() == pytest.approx(draws["plain"][0].mean(), abs=0.06)
    with pytest.raises(ValueError, match="time_coordinates must be 'marginal' or 'given_energy'"):
        build_model(ModelSpec.from_table(table, "hierarchical", default_config("hierarchical", {"time_coordinates": "x"})), table)


def test_slopes_per_strategy_are_the_feature_on_that_strategys_rows_with_the_features_prior(table):
    """``strategy_slopes``: a coefficient "<strategy>:<feature>" per multi-device strategy, 0 on other rows; all seven by default."""
    cfg = default_config("hierarchical", {"strategy_slopes": ["log_compute", "log_params"]})
    spec = ModelSpec.from_table(table, "hierarchical", cfg)
    coefs = spec.coords["coef"]
    assert {"tp:log_compute", "fsdp:log_compute", "tp:log_params"} <= set(coefs) and "single:log_compute" not in coefs
    X = spec.arrays(table)["X"]
    tp = (table["strategy"] == "tp").to_numpy()
    col = X[:, coefs.index("tp:log_compute")]
    np.testing.assert_allclose(col[tp], X[tp, coefs.index("log_compute")])  # the same centred feature on TP rows
    assert np.all(col[~tp] == 0)
    model = build_model(spec, table)
    mu_sd = pm.draw(model["E_mu"], draws=3000, random_seed=4).std(axis=0)
    assert mu_sd[coefs.index("tp:log_compute")] == pytest.approx(0.5, rel=0.1)  # the features' prior sd
    default = ModelSpec.from_table(table, "hierarchical", default_config("hierarchical")).coords["coef"]
    assert {f"{s}:{f}" for s in ("ddp", "fsdp", "tp") for f in STRATEGY_SLOPE_FEATURES if s in spec.strategies} <= set(default)
    off = ModelSpec.from_table(table, "hierarchical", default_config("hierarchical", {"strategy_slopes": []}))
    assert not any(":" in c for c in off.coords["coef"])  # [] turns them off


def test_rotated_cells_are_the_same_posterior_on_another_basis(spec, table):
    """``cell_basis = "rotated"`` (the default): each cell's coefficients sampled as v = V^T (beta / tau).

    V is orthogonal with the directions the cell's rows inform first, then its design's exact null directions;
    the map is linear, so the log-posterior differs from sampling beta directly (``"coef"``) by a constant only.
    """
    from bayes_energy.models.spec import by_coef

    rotated, direct = spec, ModelSpec.from_table(table, "hierarchical", default_config("hierarchical", {"cell_basis": "coef"}))
    rot, coef = build_model(rotated, table), build_model(direct, table)
    assert "cell_rotation" not in model_data(direct, table)
    assert {"E_beta_rot", "T_beta_rot"} <= {v.name for v in rot.free_RVs} and "E_beta" in rot.named_vars
    tau = by_coef(spec.config["priors"]["tau_coef"], spec.coords["coef"])
    V = model_data(rotated, table)["cell_rotation"]
    arrays = spec.arrays(table)
    X, cell = arrays["X"], arrays["cell_idx"]
    for c in range(V.shape[0]):
        np.testing.assert_allclose(V[c].T @ V[c], np.eye(len(tau)), atol=1e-10)
        design = (X[cell == c] * tau) @ V[c]  # the cell's rows on the rotated basis
        informed = np.linalg.matrix_rank(X[cell == c])
        assert 0 < informed < len(tau)  # slopes per strategy leave exact null directions in every cell here
        np.testing.assert_allclose(design[:, informed:], 0, atol=1e-8)
    logp_rot, logp_coef = rot.compile_logp(), coef.compile_logp()
    rng = np.random.default_rng(5)
    diffs = []
    for _ in range(3):
        point = {k: v + rng.normal(0, 0.05, v.shape) for k, v in coef.initial_point().items()}
        moved = dict(point)
        for b in ("E", "T"):
            beta = moved.pop(f"{b}_beta")
            moved[f"{b}_beta_rot"] = np.einsum("cji,cj->ci", V, beta / tau)
        diffs.append(logp_coef(point) - logp_rot(moved))
    assert np.ptp(diffs) < 1e-6 * abs(diffs[0]) + 1e-6
    with pytest.raises(ValueError, match="cell_basis must be 'coef' or 'rotated'"):
        build_model(ModelSpec.from_table(table, "hierarchical", default_config("hierarchical", {"cell_basis": "qr"})), table)



@pytest.fixture(scope="module")
def tiny_compiled():
    """The pooled model of ``tiny_sweep(0)``, compiled for nutpie (the model of tests/test_compile_cache.py too)."""
    from bayes_energy.models.cache import compile_nutpie
    from bayes_energy.models.sample import kept_vars
    from bayes_energy.simulate import tiny_sweep

    df = tiny_sweep(0)
    model = build_model(ModelSpec.from_table(df, "pooled", default_config("pooled")), df)
    return compile_nutpie(model, var_names=kept_vars(model))


def test_the_low_rank_cutoff_reaches_nutpie_and_a_bad_one_is_refused(tiny_compiled):
    from bayes_energy.models.sample import EIGVAL_CUTOFF, nuts_settings, run_nutpie

    default, wide = (run_nutpie(tiny_compiled, draws=30, tune=60, chains=1, seed=4, eigval_cutoff=c).posterior
                     for c in (EIGVAL_CUTOFF, 1e6))  # 1e6: no direction corrected
    assert not all(np.array_equal(default[v].values, wide[v].values) for v in default.data_vars)
    with pytest.raises(ValueError, match="eigval_cutoff must be above 1"):
        nuts_settings(eigval_cutoff=1.0)


def test_the_mass_matrix_window_reaches_nutpie(monkeypatch, tiny_compiled):
    from bayes_energy.models import sample

    def draws(window):
        monkeypatch.setattr(sample, "MASS_MATRIX_WINDOW", window)
        # 200 tuning steps: nutpie's own window (80) switches twice, ours (150) once
        return sample.run_nutpie(tiny_compiled, draws=30, tune=200, chains=1, seed=4).posterior

    ours, nutpies = draws(sample.MASS_MATRIX_WINDOW), draws(80)
    assert not all(np.array_equal(ours[v].values, nutpies[v].values) for v in ours.data_vars)


def test_chains_start_near_the_posterior_mode_each_from_its_own_seed(monkeypatch, tiny_compiled):
    import nutpie
    import xarray as xr

    from bayes_energy.models.sample import (
        INIT_JITTER,
        _logp_and_gradient,
        run_nutpie,
        start_at_mode,
    )

    compiled = tiny_compiled
    neg_logp = _logp_and_gradient(compiled)
    mode = start_at_mode(compiled, seed=5, jitter=0.0).initial_point_func(1)
    pymc_starts = [compiled.initial_point_func(s) for s in range(5)]
    # the climb reached the mode: higher than every PyMC start, and flat there
    assert neg_logp(mode)[0] < min(neg_logp(x)[0] for x in pymc_starts)
    assert np.abs(neg_logp(mode)[1]).max() < 1e-2 * min(np.abs(neg_logp(x)[1]).max() for x in pymc_starts)
    started = start_at_mode(compiled, seed=5)
    a, b = started.initial_point_func(1), started.initial_point_func(2)
    assert np.array_equal(a, started.initial_point_func(1)) and not np.array_equal(a, b)  # one start per chain seed
    assert np.abs(a - mode).max() <= INIT_JITTER and np.abs(b - mode).max() <= INIT_JITTER
    idata = nutpie.sample(started, draws=50, tune=50, chains=2, cores=1, seed=0, progress_bar=False)
    assert int(idata.sample_stats["diverging"].sum()) == 0 and np.isfinite(idata.sample_stats["logp"]).all()
    # one seed, one answer, whatever the cores the chains run on (bayes_energy.threads)
    runs = []
    for n in ("1", "2"):
        monkeypatch.setenv("BAYES_ENERGY_THREADS", n)
        runs.append(run_nutpie(compiled, draws=30, tune=30, chains=2, seed=4).posterior)
    xr.testing.assert_equal(*runs)  # values and coordinates (the attributes hold the time)


def test_laplace_whitening_moves_the_sampler_not_the_posterior(tiny_compiled):
    from bayes_energy.models.laplace import (
        EIGEN_FLOOR,
        hessian,
        precondition,
        whitening,
    )
    from bayes_energy.models.sample import _logp_and_gradient, find_mode, run_nutpie

    compiled = tiny_compiled
    neg_logp = _logp_and_gradient(compiled)
    mode = find_mode(compiled, seed=5)
    H = hessian(neg_logp, mode)
    W = whitening(H)
    # near the mode the whitened posterior is a standard normal: W' H W = I (where H is above the floor)
    assert np.linalg.eigvalsh(H).min() > EIGEN_FLOOR
    np.testing.assert_allclose(W.T @ H @ W, np.eye(len(mode)), atol=1e-6)
    # the wrapped C function is the model's log density at x = mode + W z, its gradient W' grad_x
    whitened = precondition(compiled, mode, W)
    neg_z = _logp_and_gradient(whitened)
    rng = np.random.default_rng(0)
    for z in rng.normal(size=(3, len(mode))):
        value, grad = neg_logp(mode + W @ z)
        np.testing.assert_allclose(neg_z(z)[0], value, rtol=1e-12)
        np.testing.assert_allclose(neg_z(z)[1], W.T @ grad, rtol=1e-9, atol=1e-9)
    # the chains start near the mode: z ~ N(0, 0.3^2), one start per chain seed
    assert np.array_equal(whitened.initial_point_func(1), whitened.initial_point_func(1))
    assert not np.array_equal(whitened.initial_point_func(1), whitened.initial_point_func(2))
    # the same posterior, drawn either way (means within a few Monte Carlo errors), on the model's own variables
    plain = run_nutpie(compiled, draws=500, tune=300, chains=2, seed=3, laplace=False).posterior
    lap = run_nutpie(compiled, draws=500, tune=300, chains=2, seed=3, laplace=True).posterior
    assert set(lap.data_vars) == set(plain.data_vars)
    for v in plain.data_vars:
        a, b = (p[v].stack(s=("chain", "draw")).values.reshape(-1, 1000) for p in (plain, lap))
        sd = a.std(axis=1)
        assert np.all(np.abs(a.mean(axis=1) - b.mean(axis=1)) <= 0.35 * sd + 1e-12), v
    # a Hessian that is not finite gives no whitening (the fit then samples the plain coordinates)
    assert whitening(np.full((2, 2), np.nan)) is None
    # a flat or concave direction gets at most the floor's scale
    assert np.abs(whitening(np.diag([4.0, -1.0]))).max() == pytest.approx(EIGEN_FLOOR ** -0.5)
