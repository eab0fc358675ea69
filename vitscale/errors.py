"""The errors every layer may raise, in a module that imports nothing of the project.

- :class:`UserError`: a problem with what the user gave (a config value, a grid file, a
  path, a command-line option). The command line prints its message as it is, one line
  per problem, and exits with code 2: no traceback. Errors of the lower layers that are
  the user's to fix (a config problem, a missing dataset, an unknown W&B project)
  subclass it, so the command line needs no translation table.
- :class:`DiskFullError`: a write failed because the disk (or a quota) is full; its
  message names the file and says what was kept and how to go on.
"""

from __future__ import annotations

import errno


class UserError(Exception):
    """A problem with the user's input: printed as one message, no traceback, exit 2."""


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
