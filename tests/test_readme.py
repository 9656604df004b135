"""The generated blocks of README.md and docs/ (gpolib/workbook/readme.py): the phenomena table and the scoreboard
from claims.json, the layout of every gpolib module, the RL step and the notebook times."""
import pytest

from gpolib import paths
from gpolib.workbook import readme

ROOT = paths.repo_root()


def block(text: str, name: str) -> str:
    return text.split(f"<!-- {name} -->\n", 1)[1].split(f"\n<!-- /{name} -->", 1)[0]


def test_generated_blocks_are_current():
    """Fails when a module is added, moved, removed or re-described, a time is recorded or a verdict changes
    without `python -m gpolib.workbook.readme --write`."""
    for name, blocks in readme.BLOCKS.items():
        text = (ROOT / name).read_text(encoding="utf-8")
        for b, make in blocks.items():
            assert block(text, b) == make(ROOT), f"{name}'s {b}: python -m gpolib.workbook.readme --write"
    assert set(readme.BLOCKS) == {"README.md", "docs/api.md", "docs/claims.md", "docs/layout.md", "docs/performance.md"}
    assert readme.main([]) == 0


def test_the_axes_table_names_every_preset_once():
    """docs/api.md's axes table: one row per preset of the library plus RLOO, named as the docs name them."""
    from gpolib import presets
    rows = [line.split(" | ")[0][2:] for line in readme.axes_block(ROOT).splitlines()[2:]]
    assert rows == [readme.OBJECTIVE_NAMES[p] for p in presets.PRESETS] + ["RLOO"]
    assert "| SAPO | token | all G = 8 | sigmoid gate of the token ratio, tau 1/1.05 |" in readme.axes_block(ROOT)


def test_a_stale_block_is_named_and_rewritten(tmp_path, capsys):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "layout.md").write_text("# Layout\n<!-- layout -->\nold\n<!-- /layout -->\n")
    (tmp_path / "gpolib").mkdir()
    (tmp_path / "gpolib" / "a.py").write_text('"""A module."""\n')
    assert list(readme.render(tmp_path)) == ["docs/layout.md"]  # files the tree does not hold are left out
    assert readme.write(tmp_path) == ["docs/layout.md"] and readme.write(tmp_path) == []
    assert "| `gpolib/a.py` | A module. |" in (tmp_path / "docs" / "layout.md").read_text()


def test_layout_lists_every_module_once():
    listed = [path for path, _ in readme.module_rows(ROOT)]
    on_disk = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "gpolib").rglob("*.py")
                     if "__pycache__" not in p.parts)
    assert listed == on_disk and len(set(listed)) == len(listed)
    assert "gpolib/workbook/readme.py" in listed and "gpolib/lab/report.py" in listed


def test_a_new_module_makes_the_readme_stale(tmp_path):
    """The layout is a pure function of the tree: a module added under gpolib/ adds its row."""
    (tmp_path / "gpolib" / "sub").mkdir(parents=True)
    (tmp_path / "gpolib" / "a.py").write_text('"""First line\nwrapped here. Second sentence."""\n')
    (tmp_path / "gpolib" / "sub" / "b.py").write_text('"""Pipe | inside: kept as text.\n\nMore."""\n')
    (tmp_path / "gpolib" / "c.py").write_text("x = 1\n")
    assert readme.layout_block(tmp_path).split("\n")[2:] == [
        "| `gpolib/a.py` | First line wrapped here. Second sentence. |",
        "| `gpolib/c.py` |  |",
        "| `gpolib/sub/b.py` | Pipe \\| inside: kept as text. |",
    ]


def test_times_table_and_its_sum():
    times = {"01": {"minutes": 11.6, "peak_gflops": 164, "jobs": 2, "source": "earlier measurement"},
             "00": {"minutes": 10.4, "peak_gflops": 151.4, "jobs": 1, "source": "benchmarks/notebook_time.py"}}
    assert readme.times_block(times).split("\n")[2:] == [
        "| 00 | 10.4 | 1 | 151 | benchmarks/notebook_time.py |",
        "| 01 | 11.6 | 2 | 164 | earlier measurement |",
        "| sum | 22.0 (0.4 h) | | | |",
    ]
    whole = {**times, "all": {"minutes": 231.0, "peak_gflops": 114, "jobs": 2, "source": "benchmarks/notebook_time.py"}}
    assert readme.times_block(whole).split("\n")[-2:] == [  # the one run is not added to the sum
        "| sum | 22.0 (0.4 h) | | | |", "| all, in one run | 231.0 (3.9 h) | 2 | 114 | benchmarks/notebook_time.py |"]


def test_record_time_sets_one_row(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    readme.record_time(tmp_path, "03", minutes=21.94, peak_gflops=189.4, jobs=2, source="earlier measurement")
    readme.record_time(tmp_path, "01", minutes=11.6, peak_gflops=164, jobs=2, source="x")
    readme.record_time(tmp_path, "03", minutes=20.0, peak_gflops=190, jobs=1, source="y")
    assert readme.jsonio.read(tmp_path / readme.TIMES) == {
        "01": {"minutes": 11.6, "peak_gflops": 164, "jobs": 2, "source": "x"},
        "03": {"minutes": 20.0, "peak_gflops": 190, "jobs": 1, "source": "y"}}


def test_a_missing_marker_is_refused_by_name():
    with pytest.raises(ValueError, match="'layout'"):
        readme.replace_block("no markers here", "layout", "x")
    assert readme.replace_block("a<!-- t -->\nold\n<!-- /t -->b", "t", "new") == "a<!-- t -->\nnew\n<!-- /t -->b"
