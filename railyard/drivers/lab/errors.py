"""The lab runtime's errors: each names the Linux object it was about, so a failed `up` says what broke."""

from __future__ import annotations

import os


class LabError(Exception):
    """A lab object could not be created, read or removed.

    obj:    the object concerned, as a person would look for it (``netns ry-lab-n-gpu-0``,
            ``link ibp24s0 in ry-lab-n-gpu-0``)
    detail: what went wrong, usually the failing command's own message
    """

    def __init__(self, obj: str, detail: str, message: str | None = None):
        self.obj = obj
        self.detail = detail.strip()
        super().__init__(message or f"lab {obj}: {self.detail}")


class NotRoot(LabError):
    """The lab builds namespaces, links and mounts: only root can, so say so before touching anything."""

    def __init__(self, what: str = "the lab"):
        detail = "needs root (it creates namespaces, links and mounts); run it as root, e.g. with sudo"
        super().__init__(what, detail, f"{what} {detail}")


def require_root(what: str = "the lab") -> None:
    if os.geteuid() != 0:
        raise NotRoot(what)
