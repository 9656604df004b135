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
    if type(err).__name__ == "CellTimeoutError":  # nbclient's: the cell ran past `cell_timeout` (or hung)
        what = f"a cell ran past the cell timeout of {cell_timeout(job)} s, or its kernel stopped answering"
    first = (getattr(err, "source", "") or "").strip().splitlines()[:1]
    where = f"cell {cell}" + (f" `{first[0][:60]}`" if first else "")
    msg = f"notebook {job.source.name} failed at {where} ({what}); executed copy: {paths.relative(executed)}"
    # a check refused a value the user gave (config, notebook parameter, task data), or an expected failure (a locked,
    # stale or foreign run folder, a missing model): the user's input or environment, exit 2 as on the command line
    ename = getattr(err, "ename", "")
    rejected = ename in expected_errors() or (
        ename.endswith("Error") and "is invalid; allowed" in str(getattr(err, "evalue", "")))
    return NotebookFailed(job.source.name, cell, msg, rejected_input=rejected)


def expected_errors() -> set:
    """Class names of the expected failures (`errors.UserError` and its subclasses): raised in a notebook's kernel,
    they reach the runner by name only."""
    from .. import errors, folders  # noqa: F401  (folders: FolderNotOursError is a UserError)
    from ..lab import parameters  # noqa: F401  (ParameterError)

    found, todo = set(), [errors.UserError]
    while todo:
        cls = todo.pop()
        found.add(cls.__name__)
        todo += cls.__subclasses__()
    return found


def _importable() -> None:
    """Let the kernels import gpolib from this checkout even when it is not installed."""
    here = str(paths.repo_root())
    parts = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if here not in parts:
        os.environ["PYTHONPATH"] = os.pathsep.join([here, *parts])


SOCKET_PATH_MAX = 107
"""the longest path of a Unix socket (sun_path, 108 bytes with its NUL on Linux; 104 on macOS, where the kernel's
names are shorter than the margin below)"""


def socket_folder(tmp: str) -> str:
    """Where the kernel's sockets go: the temp folder, or /tmp when a long TMPDIR would put their paths past the OS
    limit (the kernel would fail to bind with a traceback); a UserError when neither fits."""
    from ..errors import UserError

    longest = len("/gpolib-kernel-") + 12 + len("-99")  # the socket names jupyter_client appends a port to
    for folder in (tmp, "/tmp"):
        if len(folder) + longest <= SOCKET_PATH_MAX - 4 and os.access(folder, os.W_OK):
            return folder
    raise UserError(f"the temporary folder {tmp} is too long for the notebook kernel's sockets "
                    f"(at most {SOCKET_PATH_MAX - 4 - longest} characters) and /tmp is not writable: set TMPDIR "
                    "to a shorter folder")


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
            return os.path.join(socket_folder(tempfile.gettempdir()), f"gpolib-kernel-{uuid.uuid4().hex[:12]}")

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


CELL_TIMEOUT_S = {"smoke": 900, "full": 4 * 3600, "gpu": 4 * 3600}
"""per profile, the longest one cell may run before papermill stops the notebook (`execution_timeout`): a full
cell trains a notebook's runs from nothing in one go (the longest measured, notebook 09's, 34 min with two jobs)"""
QUIET_CELL_TIMEOUT_S = 120
"""the same for a notebook that trains nothing (`Job.trains` false, e.g. 90's explorer): its cells take seconds,
so a kernel that stops answering (a lost message after a widget cell) is stopped after minutes, not hours"""


def cell_timeout(job) -> int:
    """`execution_timeout` of one notebook: its profile's, or the quiet one for a notebook that trains nothing."""
    profile = job.params.get("PROFILE", "full")
    return CELL_TIMEOUT_S.get(profile, CELL_TIMEOUT_S["full"]) if getattr(job, "trains", True) else QUIET_CELL_TIMEOUT_S


def failed_copy(executed: Path) -> Path:
    """Where a notebook that failed leaves its executed cells: beside the committed copy, never over it."""
    return executed.with_name(f"{executed.stem}.failed{executed.suffix}")


def execute(job, executed: Path, html: Path) -> None:
    """Run one notebook with papermill, stamp gpolib metadata, export HTML (`html_export`: maths offline).

    papermill writes its output after every cell, so it writes to a temporary beside `executed`; the executed copy
    and the HTML are replaced (each atomically, `folders.write_text`) only once the notebook finished. A notebook
    that fails or is interrupted leaves both as they were, its partial copy at `failed_copy(executed)`.
    """
    import nbformat
    import papermill as pm

    from ..folders import temporary_beside, write_text

    _importable()
    executed.parent.mkdir(parents=True, exist_ok=True)
    html.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_beside(executed)
    try:
        pm.execute_notebook(str(job.source), str(tmp), parameters=job.params,
                            kernel_name="python3", cwd=str(job.source.parent), execution_timeout=cell_timeout(job),
                            log_output=False, progress_bar=False, kernel_manager_class=_ipc_kernel_manager())
    except BaseException as err:  # PapermillExecutionError, a cell timeout, the kernel died, Ctrl-C
        if tmp.exists():
            os.replace(tmp, failed_copy(executed))
        if isinstance(err, Exception):
            raise _failure(job, err, failed_copy(executed)) from err
        raise
    try:
        nb = nbformat.read(str(tmp), as_version=4)
        for key in ("input_path", "output_path"):  # papermill records them absolute: no machine path is committed
            if key in nb.metadata.get("papermill", {}):
                nb.metadata["papermill"][key] = paths.relative(nb.metadata["papermill"][key])
        nb.metadata["papermill"]["output_path"] = paths.relative(executed)  # where it lands, not the temporary
        nb.metadata["gpolib"] = {"params_hash": job.params_hash, "parameters": job.params}  # no time: see `stable`
        text = nbformat.writes(stable(nb))
        write_text(executed, text if text.endswith("\n") else text + "\n")
        # read back: the file's key order (nbformat writes sorted keys), not the run's, orders the HTML's widgets
        export(executed, html)
    finally:
        tmp.unlink(missing_ok=True)
    failed_copy(executed).unlink(missing_ok=True)
