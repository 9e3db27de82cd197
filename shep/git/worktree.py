"""The paths of a worktree that shep does not trust: the guard every file operation on them
passes, and the git directory a feature worktree is addressed through.

An agent writes the worktree, and a repository brings its own files, symbolic links
included: ``out -> /home/user``, then a task declaring ``out/notes.txt``. Every path
either of them names (a task's files, a spec file, an approved artifact, a report) goes
through :func:`inside_worktree` before shep reads, writes or removes it: it must be
relative, without ``..``, and no part of it on the way may be a symbolic link (the last
part may be, for an operation on the link itself, like removing it). Refusing links,
rather than resolving them and checking where they land, leaves nothing to race and
nothing to misjudge (a link to a sibling directory is refused too: shep never needs one).

A feature worktree's ``.git`` file is the agent's to rewrite, so git is pointed at the
git directory shep made and recorded (the run's ``git_dir`` input), never at what that
file says (see ``shep.git.command``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path, PurePosixPath

from events.errors import GitError, UnsafePathError
from shep.git.command import Checkout, NotAFileError, StrPath, read_regular

#: Bytes read at most from one file named by an agent or a repository.
READ_LIMIT = 64 * 1024 * 1024


def inside_worktree(root: StrPath, path: StrPath, *, leaf_link: bool = False) -> Path:
    """``root / path``, checked to stay inside ``root``: ``path`` relative to ``root`` (or
    absolute and under it, as written), with no ``..``, and no existing part of it a
    symbolic link; the last part may be one when ``leaf_link`` (to remove the link
    itself). Parts that do not exist yet are fine (a file to create).

    UnsafePathError (one line) otherwise; nothing is touched.
    """
    base = Path(root)
    given = Path(path)
    if given.is_absolute():
        try:
            given = given.relative_to(base)
        except ValueError:
            raise UnsafePathError(f"{path} is not inside {root}; shep leaves it alone.") from None
    parts = [part for part in PurePosixPath(os.fspath(given).replace("\\", "/")).parts]
    parts = [part for part in parts if part != "."]
    if not parts or parts[0].startswith("/") or ".." in parts:
        raise UnsafePathError(
            f"{os.fspath(path)!r} does not name a file inside {root}; shep leaves it alone."
        )
    current = base
    for n, part in enumerate(parts, 1):
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except (FileNotFoundError, NotADirectoryError):
            break  # nothing further exists, so nothing further can lead out
        if stat.S_ISLNK(mode) and not (leaf_link and n == len(parts)):
            shown = "/".join(parts[:n])
            raise UnsafePathError(
                f"{'/'.join(parts)} goes through {shown}, a symbolic link in {root}; "
                "shep does not follow links out of a worktree and leaves it alone."
            )
    return base.joinpath(*parts)


def read_inside(root: StrPath, path: StrPath, *, limit: int = READ_LIMIT) -> bytes:
    """The bytes of the file ``path`` inside ``root`` (checked by :func:`inside_worktree`;
    the file is opened without following a link made since). OSError as ``open`` raises
    it (FileNotFoundError for a missing file, IsADirectoryError for a directory);
    UnsafePathError for a path that leads out, or that is no regular file: a named pipe
    would block the read until someone writes to it, a device read forever, so neither
    is opened for reading, nor read.
    """
    target = inside_worktree(root, path)
    try:
        return read_regular(target, limit)
    except NotAFileError as e:
        raise UnsafePathError(f"{path} is not a regular file; shep leaves it alone.") from e
    except OSError as e:
        if os.path.islink(target):
            raise UnsafePathError(f"{path} became a symbolic link; shep leaves it alone.") from e
        raise


# --- the git directory of a feature worktree ------------------------------------------------


def feature_checkout(
    inputs: Mapping[str, str], worktree: StrPath, *, hooks: bool = False, drivers: bool = False
) -> Checkout:
    """How shep's git reaches a feature's worktree: through the git directory recorded in
    the run's ``git_dir`` input (a run made before it was recorded: the one the source
    repository's own worktree list gives for ``worktree``, which the agent cannot edit).

    GitError when the source repository knows no such worktree.
    """
    path = Path(worktree)
    recorded = inputs.get("git_dir", "")
    if recorded:
        return Checkout(path, Path(recorded), hooks=hooks, drivers=drivers)
    from shep.git.branches import worktree_git_dir

    source = inputs.get("source_repo", "")
    found = worktree_git_dir(source, path) if source else None
    if found is None:
        raise GitError(
            f"{path} is not a worktree of {source or 'the source repository'} any more "
            "(`git worktree list` there does not show it)."
        )
    return Checkout(path, found, hooks=hooks, drivers=drivers)
