"""Health checks: the `Check` a plugin's `doctor` hook returns, one line of `persmem doctor` each."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["PASS", "WARN", "FAIL"]


@dataclass(frozen=True)
class Check:
    """One line of `persmem doctor`: what was checked, how it went, and what to do about it."""

    name: str
    status: Status
    detail: str = ""

    def line(self) -> str:
        return f"{self.status}  {self.name}" + (f": {self.detail}" if self.detail else "")


def pass_(name: str, detail: str = "") -> Check:
    return Check(name, "PASS", detail)


def warn(name: str, detail: str = "") -> Check:
    return Check(name, "WARN", detail)


def fail(name: str, detail: str = "") -> Check:
    return Check(name, "FAIL", detail)
