"""file_read, file_write, file_patch and diff_generate inside the workspace sandbox."""

from __future__ import annotations

import contextlib
import difflib
import errno
import os
import stat
from pathlib import Path

from persmem_core.sdk import UserError, atomic_write_at

from .sandbox import Sandbox, refuse_git_folder


def _read_text(sandbox: Sandbox, path: str, max_bytes: int | None) -> tuple[str, Path]:
    fd, real = sandbox.open_regular(path)
    with os.fdopen(fd, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if max_bytes is not None and size > max_bytes:
            raise UserError(f"{path!r} is {size:,} bytes, over the {max_bytes:,} byte limit ([shell] "
                            "max_read_bytes); read a line range with start_line/end_line.")
        data = f.read() if max_bytes is None else f.read(max_bytes + 1)
    if b"\x00" in data[:8192]:
        raise UserError(f"{path!r} looks binary (it contains NUL bytes); file_read returns text only.")
    return data.decode("utf-8", "replace"), real


def read(sandbox: Sandbox, path: str, start_line: int, end_line: int, max_bytes: int) -> dict:
    if not isinstance(start_line, int) or not isinstance(end_line, int) or start_line < 0 or end_line < 0:
        raise UserError("start_line and end_line are 1-based line numbers (0 = from the start / to the end).")
    if end_line and start_line and end_line < start_line:
        raise UserError(f"end_line {end_line} is before start_line {start_line}.")
    if not start_line and not end_line:
        text, real = _read_text(sandbox, path, max_bytes)
        return {"path": str(real), "content": text, "total_lines": text.count("\n") + (not text.endswith("\n") and bool(text))}
    fd, real = sandbox.open_regular(path)
    lines, total, taken = [], 0, 0
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, 1):
            total = number
            if number >= (start_line or 1) and (not end_line or number <= end_line):
                taken += len(line)
                if taken > max_bytes:
                    raise UserError(f"the range is over {max_bytes:,} bytes; ask for fewer lines.")
                lines.append(line)
    return {"path": str(real), "start_line": start_line or 1, "end_line": (start_line or 1) + len(lines) - 1,
            "total_lines": total, "content": "".join(lines)}


def write(sandbox: Sandbox, path: str, content: str, mkdir: bool, max_bytes: int) -> dict:
    if not isinstance(content, str):
        raise UserError("content must be a string.")
    data = content.encode("utf-8")
    if len(data) > max_bytes:
        raise UserError(f"content is {len(data):,} bytes, over the {max_bytes:,} byte limit ([shell] max_write_bytes).")
    target = sandbox.for_write(path)
    refuse_git_folder(target, sandbox, path)
    with _clear_os_errors(path):
        folder = sandbox.open_folder(target.parent, path, create=mkdir)
        try:
            try:
                existing = os.stat(target.name, dir_fd=folder, follow_symlinks=False)
            except FileNotFoundError:
                existing = None
            if existing is not None and stat.S_ISDIR(existing.st_mode):
                raise UserError(f"{path!r} is a folder; give a file name.")
            mode = existing.st_mode & 0o777 if existing is not None and stat.S_ISREG(existing.st_mode) else 0o644
            atomic_write_at(folder, target.name, data, mode)
        finally:
            os.close(folder)
    return {"status": "written", "path": str(target), "bytes": len(data), "created": existing is None}


@contextlib.contextmanager
def _clear_os_errors(path: str):
    """What the file system refuses (disk full, read-only, a file where a folder should be...) becomes a
    message naming the path and the reason; nothing half-written stays behind (writes are atomic)."""
    try:
        yield
    except OSError as exc:
        reason = {errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
                  errno.EROFS: "the file system is read-only"}.get(exc.errno, exc.strerror or str(exc))
        raise UserError(f"cannot write {path!r}: {reason}; nothing was changed.") from None


def patch(sandbox: Sandbox, path: str, old_text: str, new_text: str, max_bytes: int) -> dict:
    if not isinstance(old_text, str) or not old_text:
        raise UserError("old_text is empty; pass the exact text to replace (include enough context to be unique).")
    text, real = _read_text(sandbox, path, max_bytes)
    count = text.count(old_text)
    if count == 0:
        hint = difflib.get_close_matches(old_text.strip().splitlines()[0] if old_text.strip() else old_text,
                                         text.splitlines(), n=1, cutoff=0.6)
        raise UserError(f"old_text was not found in {path!r}; nothing changed."
                        + (f" The closest line is: {hint[0]!r}." if hint else " Read the file again (file_read)."))
    if count > 1:
        raise UserError(f"old_text appears {count} times in {path!r}; nothing changed. Include more surrounding "
                        "lines so it matches exactly once.")
    updated = text.replace(old_text, new_text, 1)
    target = sandbox.for_write(path)
    refuse_git_folder(target, sandbox, path)
    with _clear_os_errors(path):
        folder = sandbox.open_folder(target.parent, path)
        try:
            mode = os.stat(target.name, dir_fd=folder, follow_symlinks=False).st_mode
            atomic_write_at(folder, target.name, updated.encode("utf-8"), mode & 0o777 if stat.S_ISREG(mode) else 0o644)
        finally:
            os.close(folder)
    line = text[: text.index(old_text)].count("\n") + 1
    return {"status": "patched", "path": str(target), "line": line,
            "diff": "".join(difflib.unified_diff(text.splitlines(True), updated.splitlines(True),
                                                 fromfile=path, tofile=path, n=2))}


def diff(sandbox: Sandbox, path_a: str, path_b: str, content_a: str, content_b: str, context_lines: int,
         max_bytes: int) -> dict:
    if not isinstance(context_lines, int) or not 0 <= context_lines <= 100:
        raise UserError("context_lines must be from 0 to 100.")
    if not (path_a or content_a) and not (path_b or content_b):
        raise UserError("give something to compare: path_a and/or content_a, and path_b and/or content_b.")
    a = _read_text(sandbox, path_a, max_bytes)[0] if path_a else content_a
    if path_b:
        b = _read_text(sandbox, path_b, max_bytes)[0]
    elif content_b or not path_a:
        b = content_b
    else:
        raise UserError("give path_b or content_b to compare path_a with.")
    text = "".join(difflib.unified_diff(a.splitlines(True), b.splitlines(True), fromfile=path_a or "a",
                                        tofile=path_b or ("b" if not path_a else path_a), n=context_lines))
    return {"diff": text, "identical": a == b}
