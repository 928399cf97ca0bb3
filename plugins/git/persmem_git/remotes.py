"""Which remotes clone/fetch/pull/push may reach: URLs under a prefix of `[git] remotes`, judged after
normalising, so `https://host/me/../other` or `https://host/me/%2e%2e/other` cannot climb out of the
allowed prefix, and compared by path components (`https://host/me` does not allow `https://host/meevil`).
git is also told not to follow HTTP redirects (runner.py), so the server cannot move it elsewhere.
"""

from __future__ import annotations

import posixpath
import re
from urllib.parse import unquote, urlsplit

from persmem_core.sdk import UserError

from .repo import REMOTE_CHOICE_KEY, remote_urls

SCP_LIKE = re.compile(r"^(?P<host>[^/:]+):(?P<path>.*)$")  # git@github.com:me/repo.git


def normalise(url: str) -> str:
    """The URL with its path percent-decoded once and its dot segments applied; refuses what cannot be judged
    (a '%' left after decoding, backslashes, control characters)."""
    if not isinstance(url, str) or not url.strip():
        raise UserError("the remote URL is empty.")
    if any(ord(c) < 32 or c == "\\" for c in url):
        raise UserError(f"remote URL {url[:200]!r} contains a backslash or a control character; refused.")
    if "://" in url:
        parts = urlsplit(url)
        path = unquote(parts.path)
        head = f"{parts.scheme.lower()}://{parts.netloc.lower()}"
        if "%" in unquote(parts.netloc):
            raise UserError(f"remote URL {url[:200]!r} has a percent-encoded host; refused.")
        if parts.query or parts.fragment:
            raise UserError(f"remote URL {url[:200]!r} has a query or fragment; refused.")
    else:
        scp = SCP_LIKE.match(url) if not url.startswith(("/", ".")) else None
        head, path = (scp.group("host").lower() + ":", unquote(scp.group("path"))) if scp else ("", unquote(url))
    if "%" in path:
        raise UserError(f"remote URL {url[:200]!r} is percent-encoded twice; refused.")
    if path:
        trailing = path.endswith("/")
        path = posixpath.normpath(path)
        if path.startswith("//"):
            path = "/" + path.lstrip("/")
        if trailing and path != "/":
            path += "/"
        if path == ".":
            path = ""
    return head + path


def allowed(url: str, prefixes: list[str]) -> bool:
    """`url` is one of the prefixes or below one, compared after normalising both."""
    target = normalise(url)
    for prefix in prefixes:
        base = normalise(prefix)
        if target == base.rstrip("/") or target.startswith(base if base.endswith(("/", ":")) else base + "/"):
            return True
    return False


def protocols(prefixes: list[str]) -> str:
    """GIT_ALLOW_PROTOCOL: the network protocols, and file only when a prefix is a local path (never ext)."""
    names = ["https", "http", "ssh", "git"]
    if any(r.startswith(("/", "file://", "./")) for r in prefixes):
        names.append("file")
    return ":".join(names)


def _config(entries) -> dict[str, str]:
    """Config as git looks it up: section and key case-insensitive, subsection (a branch name) as written;
    the last value wins."""
    values = {}
    for _, key, value in entries:
        section, _, rest = key.partition(".")
        middle, _, name = rest.rpartition(".")
        values[".".join(p for p in (section.lower(), middle, name.lower()) if p)] = value
    return values


def default_remote(entries, operation: str, branch: str | None) -> str:
    """The remote git uses when none is named: the branch's (push)remote, remote.pushDefault, else origin."""
    values = _config(entries)
    keys = []
    if operation == "push":
        keys += [f"branch.{branch}.pushremote", "remote.pushdefault"] if branch else ["remote.pushdefault"]
    if branch:
        keys.append(f"branch.{branch}.remote")
    return next((values[key] for key in keys if key in values), "origin")


def is_ssh(url: str) -> bool:
    """Whether git reaches `url` over ssh (ssh://, git+ssh://, or the scp-like host:path)."""
    if "://" in url:
        return urlsplit(url).scheme.lower() in ("ssh", "git+ssh", "ssh+git")
    return not url.startswith(("/", ".")) and SCP_LIKE.match(url) is not None


def check(prefixes: list[str], entries, operation: str, positionals: list[str], options: list[str],
          branch: str | None, allow_force_push: bool) -> list[str]:
    """Refuse a network operation whose remote (named, or the one git would pick) is not allowed; return the
    URLs it will reach."""
    if not prefixes:
        raise UserError(f"git {operation} needs a remote, and none is allowed: the operator lists allowed remote "
                        "URL prefixes in [git] remotes.")
    names = {".".join(key.split(".")[1:-1]) for _, key, _ in entries
             if key.lower().startswith("remote.") and key.lower().endswith((".url", ".pushurl"))}
    for _, key, value in entries:  # where pull/push go without a remote named: must be a configured remote
        if REMOTE_CHOICE_KEY.match(key.lower()) and value not in names and value != ".":  # ".": this repository
            raise UserError(f"this repository's config sets {key} = {value[:200]!r}, which is not one of its "
                            "remotes (a URL or path there bypasses the allowed remotes); refused.")
    if "--all" in options:
        urls = remote_urls(entries)
    else:
        name = positionals[0] if positionals else default_remote(entries, operation, branch)
        if name == "." and not positionals:
            return []  # the branch tracks a local branch: no network
        urls = remote_urls(entries, name)
        if not urls:
            raise UserError(f"{name!r} is not a configured remote of this repository (git remote -v lists them); "
                            "URLs cannot be given directly." if positionals else
                            f"this repository has no remote {name!r} to {operation} (name one: args=\"origin\").")
    for url in urls:
        if not allowed(url, prefixes):
            raise UserError(f"remote URL {url!r} is not allowed ([git] remotes: {', '.join(prefixes)}; URLs are "
                            "compared after decoding %-escapes and applying '..').")
    if operation == "push" and not allow_force_push:
        for spec in positionals[1:]:
            if spec.startswith("+"):
                raise UserError(f"refspec {spec!r} forces the push; force push is off ([git] allow_force_push).")
    return urls
