"""The one way shep runs git: ``run_git``, with nothing the repository or the agent wrote.

shep does not trust the agent or the repository (docs/architecture.md, "Trust"), and
git runs commands its config names: hooks (from a ``core.hooksPath`` that may be
relative, so read from the worktree the agent writes: ``post-index-change`` on every
``add``, ``prepare-commit-msg``, ``post-commit``, ``post-merge``, ``reference-transaction``
...), ``core.fsmonitor``, filter and merge drivers, ``gpg.program``. A worktree's ``.git``
file says where its git directory is, and the agent can rewrite it to point at a git
directory of its own whose config names any command. So every git command of shep's:

- runs with ``-c core.hooksPath=/dev/null`` (no hook at all) unless ``Checkout.hooks``
  (the ``merge_hooks`` setting, for the merge in the user's checkout only),
  ``core.fsmonitor=false``, ``commit.gpgSign=false``, ``log.showSignature=false``
  (verifying a signature runs ``gpg.program``), ``submodule.recurse=false``;
- talks to no server but to push (``protocol.allow=never``, ``GIT_NO_LAZY_FETCH``): a
  config can make a repository a partial clone whose missing objects git fetches on
  demand from a "remote" whose ``uploadpack`` is any command, or a local path;
- unless it surely reads no file nor merges contents, with every filter driver of git's config
  emptied and every merge driver replaced by git's own ``merge-file``, unless
  ``Checkout.drivers`` (the ``git_filters`` setting: git-lfs needs them);
- addresses a feature worktree through the git directory shep made and recorded
  (``GIT_DIR``/``GIT_WORK_TREE``), after checking that the worktree's ``.git`` file still
  names it, and that directory's ``commondir`` file (which the agent's own git writes
  beside) still names the repository it was made in, not one the agent made:
  :class:`WorktreeLinkChangedError` otherwise, and nothing runs;
- in the user's own checkout, works on the files of the work tree git finds from the
  path (``GIT_WORK_TREE``), never on the directory a ``core.worktree`` names: a config
  the agent writes would otherwise snapshot files from anywhere;
- gets ``LC_ALL=C`` (we read and quote git's English messages), ``GIT_TERMINAL_PROMPT=0``
  (a background worker must never wait on a password prompt), ``GIT_OPTIONAL_LOCKS=0``
  (our ``git status`` must not rewrite the user's index behind their back),
  ``GIT_PAGER=cat``, and none of the variables that point git at another repository
  or config (``GIT_DIR``, ``GIT_INDEX_FILE``, ``GIT_CONFIG_PARAMETERS``, ...), nor
  ``GIT_EXTERNAL_DIFF``; no shell, captured output, a timeout.

Diffs are asked with ``--no-ext-diff --no-textconv`` by their callers (``diff.external``,
``diff.<driver>.command`` and ``textconv`` only run for diffs). Aliases are never used:
git refuses an alias of a built-in command name, and shep only runs built-ins.

A git killed with its worker leaves its lock files (``HEAD.lock``, ``index.lock``, a
ref's ``.lock``), and every later command fails on them. When a command fails on a lock
that no live process holds open and no live git works in that repository next to, the
lock is stale: it is removed and the command runs once more. Otherwise the error says
who holds it, in one line.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import subprocess
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from events.errors import GitError, WorktreeLinkChangedError

StrPath = str | os.PathLike[str]

#: Seconds a local git command may take (a snapshot of a huge repository included).
GIT_TIMEOUT = 300.0
#: Seconds a command that talks to a server (push, ``gh``) may take.
NETWORK_TIMEOUT = 600.0

#: The oldest git shep works with: merges are computed with ``merge-tree --write-tree``.
MINIMUM_GIT = (2, 38)
_MINIMUM = ".".join(map(str, MINIMUM_GIT))
_NO_GIT = f"git is not installed or not on PATH; install git {_MINIMUM} or newer."
_GIT_VERSION = re.compile(r"git version (\d+)\.(\d+)(?:\.(\d+))?")

#: The identity of the commits shep makes when the user has configured none.
SHEP_NAME = "shep"
SHEP_EMAIL = "shep@localhost"

# What `git rev-parse --local-env-vars` lists: each would make `git -C path` work on some
# other repository, index, object store or config than the one at `path`.
_REPO_LOCAL_VARS = frozenset(
    {
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_COMMON_DIR",
        "GIT_CONFIG",
        "GIT_CONFIG_COUNT",
        "GIT_CONFIG_PARAMETERS",
        "GIT_DIR",
        "GIT_GRAFT_FILE",
        "GIT_IMPLICIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_INTERNAL_SUPER_PREFIX",
        "GIT_NO_REPLACE_OBJECTS",
        "GIT_OBJECT_DIRECTORY",
        "GIT_PREFIX",
        "GIT_REPLACE_REF_BASE",
        "GIT_SHALLOW_FILE",
        "GIT_WORK_TREE",
    }
)
# Commands named by the environment that a diff would run.
_COMMAND_VARS = frozenset({"GIT_EXTERNAL_DIFF"})

#: Config that runs a command, turned off on every command.
_SAFE_CONFIG = (
    "core.fsmonitor=false",
    "commit.gpgSign=false",
    "log.showSignature=false",
    "submodule.recurse=false",
)
_NO_HOOKS = "core.hooksPath=/dev/null"
#: No transport at all (fetching, on demand too, runs commands a config names), but to push.
_NO_NETWORK = "protocol.allow=never"
_NETWORK_COMMANDS = frozenset({"push"})
# The commands that make a repository: the work tree of one around them is not theirs.
_NEW_REPOSITORY_COMMANDS = frozenset({"init", "clone"})

# The commands that never read a work-tree file nor merge contents, so run no filter or
# merge driver: only the others pay for reading the config's drivers. (Writing an index,
# even `write-tree`, may re-read "racily clean" files through their clean filter; our
# diffs compare commits, or the index with a commit.)
_NO_FILE_COMMANDS = frozenset(
    {"branch", "cat-file", "check-ref-format", "commit-tree", "config", "diff", "for-each-ref"}
    | {"init", "log", "merge-base", "push", "remote", "rev-list", "rev-parse", "show-ref"}
    | {"symbolic-ref", "update-ref"}
)
# ... and the `git worktree` commands that touch no file of a worktree.
_NO_FILE_WORKTREE_COMMANDS = frozenset({"list", "prune", "lock", "unlock"})
_DRIVER_KEYS = r"^(filter\..+\.(clean|smudge|process)|merge\..+\.driver)$"
# What a merge driver becomes: git's own three-way merge of the same files.
_PLAIN_MERGE = "git merge-file --marker-size=%L %A %O %B"

_LOCK = re.compile(r"Unable to create '(?P<path>[^']+\.lock)': File exists")


@dataclass(frozen=True)
class Checkout:
    """Where a git command works, and what of the repository's config it may run.

    ``path``: a directory in a work tree; git finds the repository from it (the user's
    own checkout). ``git_dir``: for a feature worktree, the git directory shep made and
    recorded; git is pointed at it, never at what the worktree's ``.git`` file says, and
    that file is checked to still name it before each command. ``hooks``: the
    repository's hooks may run (the ``merge_hooks`` setting). ``drivers``: the filter
    and merge drivers of git's config may run (the ``git_filters`` setting).
    """

    path: Path
    git_dir: Path | None = None
    hooks: bool = False
    drivers: bool = False

    @cached_property
    def work_tree(self) -> Path | None:
        """The root of the work tree ``path`` is in: ``path`` for a feature worktree; else
        the nearest directory up from it that holds a ``.git``, as git finds it, and never
        what a ``core.worktree`` of the repository's config says (None: in no work tree).
        """
        if self.git_dir is not None:
            return self.path
        here = Path(os.path.abspath(self.path))
        for place in (here, *here.parents):
            if _is_git_link(place / ".git") or _is_git_directory(place / ".git"):
                return place
            if _is_git_directory(place):  # a bare repository, or inside a .git directory
                return None
        return None

    @cached_property
    def driver_overrides(self) -> tuple[str, ...]:
        """``-c`` options that disable every driver git's config defines here (read once)."""
        done = _run(self, ("config", "-z", "--name-only", "--get-regexp", _DRIVER_KEYS), {})
        if done.returncode not in (0, 1):
            raise GitError(f"Cannot read the git config of {self.path}: {reason(done.stderr)}.")
        options: list[str] = []
        for key in dict.fromkeys(k for k in done.stdout.split("\0") if k):
            if key.startswith("filter."):
                options += ["-c", f"{key}=", "-c", f"{key.rsplit('.', 1)[0]}.required=false"]
            else:
                options += ["-c", f"{key}={_PLAIN_MERGE}"]
        return tuple(options)


def _is_git_directory(path: Path) -> bool:
    """Whether ``path`` looks like a git directory to git: ``HEAD``, ``objects``, ``refs``
    (a linked worktree's has a ``commondir`` instead of the last two)."""
    if not (path / "HEAD").is_file():
        return False
    return (path / "commondir").is_file() or (
        (path / "objects").is_dir() and (path / "refs").is_dir()
    )


def _is_git_link(path: Path) -> bool:
    """Whether ``path`` is a ``.git`` file naming a git directory (``gitdir: ...``), as a
    linked worktree or a submodule has; git passes over a ``.git`` that is neither."""
    try:
        return path.is_file() and _small_text(path).startswith("gitdir:")
    except OSError:
        return False


def checkout(where: StrPath | Checkout) -> Checkout:
    """``where`` as a :class:`Checkout` (a path: the user's own checkout, nothing trusted)."""
    return where if isinstance(where, Checkout) else Checkout(Path(where))


def run_git(
    where: StrPath | Checkout,
    *args: str,
    doing: str,
    fix: str = "",
    env: Mapping[str, str] | None = None,
    ok: Collection[int] = (0,),
    timeout: float = GIT_TIMEOUT,
) -> subprocess.CompletedProcess[str]:
    """Run ``git args`` at ``where``; raise GitError unless its exit code is in ``ok``.

    ``doing`` completes "Cannot ..." in the error; ``fix`` says what the user can do.
    ``args`` may start with ``-c name=value`` options of the caller's.
    """
    tree = checkout(where)
    command = subcommand(args)
    extra = dict(env or {})
    if not tree.drivers and _reads_files(args):
        args = (*tree.driver_overrides, *args)
    removed: set[str] = set()
    while True:
        done = _run(tree, args, extra, timeout=timeout, doing=doing)
        if done.returncode in ok:
            return done
        lock = _LOCK.search(done.stderr)
        if lock is None or lock["path"] in removed or not _remove_stale(Path(lock["path"]), tree):
            break
        removed.add(lock["path"])
    if lock is not None:
        holder = _holder(Path(lock["path"]), tree)
        who = (
            f"is held by a running process (pid {holder})"
            if holder
            else "exists (a git is running there, or one was killed: if none runs, delete it)"
        )
        raise GitError(f"Cannot {doing}: git's lock {lock['path']} {who}; then retry.")
    said = reason(done.stderr) or f"git {command} exited with {done.returncode}"
    raise GitError(f"Cannot {doing}: {said}." + (f" {fix}" if fix else ""))


def run_git_as_author(
    where: StrPath | Checkout, *args: str, doing: str, fix: str = ""
) -> subprocess.CompletedProcess[str]:
    """Run a committing git command as the user when they configured an identity (in git's
    config or GIT_AUTHOR_*/GIT_COMMITTER_*), else as shep, filling only what is missing.

    So a commit never fails on "Please tell me who you are" and never carries a guessed
    ``user@hostname``. ``user.useConfigOnly`` makes the first try fail fast instead of
    guessing; only then is the config read (a snapshot saves a process this way).
    """
    tree = checkout(where)
    try:
        return run_git(tree, "-c", "user.useConfigOnly=true", *args, doing=doing, fix=fix)
    except GitError:
        return run_git(tree, *args, env=_identity_env(tree), doing=doing, fix=fix)


def _identity_env(tree: Checkout) -> dict[str, str]:
    """Author and committer variables naming shep where the user configured no identity."""
    done = run_git(
        tree,
        "config",
        "--get-regexp",
        r"^user\.(name|email)$",
        doing="read the user's git identity",
        ok=(0, 1),
    )
    configured = {line.split(" ", 1)[0] for line in done.stdout.splitlines()}
    env: dict[str, str] = {}
    for key, value in (("name", SHEP_NAME), ("email", SHEP_EMAIL)):
        if f"user.{key}" in configured:
            continue
        for who in ("AUTHOR", "COMMITTER"):
            var = f"GIT_{who}_{key.upper()}"
            if not os.environ.get(var):
                env[var] = value
    return env


def environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of shep's git (and ``gh``, which runs git): this process's, without
    what points git at another repository or runs a diff command, with git's English,
    no prompt, no optional lock, no pager; then ``extra``.
    """
    env = {k: v for k, v in os.environ.items() if k not in _REPO_LOCAL_VARS | _COMMAND_VARS}
    env.update(LC_ALL="C", GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0", GIT_PAGER="cat")
    env.update(GIT_NO_LAZY_FETCH="1")  # git 2.44 on; protocol.allow stops older ones
    env.update(extra or {})
    return env


def _run(
    tree: Checkout,
    args: Iterable[str],
    extra: Mapping[str, str],
    *,
    timeout: float = GIT_TIMEOUT,
    doing: str = "run git",
) -> subprocess.CompletedProcess[str]:
    env = environment()
    args = tuple(args)
    command = subcommand(args)
    if tree.git_dir is not None:
        check_link(tree.path, tree.git_dir)
        env.update(GIT_DIR=os.fspath(tree.git_dir), GIT_WORK_TREE=os.fspath(tree.path))
    elif tree.work_tree is not None and command not in _NEW_REPOSITORY_COMMANDS:
        env.update(GIT_WORK_TREE=os.fspath(tree.work_tree))
    env.update(extra)
    safe = [option for value in _SAFE_CONFIG for option in ("-c", value)]
    if not tree.hooks:
        safe += ["-c", _NO_HOOKS]
    if command not in _NETWORK_COMMANDS:
        safe += ["-c", _NO_NETWORK]
    else:  # the remote's own transport only, never one that runs a local command
        safe += ["-c", "protocol.ext.allow=never"]
    try:
        return subprocess.run(
            ["git", "-C", os.fspath(tree.path), *safe, *args],
            env=env,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="surrogateescape",  # paths are bytes; keep them round-trippable
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as e:
        raise GitError(_NO_GIT) from e
    except subprocess.TimeoutExpired as e:
        raise GitError(
            f"Cannot {doing}: git {command} did not finish within {timeout:g}s in {tree.path}."
        ) from e


def git_version(*, timeout: float = 10.0) -> tuple[int, ...]:
    """The version of the git on PATH (``(2, 39, 5)``); GitError if there is none, or it
    does not say (no repository is involved: nothing of a repository's config runs).
    """
    try:
        done = subprocess.run(
            ["git", "--version"],
            env=environment(),
            capture_output=True,
            text=True,
            errors="replace",
            stdin=subprocess.DEVNULL,
            timeout=timeout,
            check=False,
        )
    except FileNotFoundError as e:
        raise GitError(_NO_GIT) from e
    except (OSError, subprocess.TimeoutExpired) as e:
        raise GitError(f"`git --version` failed ({e}); reinstall git {_MINIMUM} or newer.") from e
    found = _GIT_VERSION.search(done.stdout)
    if done.returncode != 0 or found is None:
        said = reason(done.stderr) or done.stdout.strip()[:200] or f"exit code {done.returncode}"
        raise GitError(f"`git --version` did not say its version ({said}).")
    return tuple(int(part) for part in found.groups() if part is not None)


def check_link(worktree: Path, git_dir: Path) -> None:
    """Check that ``worktree/.git`` is still the file naming ``git_dir``, as git wrote it
    when shep made the worktree; WorktreeLinkChangedError (nothing is run) otherwise.
    """
    link = worktree / ".git"
    found: str
    try:
        mode = os.lstat(link).st_mode
        if stat.S_ISLNK(mode):
            found = f"is a symbolic link to {os.readlink(link)}"
        elif stat.S_ISDIR(mode):
            found = "is a directory (a git repository of its own)"
        elif not stat.S_ISREG(mode):
            found = "is not a file"
        else:
            text = _small_text(link)
            target = text.removeprefix("gitdir:").strip()
            if text.startswith("gitdir:") and _names(worktree, target, git_dir):
                _check_common_dir(git_dir)
                return
            found = f"says {text[:200]!r}"
    except FileNotFoundError:
        if not worktree.is_dir():
            raise GitError(f"The worktree {worktree} is gone.") from None
        found = "is missing"
    except OSError as e:
        found = f"cannot be read ({e.strerror})"
    raise WorktreeLinkChangedError(
        f"{link} {found}, not the git directory shep made for this worktree ({git_dir}): "
        "something in the worktree rewrote it, so shep runs no git there and stops. Put "
        f"back `gitdir: {git_dir}` in {link} if you trust the worktree, then `shep resume`."
    )


def _check_common_dir(git_dir: Path) -> None:
    """Check that the ``commondir`` file of a worktree's git directory (``<common
    dir>/worktrees/<name>``, as ``git worktree add`` makes it) still names that common
    directory; WorktreeLinkChangedError otherwise. git takes the objects, refs and config
    from the directory it names: one the agent made would get shep's snapshots and run
    the commands its config names.
    """
    if git_dir.parent.name != "worktrees":
        return
    common = git_dir.parent.parent
    path = git_dir / "commondir"
    try:
        text = _small_text(path)
        if _names(git_dir, text, common):
            return
        found = f"says {text[:200]!r}"
    except OSError as e:
        found = f"cannot be read ({e.strerror})"
    raise WorktreeLinkChangedError(
        f"{path} {found}, not the repository shep made this worktree in ({common}): "
        "something rewrote it, so shep runs no git there and stops. Put back `../..` in "
        f"{path} if you trust the worktree, then `shep resume`."
    )


class NotAFileError(OSError):
    """At a path is neither a regular file nor a directory: a named pipe, a device, a socket."""


def read_regular(path: StrPath, limit: int) -> bytes:
    """The first ``limit`` bytes of the regular file ``path``, opened not through a symbolic
    link (its last part) and without waiting: opening a named pipe to read waits for a
    writer, and a device reads for ever. OSError as ``open`` raises it otherwise,
    IsADirectoryError for a directory, NotAFileError for anything else.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
        if not stat.S_ISREG(mode):
            raise NotAFileError(errno.EINVAL, "not a regular file", os.fspath(path))
    except BaseException:
        os.close(fd)
        raise
    with os.fdopen(fd, "rb") as f:
        return f.read(limit)


def _small_text(path: Path) -> str:
    """The text of the small regular file ``path`` (``read_regular``), stripped."""
    return read_regular(path, 4097).decode("utf-8", "replace").strip()


def _names(base: Path, target: str, wanted: Path) -> bool:
    """Whether ``target`` (absolute, or relative to ``base``) is the directory ``wanted``."""
    named = Path(target) if os.path.isabs(target) else base / target
    return os.path.realpath(named) == os.path.realpath(wanted)


def _reads_files(args: tuple[str, ...]) -> bool:
    """Whether the git command ``args`` may read or write work-tree files or merge contents."""
    command = subcommand(args)
    if command == "worktree":
        rest = args[args.index("worktree") + 1 :]
        return not rest or rest[0] not in _NO_FILE_WORKTREE_COMMANDS
    return command not in _NO_FILE_COMMANDS


def subcommand(args: tuple[str, ...]) -> str:
    """The git command in ``args``, after any ``-c name=value`` options."""
    i = 0
    while i < len(args) - 1 and args[i] == "-c":
        i += 2
    return args[i] if i < len(args) else ""


def reason(stderr: str) -> str:
    """Git's own one-line reason: its first ``fatal:``/``error:`` line, else its first line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    for line in lines:
        for prefix in ("fatal: ", "error: "):
            if line.startswith(prefix):
                return line.removeprefix(prefix)[:300].rstrip(".")
    return lines[0][:300].rstrip(".") if lines else ""


# --- stale locks ------------------------------------------------------------------------------


def _remove_stale(lock: Path, tree: Checkout) -> bool:
    """Remove ``lock`` if no live process holds it; whether it was removed."""
    if _holder(lock, tree) is not None:
        return False
    try:
        lock.unlink()
    except FileNotFoundError:
        pass  # its git finished meanwhile: try again all the same
    except OSError:
        return False
    return True


def _holder(lock: Path, tree: Checkout) -> int | None:
    """A live process that holds ``lock`` open, or a live git working in its repository
    (it may be between writing the lock and renaming it); None when there is none.
    """
    from shep.home import procs

    lock_path = os.path.realpath(lock)
    places = _repository_places(lock, tree)
    for pid in procs.others():
        if (
            procs.has_open(pid, lock_path)
            or (procs.process_name(pid).startswith("git") and _works_in(pid, places))
        ) and procs.pid_alive(pid):
            return pid
    return None


def _repository_places(lock: Path, tree: Checkout) -> list[str]:
    """The directories a git working on ``lock``'s repository would be in: the git
    directories (the lock's, shep's recorded one) and the work trees of the repository.
    """
    places = {os.path.realpath(tree.path), os.path.realpath(lock.parent)}
    if tree.git_dir is not None:
        places.add(os.path.realpath(tree.git_dir))
    done = _run(tree, ("worktree", "list", "--porcelain", "-z"), {})
    if done.returncode == 0:
        for item in done.stdout.split("\0"):
            if item.startswith("worktree "):
                places.add(os.path.realpath(item.removeprefix("worktree ")))
    common = _run(tree, ("rev-parse", "--path-format=absolute", "--git-common-dir"), {})
    if common.returncode == 0 and common.stdout.strip():
        places.add(os.path.realpath(common.stdout.strip()))
    return sorted(places)


def _works_in(pid: int, places: list[str]) -> bool:
    """Whether process ``pid`` works in one of ``places``: its directory, or the git
    directory its environment names, is there (unreadable: counted as there).
    """
    from shep.home import procs

    cwd, environ = procs.working_directory(pid), procs.environ(pid)
    if cwd is None or environ is None:
        return True
    where = [cwd]
    for name in ("GIT_DIR", "GIT_COMMON_DIR", "GIT_WORK_TREE"):
        if environ.get(name):
            where.append(os.path.realpath(environ[name]))
    return any(w == place or w.startswith(place + os.sep) for w in where for place in places)
