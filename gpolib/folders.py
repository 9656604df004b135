"""Folders the tools write into, and the files they write there: never a folder they did not make, never half a file.

Ownership. A command that writes into a user-given folder (`train --out`, `pretrain --out`) first *claims* it:
a folder that does not exist or is empty is made ours by writing the marker `.gpolib` (its kind, e.g. "run")
before anything else; a non-empty folder is written into only when it carries that marker, or when it is one
that gpolib made before the marker existed (`legacy`: e.g. a run folder whose config.json has gpolib's layout).
Anything else (a model folder, a user's own results, the current directory given as `--out ''`) is refused with
`FolderNotOursError`, naming the folder, and nothing in it is touched.

Atomic files. `write_bytes` / `write_text`: a temporary beside the file, flushed and fsynced, then renamed over
it; on any failure the temporary is removed and the old file is left as it was. A reader therefore sees the old
bytes or the new ones, never a prefix (a kill, a full disk).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

from .errors import UserError

MARKER = ".gpolib"
"""the file a folder made by gpolib carries (written first); its text is the folder's kind"""


class FolderNotOursError(UserError, ValueError):
    """A user-given output folder that gpolib did not make: refused, nothing in it touched."""


def _is_empty(path: Path) -> bool:
    return not any(path.iterdir())


def claim(path, kind: str, legacy: Optional[Callable[[Path], bool]] = None, what: str = "--out") -> Path:
    """Make `path` ours (new or empty: the marker is written first) or check that it is (marker, or `legacy`);
    else raise FolderNotOursError. Returns the folder as a Path."""
    if str(path).strip() == "":
        raise FolderNotOursError(f"{what} is empty, which would mean the current directory ({os.getcwd()}); "
                                 f"give a new folder for the {kind}")
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise FolderNotOursError(f"{what} {path} is a file, not a folder; give a new folder for the {kind}")
    if path.is_dir() and not _is_empty(path):
        if (path / MARKER).is_file() or (legacy is not None and legacy(path)):
            return path
        raise FolderNotOursError(f"{what} {path} is a folder gpolib did not make (not empty, no {MARKER} marker): "
                                 f"nothing in it was touched; give a new or empty folder for the {kind}")
    path.mkdir(parents=True, exist_ok=True)
    write_text(path / MARKER, kind + "\n")
    return path


def write_bytes(path, data: bytes) -> Path:
    """Write `data` to `path` atomically (temporary beside it, fsync, rename); the temporary is removed on failure."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        if err.filename is None:  # e.g. ENOSPC from fsync: say which file could not be written
            raise OSError(err.errno, err.strerror, str(path)) from None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def write_text(path, text: str, encoding: str = "utf-8") -> Path:
    """`write_bytes` of `text` encoded (UTF-8 by default)."""
    return write_bytes(path, text.encode(encoding))


def temporary_beside(path) -> Path:
    """A temporary name in `path`'s folder for a file another tool writes (papermill's output), renamed into
    place by `os.replace` only once it is complete."""
    path = Path(path)
    return path.with_name(f".{path.stem}.tmp{os.getpid()}{path.suffix}")
