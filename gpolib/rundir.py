"""A run directory: config, lock, metrics log, checksummed atomic checkpoints, run cache.

Layout of out_dir:
  config.json        the TrainConfig and the fingerprints of its model and task files (gpolib.identity)
  metrics.jsonl      one JSON object per finished step
  summary.json       written last; its presence with `finished: true` means the run is reusable
  ckpt-<step>.pt     trainable weights, optimiser, scheduler, RNG, metrics (+ .sha256 sidecar)
  .lock              held by the process writing the run
"""
from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import warnings
from pathlib import Path

import torch

from . import folders, identity, jsonio, runlog
from .config import TrainConfig
from .errors import RunFolderError, RunLockedError, RunMismatchError  # noqa: F401  (raised here)

KEEP_CHECKPOINTS = 2


def _atomic_write(path: Path, data: bytes) -> None:
    """Write via a temporary beside `path` and rename; the temporary is removed if anything fails (disk full)."""
    folders.write_bytes(path, data)


def is_run_folder(path: Path) -> bool:
    """A folder gpolib made for a run before run folders carried the marker: its config.json has the layout
    `check_config` writes (fingerprint, data, config). Committed runs are recognised so, and never rewritten."""
    try:
        blob = jsonio.loads((path / "config.json").read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(blob, dict) and {"fingerprint", "config"} <= set(blob) and isinstance(blob["config"], dict)


def read_json(path: Path) -> dict:
    """A run folder's JSON file; one that does not parse names itself (`RunFolderError`)."""
    try:
        blob = jsonio.loads(path.read_text())
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError is a ValueError, and so is NaN / Infinity
        raise RunFolderError(f"{path} is corrupt ({err}); delete the run folder {path.parent} to recompute it, "
                             "or restore the file") from None
    if not isinstance(blob, dict):
        raise RunFolderError(f"{path} is corrupt (a JSON {type(blob).__name__}, not an object); delete the run "
                             f"folder {path.parent} to recompute it, or restore the file")
    return blob


class RunDir:
    """Owns one run directory for one config."""

    def __init__(self, out_dir, cfg: TrainConfig):
        self.path = Path(out_dir)
        self.given = str(out_dir)
        """the folder as given: '' (the current directory to Path) is refused by `check_config`"""
        self.cfg = cfg
        self.lock_path = self.path / ".lock"
        self._locked = False

    # -- config and cache ---------------------------------------------------
    def check_config(self) -> None:
        """Write config.json, or raise RunMismatchError if the directory holds a run of another config or data."""
        data = identity.check_data(self.cfg)  # a missing model or task path fails before the folder exists
        folders.claim(self.given, "run", legacy=is_run_folder)  # a folder gpolib did not make is refused untouched
        cfg_path = self.path / "config.json"
        if cfg_path.exists() and not self.computed_anything():  # a run that failed before its first step
            cfg_path.unlink()
        if cfg_path.exists():
            old = read_json(cfg_path)
            diff = TrainConfig.same_run(old.get("config", {}), self.cfg)
            if diff:
                raise RunMismatchError(f"{self.path} holds a run of a different config (fields differ: {diff}); "
                                       "use another out_dir or delete it")
            stale = identity.data_diff(old.get("data"), data)
            if stale == ["unknown"]:
                raise RunMismatchError(
                    f"{self.path} holds a run recorded without a fingerprint of its model and task files, so "
                    "whether it was computed on the current ones cannot be known; it is treated as stale: "
                    "delete it or use another out_dir")
            if stale:
                raise RunMismatchError(f"{self.path} holds a stale run: it was computed on other data "
                                       f"({', '.join(stale)} changed since); delete it or use another out_dir")
        else:
            blob = {"fingerprint": self.cfg.fingerprint(), "data": data, "config": self.cfg.to_dict()}
            _atomic_write(cfg_path, jsonio.dumps(blob, indent=1).encode())

    def computed_anything(self) -> bool:
        """Whether the folder holds a result of its config: a metrics row, a checkpoint or a summary."""
        metrics = self.path / "metrics.jsonl"
        return ((metrics.exists() and metrics.stat().st_size > 0) or bool(self.checkpoints())
                or (self.path / "summary.json").exists() or (self.path / "adapter").exists())

    def finished(self) -> bool:
        s = self.path / "summary.json"
        return s.exists() and read_json(s).get("finished", False)

    def incomplete(self, results: tuple = ("metrics.jsonl",)) -> str | None:
        """Why a finished run cannot be read back as it is (a result file missing, metrics rows != steps, a row
        that does not parse), None when it is complete and consistent. `results`: the files the run's reader
        needs (a train() run: its metrics; notebook 02's ratio run: its ratios.csv)."""
        missing = [name for name in results if not (self.path / name).is_file()]
        if missing:
            return f"{self.path / missing[0]} is missing"
        p = self.path / "metrics.jsonl"
        if "metrics.jsonl" not in results:
            return None
        try:
            rows = [jsonio.loads(line) for line in p.read_text().splitlines() if line.strip()]
        except (ValueError, UnicodeDecodeError) as err:  # a cut row, or NaN / Infinity (never written by jsonio)
            return f"{p} has a row that does not parse as strict JSON ({err})"
        if not all(isinstance(r, dict) for r in rows):
            return f"{p} has a row that is not a JSON object"
        steps = read_json(self.path / "summary.json").get("steps", self.cfg.steps)
        if len(rows) != steps or [r.get("step") for r in rows] != list(range(steps)):
            return f"{p} holds {len(rows)} rows for a run of {steps} steps"
        return None

    def reuse(self, results: tuple = ("metrics.jsonl",)) -> bool:
        """True for a finished run to read back (noted "reused" for the workbook runner). False for an unfinished
        one, and for a finished one the runner asked to recompute (`gpolib.runlog`): its summary, metrics and
        checkpoints are removed first, so the run starts again from step 0."""
        broken = self.incomplete(results) if self.finished() else None
        if broken:  # resume from the last good checkpoint (or step 0) instead of reading back lost rows
            warnings.warn(f"{self.path} says finished but {broken}: the summary is set aside and the run resumes "
                          "from its last good checkpoint")
            (self.path / "summary.json").unlink()
        if self.finished() and not runlog.recompute(self.path / "summary.json"):
            runlog.note("reused", self.path)
            return True
        if self.finished():
            for f in [self.path / "summary.json", self.path / "metrics.jsonl", *self.checkpoints()]:
                f.unlink(missing_ok=True)
                f.with_suffix(".sha256").unlink(missing_ok=True)
        runlog.note("start", self.path, f"0/{self.cfg.steps}")
        return False

    def save_adapter(self, model, sub: str = "") -> None:
        """`model.save_pretrained` into adapter/ (or its subfolder `sub`, e.g. "step-50" for an adapter kept
        before the end), naming the base model as configured (`cfg.model`).

        peft writes the resolved local path into adapter_config.json and the adapter's README, one pair per
        adapter (a second adapter, e.g. the value model's, in its own subfolder); a committed run must not carry
        this machine's absolute path, and the configured name loads from any checkout.
        """
        out = self.path / "adapter" / sub
        model.save_pretrained(str(out))
        for cfg_file in sorted(out.rglob("adapter_config.json")):
            meta = json.loads(cfg_file.read_text())
            local = meta.get("base_model_name_or_path")
            if local and local != self.cfg.model:
                meta["base_model_name_or_path"] = self.cfg.model
                _atomic_write(cfg_file, (jsonio.dumps(meta, indent=2, sort_keys=True) + "\n").encode())
                readme = cfg_file.parent / "README.md"
                if readme.exists():
                    readme.write_text(readme.read_text().replace(local, self.cfg.model))

    # -- lock ---------------------------------------------------------------
    def acquire(self) -> None:
        """Take the run's lock: an OS lock (`flock`) on .lock, held until `release` or the process ends.

        Taking over a killed run's lock needs no reading of PIDs (the OS dropped its lock); a lock file replaced
        while we waited (another process released and removed it) is detected by its inode and taken again.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(self.lock_path, os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 32).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise RunLockedError(f"{self.path} is being written by process {holder} (lock {self.lock_path}); "
                                     "wait for it to finish or stop it") from None
            try:
                same = os.fstat(fd).st_ino == os.stat(self.lock_path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the file we locked was removed by its last holder: lock the new one
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self._lock_fd, self._locked = fd, True

    def release(self) -> None:
        if self._locked:
            self.lock_path.unlink(missing_ok=True)  # removed while still held: a waiter sees a new inode
            os.close(self._lock_fd)
            self._locked = False

    # -- metrics ------------------------------------------------------------
    def append_metrics(self, row: dict) -> None:
        with open(self.path / "metrics.jsonl", "a") as f:
            f.write(jsonio.dumps(row) + "\n")
        runlog.note("step", self.path, f"{row.get('step', 0) + 1}/{self.cfg.steps}")

    def rewrite_metrics(self, rows: list) -> None:
        _atomic_write(self.path / "metrics.jsonl", jsonio.dumps_lines(rows).encode())

    def read_metrics(self) -> list:
        p = self.path / "metrics.jsonl"
        return [jsonio.loads(l) for l in p.read_text().splitlines() if l.strip()] if p.exists() else []

    def write_summary(self, summary: dict) -> None:
        _atomic_write(self.path / "summary.json", jsonio.dumps(summary, indent=1).encode())
        runlog.note("computed", self.path)

    # -- checkpoints ----------------------------------------------------------
    def save_checkpoint(self, step: int, state: dict) -> Path:
        """Atomically write ckpt-<step>.pt and its sha256; keep the last KEEP_CHECKPOINTS."""
        buf = io.BytesIO()
        torch.save(state, buf)
        data = buf.getvalue()
        path = self.path / f"ckpt-{step:06d}.pt"
        _atomic_write(path, data)
        _atomic_write(path.with_suffix(".sha256"), hashlib.sha256(data).hexdigest().encode())
        for old in self.checkpoints()[:-KEEP_CHECKPOINTS]:
            old.unlink(missing_ok=True)
            old.with_suffix(".sha256").unlink(missing_ok=True)
        return path

    def checkpoints(self) -> list:
        return sorted(self.path.glob("ckpt-*.pt"))

    def load_latest_checkpoint(self) -> dict | None:
        """The newest checkpoint whose checksum verifies; corrupted ones are skipped with a warning."""
        for path in reversed(self.checkpoints()):
            sha = path.with_suffix(".sha256")
            data = path.read_bytes()
            if not sha.exists() or sha.read_text().strip() != hashlib.sha256(data).hexdigest():
                warnings.warn(f"checkpoint {path.name} is corrupted or incomplete; using an earlier one")
                continue
            return torch.load(io.BytesIO(data), weights_only=False)
        return None


def cached_results(cfg, run_dir, files: tuple, problem, compute, summary: dict | None = None) -> Path:
    """A run folder of result files beside a summary (no metrics.jsonl): read back when it is finished for the same
    config and data and complete, else computed. Steps: 1. `RunDir.check_config` (a stale folder is refused);
    2. a finished folder for which `problem(path)` names something wrong is recomputed, with a warning; 3. a finished
    one holding `files` is reused (`RunDir.reuse`, which honours a recompute request); 4. else `compute(path)` writes
    `files` and the summary ({"fingerprint", "finished", "steps"} and `summary`) is written last. Returns the path."""
    run = RunDir(run_dir, cfg)
    run.check_config()
    wrong = problem(run.path) if run.finished() else None
    if wrong:
        warnings.warn(f"{run.path} says finished but {wrong}: it is recomputed")
        (run.path / "summary.json").unlink()
    if not run.reuse(results=files):
        compute(run.path)
        run.write_summary({"fingerprint": cfg.fingerprint(), "finished": True, "steps": cfg.steps, **(summary or {})})
    return run.path
