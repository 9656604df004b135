"""Nothing committed under reports/ or notebooks/ (executed notebooks, HTML, run folders, adapter configs and
their READMEs) names a path of the machine that produced it."""
import re
import subprocess
from pathlib import Path

from gpolib.paths import repo_root

ABSOLUTE = re.compile(r"(?<![\w.:/])(/work/|/root/|/home/|/tmp/|/Users/|/private/var/|[A-Z]:\\\\Users\\\\)")
"""machine paths: a Linux/macOS home or work folder, a temp folder, a Windows profile (not URLs: '//' and 'x:/' excluded)"""
BINARY = (".png", ".jpg", ".safetensors", ".pt", ".bin", ".pdf")


def _committed(*folders: str) -> list:
    out = subprocess.run(["git", "ls-files", "-z", *folders], cwd=repo_root(), capture_output=True, check=True)
    return [repo_root() / p for p in out.stdout.decode().split("\0") if p]


def _hits(files) -> dict:
    found = {}
    for f in files:
        if f.suffix in BINARY or not f.exists():
            continue
        text = f.read_text(errors="replace")
        lines = [line.strip()[:120] for line in text.splitlines() if ABSOLUTE.search(line) or str(repo_root()) in line]
        if lines:
            found[str(f.relative_to(repo_root()))] = lines[:2]
    return found


def test_pattern_catches_machine_paths_not_urls():
    assert ABSOLUTE.search('"/work/main/.venv/lib/python3.11/site-packages/x.py:3: FutureWarning"')
    assert ABSOLUTE.search("base_model: /root/models/tiny")
    assert not ABSOLUTE.search("https://example.org/work/items and data/models/tiny-qwen3")


def test_no_absolute_paths_in_committed_reports_and_notebooks():
    files = _committed("reports", "notebooks")
    assert any(f.name == "adapter_config.json" for f in files)  # the adapters are among the files checked
    assert _hits(files) == {}


def test_adapters_anywhere_name_the_base_model_relatively():
    files = [f for f in _committed(".") if f.name in ("adapter_config.json", "README.md") and "adapter" in f.parts]
    assert _hits(files) == {}
