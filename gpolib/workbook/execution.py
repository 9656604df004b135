"""Execute one notebook of the workbook: papermill in a local-IPC kernel, repository-relative metadata, HTML.

The executed copy and its HTML are byte-stable: a rerun with the same results writes the same bytes
(`stable`: no timestamps or durations, a fixed id for papermill's parameters cell, stream outputs merged,
since how a kernel splits one print into messages depends on timing, widget model ids numbered in order).

Split from `workbook` (discovery, validation, the order of notebooks, the report): this is the part that
starts a kernel. `NotebookFailed` says which notebook and cell failed, and whether a config check refused
a parameter value (the user's input: exit code 2).
"""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

from .. import paths
from .html_export import export, stable_html  # noqa: F401  (stable_html: the byte-stable export, tested here)


class NotebookFailed(RuntimeError):
    """A notebook raised while executing; the run stopped there."""

    def __init__(self, notebook: str, cell_index: int, message: str, rejected_input: bool = False):
        super().__init__(message)
        self.notebook = notebook
        self.cell_index = cell_index
        self.rejected_input = rejected_input
        """a config check refused a parameter value ("... is invalid; allowed: ..."): the user's input, exit 2"""


def _failure(job, err: Exception, executed: Path) -> NotebookFailed:
    cell = getattr(err, "cell_index", -1)
    what = f"{getattr(err, 'ename', type(err).__name__)}: {getattr(err, 'evalue', err)}"
    first = (getattr(err, "source", "") or "").strip().splitlines()[:1]
    where = f"cell {cell}" + (f" `{first[0][:60]}`" if first else "")
    msg = f"notebook {job.source.name} failed at {where} ({what}); executed copy: {paths.relative(executed)}"
    # a check refused a value the user gave (config, notebook parameter, task data): the user's input, exit 2
    rejected = getattr(err, "ename", "").endswith("Error") and "is invalid; allowed" in str(getattr(err, "evalue", ""))
    return NotebookFailed(job.source.name, cell, msg, rejected_input=rejected)


def _importable() -> None:
    """Let the kernels import gpolib from this checkout even when it is not installed."""
    here = str(paths.repo_root())
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if here not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([here, *parts])


def _ipc_kernel_manager():
    """A kernel manager whose kernel talks over local IPC sockets in a private temp folder: over TCP, ipykernel
    warns on every start that the traffic is unencrypted (true of TCP, and needless for a local kernel)."""
    import tempfile
    import uuid

    from jupyter_client.manager import AsyncKernelManager
    from traitlets import CaselessStrEnum, Unicode, default

    class IPCKernelManager(AsyncKernelManager):
        transport = CaselessStrEnum(["tcp", "ipc"], default_value="ipc", config=True)
        ip = Unicode(config=True)

        @default("ip")
        def _ip_default(self):
            return os.path.join(tempfile.gettempdir(), f"gpolib-kernel-{uuid.uuid4().hex[:12]}")

    return IPCKernelManager


VOLATILE = ("start_time", "end_time", "duration")
"""papermill's per-run timings (notebook and cell metadata): different on every run, so never written"""
PARAMETERS_ID = "injected-parameters"
"""id of papermill's parameters cell (nbformat would give it a random one); the source's cells keep theirs"""


WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
_WIDGET_REF = re.compile(r"IPY_MODEL_([0-9a-f]{32})")


def _widget_order(nb) -> list:
    """The widget model ids of `nb` in a run-independent order: depth first from each displayed widget (cell
    order), through the references in its state (sorted keys); models no display reaches, by their state."""
    state = nb.metadata.get("widgets", {}).get(WIDGET_STATE, {}).get("state", {})
    order = []

    def visit(model_id):
        if model_id in order:
            return
        order.append(model_id)
        for ref in _WIDGET_REF.findall(json.dumps(state.get(model_id, {}), sort_keys=True)):
            visit(ref)

    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if WIDGET_VIEW in out.get("data", {}):
                visit(out["data"][WIDGET_VIEW]["model_id"])
    return order + sorted(set(state) - set(order), key=lambda m: json.dumps(state[m], sort_keys=True))


def _renumbered_widgets(nb):
    """`nb` with each widget model's random id (a uuid4, new on every run) replaced by its rank in
    `_widget_order`, written as 32 hex digits, wherever it appears (views, the saved state, references)."""
    import nbformat

    new = {old: f"{i:032x}" for i, old in enumerate(_widget_order(nb))}
    if not new:
        return nb
    text = re.sub(r"[0-9a-f]{32}", lambda m: new.get(m.group(), m.group()), json.dumps(nb))
    return nbformat.from_dict(json.loads(text))


def _merged_streams(outputs: list) -> list:
    """Consecutive stream outputs of one name (stdout, stderr) merged into one."""
    merged = []
    for out in outputs:
        last = merged[-1] if merged else None
        if out.get("output_type") == "stream" and last is not None and last.get("output_type") == "stream" \
                and last.get("name") == out.get("name"):
            last["text"] += out["text"]
        else:
            merged.append(out)
    return merged


def stable(nb):
    """`nb` with what changes from run to run removed: timings, the parameters cell's random id, how
    stream output was split into messages, widget model ids. Outputs and execution counts are kept."""
    for key in VOLATILE:
        nb.metadata.get("papermill", {}).pop(key, None)
    for cell in nb.cells:
        cell.metadata.pop("execution", None)  # the kernel's iopub timestamps
        for key in VOLATILE:
            cell.metadata.get("papermill", {}).pop(key, None)
        if PARAMETERS_ID in cell.metadata.get("tags", []):
            cell["id"] = PARAMETERS_ID
        if cell.cell_type == "code":
            cell.outputs = _merged_streams(cell.outputs)
    return _renumbered_widgets(nb)


def execute(job, executed: Path, html: Path) -> None:
    """Run one notebook with papermill, stamp gpolib metadata, export HTML (`html_export`: maths offline)."""
    import nbformat
    import papermill as pm

    _importable()
    executed.parent.mkdir(parents=True, exist_ok=True)
    html.parent.mkdir(parents=True, exist_ok=True)
    try:
        pm.execute_notebook(str(job.source), str(executed), parameters=job.params,
                            kernel_name="python3", cwd=str(job.source.parent),
                            log_output=False, progress_bar=False, kernel_manager_class=_ipc_kernel_manager())
    except Exception as err:  # PapermillExecutionError, or the kernel died
        raise _failure(job, err, executed) from err
    nb = nbformat.read(str(executed), as_version=4)
    for key in ("input_path", "output_path"):  # papermill records them absolute: no machine path is committed
        if key in nb.metadata.get("papermill", {}):
            nb.metadata["papermill"][key] = paths.relative(nb.metadata["papermill"][key])
    nb.metadata["gpolib"] = {"params_hash": job.params_hash, "parameters": job.params}  # no time: see `stable`
    nbformat.write(stable(nb), str(executed))
    export(executed, html)  # read back: the file's key order (nbformat writes sorted keys) orders the widget state
