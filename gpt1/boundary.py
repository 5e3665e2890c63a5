"""The CLI's one error boundary: every failure of a command ends in one line on stderr and an
exit code, and an unexpected one's traceback goes to a file in the user cache.

A Gpt1Error or ParamsError becomes one line and exit code 2 (an OS error of the environment,
such as a full disk or a denied file, too, naming the file), a stopped training run one line and
128 + signal, anything unexpected one "internal error" line naming the log file that holds its
traceback (exit 1). Outputs are written atomically, so nothing is half-written either way.
"""

from __future__ import annotations

import errno
import os
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gpt1.atomic import DiskFullError, cache_dirs
from gpt1.config import ParamsError
from gpt1.errors import Gpt1Error
from gpt1.interrupt import StoppedError

# OS errors that are the environment's, not a bug: said in one line naming the file.
_ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EACCES, errno.EPERM, errno.EROFS,
                       errno.ENOENT, errno.EIO}


def guarded(command: str, work: Callable[[], Any]) -> int:
    """Run `work`; every failure ends in one line on stderr and a non-zero exit code."""

    def say(line: str) -> None:
        print(f"gpt1 {command}: {' '.join(line.split())}", file=sys.stderr)

    try:
        work()
    except StoppedError as err:
        say(str(err))
        return err.exit_code
    except (Gpt1Error, ParamsError) as err:
        say(f"error: {err}")
        return 2
    except KeyboardInterrupt:
        say("interrupted; outputs are written atomically, re-run to start again")
        return 130
    except OSError as err:
        if err.errno in (errno.ENOSPC, errno.EDQUOT):  # not written through gpt1.atomic
            say(f"error: {DiskFullError(err.filename or Path.cwd(), 0)}")
            return 2
        if err.errno not in _ENVIRONMENT_ERRNOS or not err.filename:
            say(f"internal error: {type(err).__name__}: {err}; traceback in "
                f"{write_traceback(command)}")
            return 1
        say(f"error: {err.filename}: {err.strerror}")
        return 2
    except Exception as err:
        first = next(iter(str(err).strip().splitlines()), "")
        say(f"internal error: {type(err).__name__}: {first}; traceback in "
            f"{write_traceback(command)}")
        return 1
    return 0


def write_traceback(command: str) -> Path:
    """The current exception's traceback in <cache>/gpt1/errors/ (the system temp folder's
    gpt1-errors if that is not writable: gpt1.atomic); returns the file."""
    name = f"{command}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}.log"
    text = f"gpt1 {' '.join(sys.argv[1:])}\n\n{traceback.format_exc()}"
    for folder in cache_dirs("errors"):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text, encoding="utf-8")
            return folder / name
        except OSError:
            continue
    return Path("<not written: no writable cache or temp directory>")
