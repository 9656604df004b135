"""Where the workbook writes its outputs, per profile.

full -> reports/, gpu -> reports/gpu/, smoke -> reports/smoke/ (gitignored), so that
smoke and nbval runs never overwrite the committed full results.
"""
from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "GPOLIB_CACHE_DIR"
"""where machine-local caches live (outside the repository): step-0 evaluations, the built C++ kernels"""
PROFILES = ("smoke", "full", "gpu")
_SUBDIR = {"full": "", "gpu": "gpu", "smoke": "smoke"}


def repo_root() -> Path:
    """The directory that holds the `gpolib` package (the repository root)."""
    return Path(__file__).resolve().parent.parent


def cache_root() -> Path:
    """$GPOLIB_CACHE_DIR, or ~/.cache/gpolib."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "gpolib")


def resolve(path: str | Path) -> Path:
    """A relative path that does not exist from the working directory is taken from the repository root
    (so notebooks in notebooks/ and scripts anywhere can say `data/models/tiny-qwen3`)."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    alt = repo_root() / p
    return alt if alt.exists() else p


def relative(path: str | Path) -> str:
    """`path` relative to the repository root when it lies inside it (as committed files name it), else as given."""
    p = Path(path)
    try:
        return p.resolve().relative_to(repo_root()).as_posix()
    except ValueError:
        return str(path)


def reports_dir(profile: str = "full", root: Path | str | None = None) -> Path:
    """`reports/` for full, `reports/<profile>/` for the others."""
    if profile not in _SUBDIR:
        raise ValueError(f"unknown profile {profile!r}; expected one of {', '.join(PROFILES)}")
    base = Path(root) if root is not None else repo_root()
    return base / "reports" / _SUBDIR[profile] if _SUBDIR[profile] else base / "reports"


def runs_dir(profile: str = "full", root: Path | str | None = None) -> Path:
    """Training runs: `<reports>/runs/<notebook>/<run>/`."""
    return reports_dir(profile, root) / "runs"


def figures_dir(profile: str = "full", root: Path | str | None = None) -> Path:
    """Saved PNG figures."""
    return reports_dir(profile, root) / "figures"


def claims_dir(profile: str = "full", root: Path | str | None = None) -> Path:
    """One `<claim id>.json` record per claim, written by the notebooks' final cells."""
    return reports_dir(profile, root) / "claims"


def executed_dir(profile: str = "full", root: Path | str | None = None) -> Path:
    """Executed copies of the notebooks."""
    return reports_dir(profile, root) / "executed"


def html_dir(profile: str = "full", root: Path | str | None = None) -> Path:
    """HTML renderings of the executed notebooks."""
    return reports_dir(profile, root) / "html"
