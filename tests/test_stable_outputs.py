"""An unchanged rerun rewrites no byte (gpolib/workbook/execution.py `stable`, gpolib/lab/plots.py `save`).

Notebook 02 (the cheapest that draws figures and scores a claim) is executed twice in the smoke profile on
the same finished runs, after a first execution that trains them where they are missing: a computed run and
a reused one are different events (the notebook's run table says which, and statistics of in-memory
responses differ from those of the saved ones in the last float digits), so that pair is not compared. Every output of the second execution,
the executed copy, its HTML, the figures, the claim record, the scoreboard and the report page, must have
the bytes of the first. Writes under reports/smoke/ (git-ignored, as `make smoke` and nbval do).
"""
import uuid
from pathlib import Path

import nbformat

from gpolib import paths
from gpolib.workbook import execution, workbook

NOTEBOOK = "02"


def _outputs() -> dict[str, bytes]:
    """{path under reports/smoke: bytes} of everything a reproduce writes there, the runs excepted."""
    top = paths.reports_dir("smoke")
    runs = paths.runs_dir("smoke")
    return {str(f.relative_to(top)): f.read_bytes() for f in sorted(top.rglob("*"))
            if f.is_file() and runs not in f.parents}


def test_rerun_of_an_unchanged_notebook_writes_the_same_bytes():
    workbook.reproduce("smoke", only=[NOTEBOOK], build_report=False)  # the runs exist before either execution
    assert workbook.reproduce("smoke", only=[NOTEBOOK]) == ["02_ratio_decay"]
    first = _outputs()
    executed = paths.executed_dir("smoke") / "02_ratio_decay.ipynb"
    written = executed.stat().st_mtime_ns
    assert workbook.reproduce("smoke", only=[NOTEBOOK]) == ["02_ratio_decay"]
    assert executed.stat().st_mtime_ns > written  # executed again, not skipped
    second = _outputs()
    kinds = {Path(name).suffix for name in first}
    assert {".ipynb", ".html", ".png", ".json", ".md"} <= kinds, sorted(first)
    assert sorted(first) == sorted(second)
    changed = [name for name in first if first[name] != second[name]]
    assert changed == [], f"a rerun with the same runs changed {changed}"


def test_stable_drops_timings_fixes_the_parameters_id_and_merges_streams():
    nb = nbformat.v4.new_notebook(metadata={"papermill": {"start_time": "t0", "end_time": "t1", "duration": 2.0,
                                                          "parameters": {"STEPS": 2}}})
    params = nbformat.v4.new_code_cell("STEPS = 2", metadata={"tags": ["injected-parameters"]})
    cell = nbformat.v4.new_code_cell("print(1); print(2)", metadata={
        "execution": {"iopub.status.busy": "t"}, "papermill": {"duration": 1.0, "status": "completed"}})
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="1\n"),
                    nbformat.v4.new_output("stream", name="stdout", text="2\n"),
                    nbformat.v4.new_output("stream", name="stderr", text="w\n"),
                    nbformat.v4.new_output("stream", name="stdout", text="3\n")]
    nb.cells = [params, cell]
    out = execution.stable(nb)
    assert out.metadata["papermill"] == {"parameters": {"STEPS": 2}}
    assert out.cells[0]["id"] == "injected-parameters"
    assert out.cells[1].metadata == {"papermill": {"status": "completed"}}
    assert [(o["name"], o["text"]) for o in out.cells[1].outputs] == [("stdout", "1\n2\n"), ("stderr", "w\n"),
                                                                      ("stdout", "3\n")]
    nbformat.validate(out)


def _widget_notebook(box: str, slider: str, layout: str):
    """A displayed VBox holding a slider whose layout is a third model, under the given model ids."""
    state = {box: {"model_name": "VBoxModel", "state": {"children": [f"IPY_MODEL_{slider}"]}},
             slider: {"model_name": "FloatSliderModel", "state": {"layout": f"IPY_MODEL_{layout}", "value": 0.2}},
             layout: {"model_name": "LayoutModel", "state": {}}}
    cell = nbformat.v4.new_code_cell("display(box)", id="show-box")  # a source cell id: fixed
    cell.outputs = [nbformat.v4.new_output("display_data", data={
        execution.WIDGET_VIEW: {"model_id": box, "version_major": 2, "version_minor": 0}, "text/plain": "VBox()"})]
    nb = nbformat.v4.new_notebook(cells=[cell])
    nb.metadata["widgets"] = {execution.WIDGET_STATE: {"state": state, "version_major": 2, "version_minor": 0}}
    return nb


def test_widget_model_ids_are_numbered_by_where_they_are_reached():
    runs = [[uuid.uuid4().hex for _ in range(3)] for _ in range(2)]  # two executions: new random ids
    first, second = (execution.stable(_widget_notebook(*ids)) for ids in runs)
    assert nbformat.writes(first) == nbformat.writes(second)
    ids = [f"{i:032x}" for i in range(3)]  # the box (displayed), its child slider, the slider's layout
    assert first.cells[0].outputs[0]["data"][execution.WIDGET_VIEW]["model_id"] == ids[0]
    state = first.metadata["widgets"][execution.WIDGET_STATE]["state"]
    assert state[ids[0]]["state"]["children"] == [f"IPY_MODEL_{ids[1]}"]
    assert state[ids[1]]["state"]["layout"] == f"IPY_MODEL_{ids[2]}" and set(state) == set(ids)


def test_html_view_ids_are_numbered_by_first_appearance():
    from gpolib.workbook.execution import stable_html

    a, b = "3f2b8c1e-0d4a-4b6e-9a1c-5e7f9d2b4c6a", "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
    body = (f'<div id="{a}"></div><script>getElementById(\'{a}\')</script><div id="{b}"></div>'
            '<script>var lib = "11111111-2222-3333-4444-555555555555";</script>')
    assert stable_html(body) == ('<div id="view-0000"></div><script>getElementById(\'view-0000\')</script>'
                                 '<div id="view-0001"></div><script>var lib = "11111111-2222-3333-4444-555555555555";'
                                 '</script>')  # a uuid that is no element's id stays
    assert stable_html("no ids") == "no ids"


def _png_of(draw) -> bytes:
    """PNG bytes of a 10 x 3.5 in figure drawn by `draw(ax)` and written by `plots.save`."""
    import tempfile

    import matplotlib.pyplot as plt

    from gpolib.lab import plots

    fig, ax = plt.subplots(figsize=(10, 3.5))
    draw(ax)
    with tempfile.TemporaryDirectory() as d:
        out = plots.save(fig, "f", "smoke", root=d)
        data = out.read_bytes()
    plt.close(fig)
    return data


def test_save_draws_last_bit_differences_as_the_same_pixels(monkeypatch):
    """A fitted line whose slope differs by 1e-14 relative (what np.polyfit gives on another CPU) moves
    anti-aliased pixels of a dashed line when drawn as is (checked first: the test can fail); through
    `plots.save` it draws the same bytes, with a scatter, a band, bars and an image differing alike; a
    difference of 1% of the span still shows."""
    import numpy as np

    from gpolib.lab import plots

    rng = np.random.default_rng(0)
    pts, y, img = np.linspace(20.0, 180.0, 10), rng.normal(0.01, 0.003, 10), rng.normal(size=(5, 7))
    xs = np.linspace(20.0, 180.0, 50)

    def draw(eps):
        def on(ax):
            ax.plot(xs, 1.234e-4 * (1 + eps) * xs + 0.001, "--", color="0.25")
            ax.scatter(pts, y * (1 + eps))
            ax.fill_between(pts, y - 0.001 * (1 + eps), y + 0.001, alpha=0.3)
            ax.bar([60.0, 120.0], [0.005 * (1 + eps), 0.007], width=8)
            ax.imshow(img * (1 + eps), extent=(20, 60, 0, 0.01), aspect="auto")
        return on

    with monkeypatch.context() as m:
        m.setattr(plots, "steady", lambda fig: None)
        assert _png_of(draw(1e-14)) != _png_of(draw(0.0))
    base = _png_of(draw(0.0))
    assert _png_of(draw(1e-14)) == base
    assert _png_of(draw(1e-13)) == base
    assert _png_of(draw(1e-2)) != base


def test_steady_rounds_far_below_a_pixel_and_keeps_the_view():
    import matplotlib.pyplot as plt
    import numpy as np

    from gpolib.lab import plots

    fig, ax = plt.subplots()
    xs = np.array([0.1234567891234, 2.0, 7.77777777777])
    ax.plot(xs, xs ** 2)
    before = ax.get_xlim(), ax.get_ylim()
    plots.steady(fig)
    x, y = ax.lines[0].get_data()
    span_x, span_y = before[0][1] - before[0][0], before[1][1] - before[1][0]
    assert np.max(np.abs(x - xs)) <= 1e-7 * span_x and np.max(np.abs(y - xs ** 2)) <= 1e-7 * span_y
    assert x[0] != xs[0]  # rounded: 0.1234568 on the 1e-7 grid of a span of ~8
    assert np.allclose(ax.get_xlim(), before[0], rtol=0, atol=1e-6 * span_x)
    plt.close(fig)


def test_the_advantage_demo_is_sampled_once_and_read_back(tmp_path, monkeypatch):
    """ppo_vapo.run_advantage_demo: the first call samples (final policy of the run) and writes the run folder's
    advantage_demo.json; a later call with the same prompts and seed reads it, another seed samples again."""
    from gpolib.lab import ppo_vapo

    calls = []
    monkeypatch.setattr(ppo_vapo, "final_trainer", lambda cfg, run_dir: "trainer")
    monkeypatch.setattr(ppo_vapo, "advantage_demo",
                        lambda tr, n_prompts, seed: calls.append(seed) or {"responses": [{"A": [0.5, -1.25]}],
                                                                            "group": seed})
    first = ppo_vapo.run_advantage_demo(None, tmp_path, n_prompts=4, seed=0)
    again = ppo_vapo.run_advantage_demo(None, tmp_path, n_prompts=4, seed=0)
    assert first == again == {"responses": [{"A": [0.5, -1.25]}], "group": 0} and calls == [0]
    assert (tmp_path / ppo_vapo.DEMO_FILE).is_file()
    assert ppo_vapo.run_advantage_demo(None, tmp_path, n_prompts=4, seed=1)["group"] == 1 and calls == [0, 1]


def test_the_engine_mismatch_is_measured_once_and_read_back(tmp_path, monkeypatch):
    """gspo_moe.run_engine_mismatch: the first call measures (a fresh Trainer's bf16 engine) and writes the run
    folder's engine_mismatch.npz; a later call reads the same numbers and distributions without measuring."""
    import torch

    from gpolib.lab import gspo_moe

    calls = []
    measured = {"token_mismatch": 0.00103, "seq_mismatch": 0.000568, "seq_clipped": 0.515625,
                "token": torch.tensor([1e-3, 2.5e-4], dtype=torch.float64), "sequence": torch.tensor([5e-4], dtype=torch.float64)}
    monkeypatch.setattr("gpolib.train.Trainer", lambda cfg: calls.append(cfg) or "trainer")
    monkeypatch.setattr(gspo_moe, "engine_mismatch", lambda tr: dict(measured))
    first = gspo_moe.run_engine_mismatch("cfg", tmp_path / "run")
    again = gspo_moe.run_engine_mismatch("cfg", tmp_path / "run")
    assert calls == ["cfg"] and (tmp_path / "run" / gspo_moe.MISMATCH_FILE).is_file()
    for got in (first, again):
        assert got["token_mismatch"] == 0.00103 and got["seq_clipped"] == 0.515625
        assert torch.equal(got["token"], measured["token"]) and got["sequence"].tolist() == [5e-4]
