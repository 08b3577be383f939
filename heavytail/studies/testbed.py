"""The tail-sensitivity testbed of Section 4.1 / App. F: spliced Pareto pairs swept over budgets and seams.

For every budget N, seam quantile q0 and candidate index a* of the grid, each repetition draws two
independent sample sets of size N: one from the reference SplicedPareto(a_ref, a_ref, q0) (a plain
Pareto(lambda, a_ref)) and one from the candidate SplicedPareto(a_ref, a*, q0) (eq. 31), and records

- the energy distance (eq. 10, p = 1) by the exact 1D sort path ``metrics.energy_distance_1d``,
- the empirical 2-Wasserstein distance ``metrics.wasserstein2_1d``,
- the Hill gap |hill(x) - hill(y)| with the estimator of eq. 38 and k = max(2, round(N (1 - q0))) (App. F.1).

:func:`noise_unit_curves` then shifts and scales the per-point means as in eq. 32, and :func:`sweep_findings`
reads notebook 02's findings off those curves (where each statistic is smallest, how far it moves above a_ref).

Defaults are the paper's recipe (App. F.1): N in {256, ..., 65536} with 24/24/24/12/6 repetitions,
q0 in {0.5, 0.9, 0.99}, the nine-point a* grid, lambda = 1, a_ref = 1.5, seed 0. Samples are drawn and
compared in float64: at a* = 0.6 and N = 65536 the largest draws reach ~1e8 and the energy distance is a
small difference of huge means.

Results are a flat table (dict of equal-length numpy columns, one row per repetition) so it can be written
to CSV as is. Each (N, q0) cell draws from its own generator derived from ``seed`` and the cell's position,
and is cached atomically when ``cache_dir`` is given, so a killed sweep resumes where it stopped and gives
the same numbers as an uninterrupted one.
"""

from __future__ import annotations

import hashlib
import json
import os
import io
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

from heavytail.science.distributions import SplicedPareto
from heavytail.io import atomic_write_bytes, save_json

SWEEP_STATISTICS = ("energy", "w2", "hill_gap")
COLUMNS = ("budget", "seam", "a_star", "rep", *SWEEP_STATISTICS)


@dataclass(frozen=True)
class SweepConfig:
    """The sweep of App. F.1; the defaults are the paper's settings."""

    budgets: tuple[int, ...] = (256, 1024, 4096, 16384, 65536)
    repetitions: tuple[int, ...] = (24, 24, 24, 12, 6)
    seams: tuple[float, ...] = (0.5, 0.9, 0.99)
    a_grid: tuple[float, ...] = (0.6, 0.8, 1.0, 1.2, 1.5, 1.8, 2.2, 2.8, 3.5)
    a_ref: float = 1.5
    scale: float = 1.0
    seed: int = 0

    def __post_init__(self):
        for name in ("budgets", "repetitions", "seams", "a_grid"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        if not self.budgets:
            raise ValueError("budgets must list at least one sample size N")
        if len(self.repetitions) != len(self.budgets):
            raise ValueError(f"repetitions must give one count per budget: {len(self.budgets)} budgets "
                             f"{self.budgets} but {len(self.repetitions)} repetitions {self.repetitions}")
        for n in self.budgets:
            if int(n) != n or n < 4:
                raise ValueError(f"every budget N must be an integer >= 4 (the Hill estimator needs k+1 < N), got {n}")
        for r in self.repetitions:
            if int(r) != r or r < 2:
                raise ValueError(f"every repetition count must be an integer >= 2 (eq. 32 needs a standard deviation), got {r}")
        for q in self.seams:
            if not 0.0 < q < 1.0:
                raise ValueError(f"seam quantiles q0 must lie in (0, 1), got {q}")
        for a in (*self.a_grid, self.a_ref):
            if not (np.isfinite(a) and a > 0):
                raise ValueError(f"tail indices (a_grid, a_ref) must be finite and > 0, got {a}")
        if len(self.a_grid) < 2:
            raise ValueError(f"a_grid needs at least two candidate indices, got {self.a_grid}")
        if not self.scale > 0:
            raise ValueError(f"scale lambda must be > 0, got {self.scale}")
        for n, q in ((n, q) for n in self.budgets for q in self.seams):
            sweep_hill_k(n, q)  # raises, naming N and q0, when k = max(2, round(N (1 - q0))) leaves no threshold

    @classmethod
    def from_dict(cls, d: dict) -> "SweepConfig":
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown sweep settings {sorted(unknown)}; allowed: {sorted(cls.__dataclass_fields__)}")
        return cls(**d)

    def key(self) -> str:
        """A short hash of the settings, naming the cache folder so a changed sweep never reuses old cells."""
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:12]


def sweep_hill_k(n: int, q0: float) -> int:
    """k = max(2, round(N (1 - q0))) order statistics above the threshold, from the known seam (App. F.1)."""
    from heavytail.science.metrics import hill_k_from_seam

    return hill_k_from_seam(n, q0)


def _code_fingerprint() -> str:
    """Hash of the code a cell's numbers depend on, so edited sampling or metrics never reuse stale cells."""
    import heavytail.science.distributions as dist
    import heavytail.science.energy as energy
    import heavytail.science.metrics as met

    h = hashlib.sha256()
    for mod in (dist, energy, met):
        h.update(Path(mod.__file__).read_bytes())
    h.update(Path(__file__).read_bytes())
    return h.hexdigest()[:12]


def _cell_generator(seed: int, i_budget: int, i_seam: int) -> torch.Generator:
    # One independent stream per cell, so resuming a cell alone reproduces it exactly.
    state = np.random.SeedSequence([seed, i_budget, i_seam]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state) & ((1 << 63) - 1))


def sweep_cell(cfg: SweepConfig, i_budget: int, i_seam: int) -> dict[str, np.ndarray]:
    """All repetitions of one (N, q0) cell: statistics of shape (A, R) for A = len(a_grid), R repetitions."""
    from heavytail.science import metrics

    n, reps, q0 = cfg.budgets[i_budget], cfg.repetitions[i_budget], cfg.seams[i_seam]
    gen = _cell_generator(cfg.seed, i_budget, i_seam)
    a_star = torch.tensor(cfg.a_grid, dtype=torch.float64).reshape(-1, 1, 1)  # (A, 1, 1)
    shape = (len(cfg.a_grid), reps, n)
    reference = SplicedPareto(cfg.a_ref, cfg.a_ref, q0, cfg.scale).sample(shape, generator=gen, dtype=torch.float64)
    candidate = SplicedPareto(cfg.a_ref, a_star, q0, cfg.scale).sample(shape, generator=gen, dtype=torch.float64)
    k = sweep_hill_k(n, q0)
    out = {
        "energy": metrics.energy_distance_1d(reference, candidate),
        "w2": metrics.wasserstein2_1d(reference, candidate),
        "hill_gap": (metrics.hill_estimate(reference, k) - metrics.hill_estimate(candidate, k)).abs(),
    }
    return {name: v.detach().to(torch.float64).cpu().numpy().reshape(len(cfg.a_grid), reps) for name, v in out.items()}


def _save_cell(path: Path, cell: dict[str, np.ndarray]) -> None:
    """Atomic: a killed run leaves either no cell or a whole one."""
    buffer = io.BytesIO()
    np.savez(buffer, **cell)
    atomic_write_bytes(path, buffer.getvalue())


def run_sweep(cfg: SweepConfig = SweepConfig(), cache_dir: str | os.PathLike | None = None,
              progress: bool = True) -> dict[str, np.ndarray]:
    """Run (or resume) the sweep; returns the flat table ``{column: (rows,)}`` with columns ``COLUMNS``."""
    from tqdm import tqdm  # plain bars (tqdm.auto needs ipywidgets in a notebook)

    cells = [(i, j) for i in range(len(cfg.budgets)) for j in range(len(cfg.seams))]
    cache = Path(cache_dir) / f"sweep-{cfg.key()}-{_code_fingerprint()}" if cache_dir is not None else None
    if cache is not None:
        cache.mkdir(parents=True, exist_ok=True)
        save_json(asdict(cfg), cache / "config.json")
    # Work is proportional to A * R * N log N; weight the bar by sample count so its ETA means something.
    weights = [cfg.repetitions[i] * cfg.budgets[i] for i, _ in cells]
    rows: dict[str, list] = {c: [] for c in COLUMNS}
    with tqdm(total=sum(weights), desc="splice sweep", unit="draw", unit_scale=True, disable=not progress) as bar:
        for (i, j), w in zip(cells, weights):
            n, q0 = cfg.budgets[i], cfg.seams[j]
            bar.set_postfix_str(f"N={n} q0={q0}")
            path = cache / f"cell-N{n}-q{q0}.npz" if cache is not None else None
            if path is not None and path.exists():
                with np.load(path) as f:
                    cell = {s: f[s] for s in SWEEP_STATISTICS}
            else:
                cell = sweep_cell(cfg, i, j)
                if path is not None:
                    _save_cell(path, cell)
            a_count, reps = cell["energy"].shape
            for a_idx, a in enumerate(cfg.a_grid):
                rows["budget"] += [n] * reps
                rows["seam"] += [q0] * reps
                rows["a_star"] += [a] * reps
                rows["rep"] += list(range(reps))
                for s in SWEEP_STATISTICS:
                    rows[s] += list(cell[s][a_idx])
            bar.update(w)
    return {c: np.asarray(v) for c, v in rows.items()}


@dataclass(frozen=True)
class NoiseUnitCurve:
    """One panel line of Figure 1: statistic vs a* at fixed (N, q0) in the noise units of eq. 32."""

    statistic: str
    budget: int
    seam: float
    a_star: np.ndarray = field(repr=False)  # (A,)
    mean: np.ndarray = field(repr=False)  # (A,) mu_j
    std: np.ndarray = field(repr=False)  # (A,) s_j, between repetitions
    varsigma: float = float("nan")  # median of the finite s_j
    z: np.ndarray = field(repr=False, default=None)  # (A,) (mu_j - mu_j*) / varsigma

    @property
    def argmin_a(self) -> float:
        """The a* at which the mean statistic is smallest."""
        return float(self.a_star[int(np.nanargmin(self.mean))])


def noise_unit_curves(table: dict[str, np.ndarray], a_ref: float = 1.5) -> list[NoiseUnitCurve]:
    """Group the table by (statistic, N, q0) and apply eq. 32: z_j = (mu_j - mu_j*) / median{finite s_j},
    with j* = argmin_j |a_j - a_ref| and s_j the between-repetition standard deviation (ddof = 1)."""
    from heavytail.science import metrics

    curves = []
    budgets, seams = np.unique(table["budget"]), np.unique(table["seam"])
    for stat in SWEEP_STATISTICS:
        for n in budgets:
            for q in seams:
                sel = (table["budget"] == n) & (table["seam"] == q)
                a_vals = np.unique(table["a_star"][sel])
                groups = [table[stat][sel & (table["a_star"] == a)] for a in a_vals]
                stacked = np.stack(groups)  # (A, R): every a* of a cell has the same repetition count
                nu = metrics.noise_units(stacked, a_vals, a_ref=a_ref, ddof=1)
                curves.append(NoiseUnitCurve(stat, int(n), float(q), a_vals, nu.mean, nu.std, float(nu.varsigma), nu.z))
    return curves


def curves_table(curves: list[NoiseUnitCurve]) -> dict[str, np.ndarray]:
    """Flatten curves to CSV columns: statistic, budget, seam, a_star, mean, std, varsigma, z."""
    cols: dict[str, list] = {c: [] for c in ("statistic", "budget", "seam", "a_star", "mean", "std", "varsigma", "z")}
    for c in curves:
        for i, a in enumerate(c.a_star):
            for name, val in (("statistic", c.statistic), ("budget", c.budget), ("seam", c.seam), ("a_star", a),
                              ("mean", c.mean[i]), ("std", c.std[i]), ("varsigma", c.varsigma), ("z", c.z[i])):
                cols[name].append(val)
    return {k: np.asarray(v) for k, v in cols.items()}


# Two a* grid values closer than this are the same index (the grid is typed in by hand, a_ref too).
_A_TOL = 1e-12


@dataclass(frozen=True)
class SweepFindings:
    """What notebook 02 reports from the Figure 1 curves (Section 4.1): the a* minimising each statistic
    at the largest budget, and how far each statistic moves above a_ref, in the noise units of eq. 32."""

    n_small: int  # the smallest budget N
    n_large: int  # the largest budget N
    a_ref: float
    argmins: dict  # {q0: a*} where the mean energy distance is smallest at N = n_large, seams in cfg order
    hill_argmins: dict  # {q0: a*} the same for the Hill gap
    all_at_ref: bool  # the energy argmin is a_ref for every seam (the paper's finding)
    flat: dict  # {(statistic, N): max over seams and a* > a_ref of |z|}, N in (n_small, n_large)
    min_varsigma: float  # smallest noise unit varsigma over every curve

    @property
    def w2_flatter(self) -> bool:
        """The 2-Wasserstein curves move less than the energy distance above a_ref at the largest budget."""
        return self.flat["w2", self.n_large] < self.flat["energy", self.n_large]

    def to_json(self, sweep_seconds: float) -> dict:
        """The findings.json of notebook 02 (keys read by the report tests; seams become string keys)."""
        return {"energy_argmin_at_largest_budget": self.argmins, "energy_minimum_at_a_ref_for_every_seam": self.all_at_ref,
                "hill_gap_argmin_at_largest_budget": self.hill_argmins,
                "max_abs_noise_units_above_a_ref": {f"{s}@N={n}": v for (s, n), v in self.flat.items()},
                "smallest_varsigma": self.min_varsigma, "sweep_seconds": sweep_seconds}


def sweep_findings(curves: list[NoiseUnitCurve], cfg: SweepConfig) -> SweepFindings:
    """Summarise :func:`noise_unit_curves` output for the budgets, seams and a_ref of ``cfg``.

    ``flat`` is the largest |z| (eq. 32) over seams and over the a* of each curve above a_ref, for every
    statistic at the smallest and the largest budget. Raises when a (statistic, N, q0) curve is missing
    or no candidate index lies above a_ref.
    """
    index = {(c.statistic, c.budget, c.seam): c for c in curves}

    def curve(stat, n, q):
        try:
            return index[stat, n, q]
        except KeyError:
            raise ValueError(f"no {stat} curve at N = {n}, q0 = {q}; curves cover "
                             f"{sorted({(c.budget, c.seam) for c in curves})}") from None

    n_small, n_large = cfg.budgets[0], cfg.budgets[-1]
    if not any(a > cfg.a_ref for a in cfg.a_grid):
        raise ValueError(f"a_grid {cfg.a_grid} has no candidate index above a_ref = {cfg.a_ref}")
    argmins = {q: curve("energy", n_large, q).argmin_a for q in cfg.seams}
    hill_argmins = {q: curve("hill_gap", n_large, q).argmin_a for q in cfg.seams}
    flat = {}
    for stat in SWEEP_STATISTICS:
        for n in (n_small, n_large):
            flat[stat, n] = max(float(np.max(np.abs(cv.z[np.asarray(cv.a_star) > cfg.a_ref])))
                                for cv in (curve(stat, n, q) for q in cfg.seams))
    return SweepFindings(n_small=n_small, n_large=n_large, a_ref=cfg.a_ref, argmins=argmins, hill_argmins=hill_argmins,
                         all_at_ref=all(abs(a - cfg.a_ref) < _A_TOL for a in argmins.values()), flat=flat,
                         min_varsigma=min(c.varsigma for c in curves))
