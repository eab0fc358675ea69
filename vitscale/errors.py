"""The errors every layer may raise, in a module that imports nothing of the project.

Errors of the lower layers that are the user's to fix (a config problem, an unknown W&B
project) subclass :class:`UserError`, which the command line prints as it is, one line per
problem, with exit code 2 and no traceback; :func:`user_errors` turns the others (a
library's ``ValueError``) into one where a command knows they are the user's.
"""

from __future__ import annotations

import contextlib
import errno
from collections.abc import Iterator


class UserError(Exception):
    """A problem with the user's input: printed as one message, no traceback, exit 2."""


@contextlib.contextmanager
def user_errors(*types: type[Exception]) -> Iterator[None]:
    """Any of ``types`` raised inside becomes a :class:`UserError` with the same message
    (the command line's translation of a library's errors that the user can fix)."""
    try:
        yield
    except types as e:
        raise UserError(str(e)) from None


class DiskFullError(RuntimeError):
    """A write failed because the disk (or the user's quota) is full. The message names
    the file and says what was kept and how to go on."""


DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


def is_disk_full(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS


def disk_full_message(error: OSError, *, what: str | None = None, kept: str) -> str:
    """``disk full: cannot write WHAT (No space left on device); KEPT``."""
    what = what or (str(error.filename) if error.filename else "a file of the run")
    return f"disk full: cannot write {what} ({error.strerror or error}); {kept}"


LISTED = 20  # problems named one by one in an error before "... and N more"


def listing(problems: list[str], *, total: int | None = None) -> str:
    """The first :data:`LISTED` of ``problems`` (``total`` of them in all, default all of
    them), one per indented line, then how many more: every bad file of a set named at
    once (fixing them one failed run at a time is the alternative), in a bounded message."""
    total = len(problems) if total is None else total
    lines = [f"  {p}" for p in problems[:LISTED]]
    if total > len(lines):
        lines.append(f"  ... and {total - len(lines)} more")
    return "\n".join(lines)
