"""``shep doctor``'s check of git: present, and new enough for what shep asks of it."""

from __future__ import annotations

from events.errors import GitError
from shep.git.command import MINIMUM_GIT, git_version
from shep.home.doctor import Check


def check_git() -> Check:
    """git on PATH, of ``MINIMUM_GIT`` or newer (features merge with ``merge-tree``)."""
    minimum = ".".join(map(str, MINIMUM_GIT))
    try:
        version = git_version()
    except GitError as e:
        return Check("git", "fail", str(e))
    found = ".".join(map(str, version))
    data = {"version": found, "minimum": minimum}
    if version < MINIMUM_GIT:
        return Check(
            "git",
            "fail",
            f"git {found} is older than {minimum}, the oldest shep works with",
            f"Upgrade git to {minimum} or newer.",
            data,
        )
    return Check("git", "ok", f"git {found}", data=data)
