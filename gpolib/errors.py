"""The failures a user can cause, and the one boundary that turns them into a message.

Expected failures (a bad value, bad task data, a locked or corrupt run folder, a model folder missing a
file, a filesystem that refuses: the path exists / is not a directory / is read-only / is full) end a
command with exit code 2 and one paragraph on stderr that names the path. Anything else is a bug and
keeps its traceback. `boundary` is used by `python -m gpolib` and by the workbook runner.
"""
from __future__ import annotations

import errno
import sys

EXIT_USER = 2
"""the exit code of every expected failure (argparse uses the same for bad arguments)"""


class UserError(Exception):
    """An expected failure whose message already names the path and what to do."""


class DataError(UserError, ValueError):
    """A task file that cannot be trained on: encoding, format, prompts or answers (file and line named)."""


class RunFolderError(UserError, ValueError):
    """A run folder whose files do not parse or do not agree with each other (file named)."""


class ModelFolderError(UserError, ValueError):
    """A local model folder without a file the loader needs, with a file it cannot read, or not a causal LM."""


class RunLockedError(UserError, RuntimeError):
    """Another live process holds the run folder's lock."""


class RunMismatchError(UserError, ValueError):
    """The folder holds a run of another config, or one computed on other model or task files."""


class MissingDependencyError(UserError, ImportError):
    """An optional part the configuration asks for is not on this machine (vLLM, a CUDA device)."""


class ConfigError(UserError, ValueError):
    """A configuration that is valid on its own but not for its model or data (e.g. more prompts than the file has)."""


_FS_REASONS = {errno.EEXIST: "it already exists (a file where a folder is needed, or the reverse)", errno.ENOTDIR: "a part of it is a file, not a directory",
               errno.EISDIR: "it is a directory, not a file", errno.EROFS: "the filesystem is read-only",
               errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is exhausted",
               errno.EACCES: "permission denied", errno.EPERM: "permission denied",
               errno.ENOENT: "it does not exist"}
"""errno -> the reason said to the user; other OSErrors are unexpected and keep their traceback"""


def message(err: BaseException) -> str | None:
    """The one-paragraph message of an expected failure, None for an unexpected one."""
    # `user_error` on the class: an expected failure of a module that imports nothing of gpolib (vllm_backend)
    if isinstance(err, UserError) or getattr(type(err), "user_error", False):
        return " ".join(str(err).split())
    if isinstance(err, OSError) and err.errno in _FS_REASONS:
        where = err.filename if err.filename is not None else "(no path given)"
        return f"cannot write or read {where}: {_FS_REASONS[err.errno]} ({err.strerror})"
    if isinstance(err, FileNotFoundError) and err.errno is None:  # raised by gpolib with its own message
        return " ".join(str(err).split())
    if isinstance(err, MemoryError):  # a budget too large for this machine: the user's to change, not a bug
        return ("out of memory" + (f" ({' '.join(str(err).split())})" if str(err) else "") + "; lower the batch "
                "(prompts_per_step, group_size, eval_prompts, micro_batch_rows) or max_new_tokens")
    if type(err).__name__ == "SafetensorError" and "No space left" in str(err):  # disk full inside safetensors
        return f"cannot write the weights: the disk is full ({' '.join(str(err).split())})"
    return None


def boundary(run, *args) -> int:
    """`run(*args)` -> its exit code; an expected failure -> its message on stderr and EXIT_USER."""
    try:
        return run(*args)
    except (Exception, KeyboardInterrupt) as err:
        text = message(err) if isinstance(err, Exception) else None
        if text is None:
            raise
        print(f"error: {text}", file=sys.stderr)
        return EXIT_USER
