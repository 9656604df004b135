"""Committed notebooks carry no results (gpolib/workbook/notebooks.py): only checked cells keep outputs."""
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from gpolib.workbook import notebooks as nbs

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _stream(text):
    return new_output("stream", name="stdout", text=text)


def _executed():
    nb = new_notebook(cells=[
        new_markdown_cell("# title"),
        new_code_cell('PROFILE = "smoke"', metadata={"tags": ["parameters"]}),
        new_code_cell('PROFILE = "full"', metadata={"tags": ["injected-parameters"]}),
        new_code_cell("# NBVAL_CHECK_OUTPUT\nprint(0.99 ** 200)", outputs=[_stream("0.134\n")], execution_count=3),
        new_code_cell("print(verdict)", outputs=[_stream("G1 [smoke]: smoke: no verdict\n")], execution_count=4),
    ])
    nb.metadata["papermill"] = {"parameters": {"PROFILE": "full"}}
    return nb


def test_clean_keeps_only_checked_outputs():
    nb = nbs.clean(_executed())
    assert [c.source.splitlines()[0] for c in nb.cells] == ["# title", 'PROFILE = "smoke"', "# NBVAL_CHECK_OUTPUT",
                                                             "print(verdict)"]
    # a checked cell keeps an execution count (nbval calls a cell without one unrun and refuses its outputs)
    assert nb.cells[2].outputs[0]["text"] == "0.134\n" and nb.cells[2].execution_count == 1
    assert nb.cells[3].outputs == [] and nb.cells[3].execution_count is None and "papermill" not in nb.metadata
    assert nbs.problems(nb) == []


def test_problems_name_results_and_missing_checked_outputs():
    found = nbs.problems(_executed())
    assert any("injected-parameters" in m for m in found)
    assert any("cell 4: output of a cell that is not checked" in m for m in found)
    assert any("metadata: papermill" in m for m in found)
    empty = nbs.clean(_executed())
    empty.cells[2].outputs = []
    assert nbs.problems(empty) == ["cell 2: checked cell without stored output (nbval would fail)"]


def test_clean_refreshes_checked_outputs_from_an_executed_copy():
    source, ref = nbs.clean(_executed()), _executed()
    ref.cells[3].outputs = [_stream("0.1340\n")]
    assert nbs.clean(source, ref).cells[2].outputs[0]["text"] == "0.1340\n"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_committed_notebooks_hold_no_results(path):
    """No smoke verdict (nor any other result) is committed as if it were one; `python -m gpolib.workbook.notebooks
    clean notebooks/*.ipynb` fixes a notebook that fails here."""
    assert nbs.problems(nbformat.read(str(path), as_version=4)) == []
