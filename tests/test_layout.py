"""The layout rules of issue 19, checked on the source (ast only: nothing is imported).

- Only the faces (``shep/cli``, ``shep/web``) import click or prompt-toolkit, or print.
- No import cycle between files, lazy imports, TYPE_CHECKING imports and "module:attr"
  lazy tables included; arrows go events -> commands/projections -> shep, faces on top.
- No module over 600 lines.
- No import of another module's ``_private`` name, no ``obj._private`` on another object.
- Only ``shep/home/procs.py`` reads processes (psutil, ``/proc``).
- tests/ mirrors the code: each folder is a package's (``tests/shep/runs`` for ``shep/runs``)
  or one of a few named ones (whole-CLI tests, shared tooling); see tests/README.md.
- The status words (run, node, inbox item, autonomy) are enums said once: no comparison
  with a bare status word, no SQL statement that spells one.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("events", "commands", "projections", "shep")
FACES = ("shep.cli", "shep.web", "shep.__main__")
MAX_LINES = 600
PROCS = "shep.home.procs"
#: Inside shep, a package may import only packages of its own rank or lower.
LAYERS = {
    "home": 0, "agents": 1, "git": 1, "nodes": 2, "workflows": 2, "supervisor": 3,
    "runs": 4, "features": 5, "audit": 5, "replay": 6, "demo": 7,
    "cli": 8, "web": 8, "__main__": 8,
}  # fmt: skip
#: Upward arrows allowed, each with its reason (keep this list short).
LAYER_EXCEPTIONS: dict[tuple[str, str], str] = {
    ("shep.agents.registry", "shep.demo.agent"): "the registry names every agent type; the "
    "demo agent fakes every workflow, so it lives above them (a lazy 'module:attr' entry)",
}
#: Package arrows: a key may import only the values (besides itself).
MAY_IMPORT = {
    "events": set(),
    "commands": {"events"},
    "projections": {"events"},
    "shep": {"events", "commands", "projections"},
}
#: namedtuple's public API is spelled with a leading underscore.
PUBLIC_UNDERSCORE = {"_make", "_replace", "_asdict", "_fields", "_field_defaults"}


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    names: tuple[str, ...]
    kind: str  # top, lazy, typing, table


@cache
def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "sample_repo" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found[name.removesuffix(".__init__")] = path
    return found


@cache
def tree(module: str) -> ast.Module:
    path = modules()[module]
    return ast.parse(path.read_text(), str(path))


def _is_package(module: str) -> bool:
    return modules()[module].name == "__init__.py"


def _absolute(module: str, level: int, name: str | None) -> str:
    if level == 0:
        return name or ""
    parts = module.split(".")
    base = parts if _is_package(module) else parts[:-1]
    base = base[: len(base) - level + 1]
    return ".".join([*base, *([name] if name else [])])


def _nearest(name: str) -> str | None:
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


class _Imports(ast.NodeVisitor):
    def __init__(self, module: str) -> None:
        self.module, self.depth, self.typing, self.edges = module, 0, 0, list[Edge]()

    def _add(self, target: str, line: int, names: tuple[str, ...] = (), kind: str = "") -> None:
        found = _nearest(target) if target.split(".", maxsplit=1)[0] in PACKAGES else None
        if found and found != self.module:
            kind = kind or ("typing" if self.typing else "lazy" if self.depth else "top")
            self.edges.append(Edge(self.module, found, line, names, kind))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_If(self, node: ast.If) -> None:
        if ast.unparse(node.test).endswith("TYPE_CHECKING"):
            self.typing += 1
            for child in node.body:
                self.visit(child)
            self.typing -= 1
            for child in node.orelse:
                self.visit(child)
        else:
            self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = _absolute(self.module, node.level, node.module)
        for alias in node.names:
            full = f"{base}.{alias.name}"
            self._add(full if full in modules() else base, node.lineno, (alias.name,))

    def visit_Constant(self, node: ast.Constant) -> None:
        # "package.module:attr" tables of lazily imported things (the CLI's command table).
        if isinstance(node.value, str) and ":" in node.value and " " not in node.value:
            target = node.value.split(":", 1)[0]
            if target in modules():
                self._add(target, node.lineno, kind="table")

    def visit_Call(self, node: ast.Call) -> None:
        if dotted(node.func).endswith("import_module") and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                self._add(first.value, node.lineno, kind="lazy")
        self.generic_visit(node)


@cache
def edges() -> tuple[Edge, ...]:
    found: list[Edge] = []
    for module in modules():
        visitor = _Imports(module)
        visitor.visit(tree(module))
        found += visitor.edges
    return tuple(found)


def dotted(node: ast.expr) -> str:
    """``a.b.c`` for a name or attribute chain, else ""; cheaper than ``ast.unparse``."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return ""
    return ".".join([node.id, *reversed(parts)])


def _in(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def cycles() -> list[list[str]]:
    """Strongly connected components of more than one file (Tarjan, iterative)."""
    graph: dict[str, set[str]] = {m: set() for m in modules()}
    for edge in edges():
        graph[edge.source].add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root, children_of_root in graph.items():
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(children_of_root)))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


#: Violations that exist today, by a key without line numbers; each step of the reshape
#: removes its entries. A new violation fails, and so does an entry that no longer occurs.
KNOWN: dict[str, set[str]] = {
    "prints": set(),
    "cycles": set(),
    "arrows": set(),
    "sizes": set(),
    "private": set(),
    "words": set(),
    "procs": set(),
}


def _ratchet(rule: str, found: dict[str, str]) -> None:
    # A cycle's key is its sorted members: sort again, since a rename reorders them.
    known = {" ".join(sorted(k.split())) for k in KNOWN[rule]} if rule == "cycles" else KNOWN[rule]
    new = {key: where for key, where in found.items() if key not in known}
    gone = known - set(found)
    assert not new, f"new {rule} violations: {sorted(new.values())}"
    assert not gone, f"fixed, remove from KNOWN[{rule!r}]: {sorted(gone)}"


def prints() -> dict[str, str]:
    printing = {"print", "click.echo", "click.secho", "sys.stdout.write", "sys.stderr.write",
                "sys.stdout.buffer.write", "input"}  # fmt: skip
    found = {}
    for module in modules():
        if _in(module, FACES):
            continue
        for node in ast.walk(tree(module)):
            if isinstance(node, ast.Call) and (call := dotted(node.func)) in printing:
                found[f"{module} {call}"] = f"{module}:{node.lineno} {call}"
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                hit = next(
                    (n for n in names if n.split(".")[0] in ("click", "prompt_toolkit")), None
                )
                if hit:
                    found[f"{module} imports {hit.split('.')[0]}"] = f"{module}:{node.lineno} {hit}"
    return found


def arrows() -> dict[str, str]:
    found = {}
    for edge in edges():
        source, target = edge.source.split(".")[0], edge.target.split(".")[0]
        face = _in(edge.target, FACES) and not _in(edge.source, FACES)
        if (target != source and target not in MAY_IMPORT[source]) or face:
            found[f"{edge.source} -> {edge.target}"] = f"{edge.source}:{edge.line} -> {edge.target}"
        rank_s, rank_t = _rank(edge.source), _rank(edge.target)
        key = (edge.source, edge.target)
        upward = rank_s is not None and rank_t is not None and rank_t > rank_s
        if upward and key not in LAYER_EXCEPTIONS:
            found[f"{edge.source} -> {edge.target}"] = (
                f"{edge.source}:{edge.line} -> {edge.target} (up)"
            )
    return found


def _rank(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.get(parts[1]) if parts[0] == "shep" and len(parts) > 1 else None


def private() -> dict[str, str]:
    found = {
        f"{e.source} {name} from {e.target}": f"{e.source}:{e.line} {name} from {e.target}"
        for e in edges()
        for name in e.names
        if name.startswith("_") and not name.startswith("__")
    }
    for e in edges():  # a _module is private to its package
        leaf = e.target.rpartition(".")[2]
        private_module = leaf.startswith("_") and not leaf.startswith("__")
        if private_module and e.source.rpartition(".")[0] != e.target.rpartition(".")[0]:
            found[f"{e.source} -> {e.target}"] = f"{e.source}:{e.line} -> {e.target}"
    for module in modules():
        for node in ast.walk(tree(module)):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
                continue
            owner = ast.unparse(node.value)
            if node.attr.startswith("__") or node.attr in PUBLIC_UNDERSCORE:
                continue
            if owner in ("self", "cls", "super()"):
                continue
            found[f"{module} {owner}.{node.attr}"] = f"{module}:{node.lineno} {owner}.{node.attr}"
    return found


def procs() -> dict[str, str]:
    found = {}
    for module in modules():
        if module == PROCS:
            continue
        for node in ast.walk(tree(module)):
            text = node.value if isinstance(node, ast.Constant) else None
            if isinstance(text, str) and text.startswith("/proc"):
                found[f"{module} {text}"] = f"{module}:{node.lineno} {text!r}"
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                if any(n.split(".")[0] == "psutil" for n in names):
                    found[f"{module} imports psutil"] = f"{module}:{node.lineno} psutil"
    return found


#: The enums that say the status words, by the file that defines them.
STATUS_ENUMS = {
    "events/run_status.py": ("RunStatus", "NodeStatus"),
    "events/inbox_status.py": ("ItemStatus", "ItemKind"),
    "events/supervisor.py": ("Autonomy", "SupervisorVerdict"),
}
#: Words that were status words once and must not come back.
OLD_WORDS = frozenset({"granted"})
#: What the agent CLIs print has statuses of its own ("completed", "failed"): not shep's.
FOREIGN_WORDS = ("shep.agents",)
#: A comparison is about a status when an operand that is not a literal names one.
_ABOUT_STATUS = re.compile(r"status|kind|verdict|autonomy|decision|effect|where", re.IGNORECASE)
_SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE)\b")


@cache
def status_words() -> frozenset[str]:
    """Every value of the status enums, read from their class bodies."""
    found = set(OLD_WORDS)
    for path, classes in STATUS_ENUMS.items():
        for node in ast.walk(ast.parse((ROOT / path).read_text())):
            if isinstance(node, ast.ClassDef) and node.name in classes:
                for item in node.body:
                    if isinstance(item, ast.Assign) and isinstance(item.value, ast.Constant):
                        found.add(item.value.value)
    return frozenset(found)


def _literals(node: ast.expr) -> list[str]:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        return [w for e in node.elts for w in _literals(e)]
    return []


def words(root: Path = ROOT) -> dict[str, str]:
    """Bare status words: in a comparison with a status (``x.status == "pending"``), or
    quoted in an SQL statement (``WHERE status='pending'``; bind the enum's value, or put
    it in with an f-string where SQLite needs the literal, as a partial index does)."""
    said = status_words()
    quoted = re.compile("'(" + "|".join(sorted(said)) + ")'")
    found = {}
    for module, path in modules().items():
        if _in(module, FOREIGN_WORDS):
            continue
        source = root / path.relative_to(ROOT)
        for node in ast.walk(ast.parse(source.read_text(), str(source))):
            hits: list[str] = []
            if isinstance(node, ast.Compare):
                operands = [node.left, *node.comparators]
                named = [ast.unparse(o) for o in operands if not _literals(o)]
                if any(_ABOUT_STATUS.search(n) for n in named):
                    hits = [w for o in operands for w in _literals(o) if w in said]
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                hits = quoted.findall(node.value) if _SQL.search(node.value) else []
            for word in hits:
                found[f"{module} {word}"] = f"{module}:{node.lineno} {word!r}"
    return found


def test_only_faces_print_or_import_click() -> None:
    """No module outside the faces imports click or prompt-toolkit, or writes to a terminal."""
    _ratchet("prints", prints())


def test_no_import_cycles() -> None:
    """No two files import each other, directly or around a circle, however lazily."""
    _ratchet("cycles", {" ".join(c): " <-> ".join(c) for c in cycles()})


def test_arrows_point_one_way() -> None:
    """events <- commands, projections <- shep; inside shep, layers point down; faces on top."""
    _ratchet("arrows", arrows())


def sizes() -> dict[str, str]:
    lines = {m: len(p.read_text().splitlines()) for m, p in modules().items()}
    return {m: f"{m}: {n} lines" for m, n in lines.items() if n > MAX_LINES}


def test_no_module_over_600_lines() -> None:
    """Modules are split by meaning before they grow past 600 lines."""
    _ratchet("sizes", sizes())


def test_no_private_names_across_modules() -> None:
    """A name is public or private to its module: no ``from m import _x``, no ``other._x``
    (namedtuple's ``_make``/``_replace`` and ``super()._x`` excepted); a ``_module`` is
    imported only by its own package."""
    _ratchet("private", private())


def test_status_words_are_said_once() -> None:
    """Run, node, inbox item and autonomy statuses are compared and written through their
    enums (``events.run_status``, ``events.inbox_status``, ``events.supervisor``), so that a
    word cannot drift apart between the writer and a reader ("granted" and "approved")."""
    _ratchet("words", words())


#: A module as the status word rule must judge it: two bare words, and two that are not.
_BARE_WORDS = '''
def f(row, conn):
    """Rows that are pending, or keys named waiting."""
    keys = [k for k in row if k not in ("tasks", "waiting")]
    if row["status"] == "pending":
        conn.execute("SELECT 1 FROM inbox WHERE status!='approved'")
    return keys
'''


def test_the_status_word_rule_sees_a_bare_word(tmp_path: Path) -> None:
    """The rule is not vacuous: the words are read from the enums, and a bare word in a
    comparison with a status or in an SQL statement is found, while the same word as a
    dict key or in prose is not."""
    assert {"pending", "waiting_approval", "stopped", "approved", "cosign"} <= status_words()
    module = "projections.queries"
    for name, path in modules().items():
        target = tmp_path / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(_BARE_WORDS if name == module else "")
    assert sorted(words(tmp_path)) == [f"{module} approved", f"{module} pending"]


def test_only_procs_reads_processes() -> None:
    """psutil and /proc are read in one module, so shep runs where psutil does."""
    _ratchet("procs", procs())


#: Folders under tests/ that are no code package, each with its reason; an entry covers the
#: folders below it. Every other folder mirrors one: tests/shep/runs tests shep/runs.
TEST_FOLDERS_OF_THEIR_OWN = {
    "cli": "whole-CLI tests: `shep` run as a subprocess, across packages",
    "support": "test tooling shared by several folders (fake LLM, corpus, PostgreSQL server)",
    "shep/web/browser": "Chromium, started once for its package of tests",
    "shep/agents/samples": "captured agent CLI output (data)",
    "shep/agents/fakes": "the fake agent CLI, run as a subprocess",
    "events/stores": "stores written by older releases (data)",
}
#: Files at the top of tests/: the shared fixtures and the checks of the whole repository.
TEST_ROOT_FILES = {"__init__.py", "conftest.py", "README.md", "test_layout.py",
                   "test_readme_install.py"}  # fmt: skip


def stray_test_folders() -> dict[str, str]:
    tests = ROOT / "tests"
    found = {}
    for folder in sorted(p for p in tests.rglob("*") if p.is_dir()):
        rel = folder.relative_to(tests)
        if any(part.startswith((".", "__")) for part in rel.parts):
            continue  # __pycache__, .pytest_cache
        if not any(f.is_file() for f in folder.rglob("*") if "__pycache__" not in f.parts):
            continue  # what a moved folder leaves in a checkout: bytecode git does not track
        if any(
            rel.as_posix() == k or rel.as_posix().startswith(k + "/")
            for k in TEST_FOLDERS_OF_THEIR_OWN
        ):
            continue
        if not (ROOT / rel / "__init__.py").is_file():
            found[rel.as_posix()] = f"tests/{rel.as_posix()}: no package {rel.as_posix()}/"
    for path in sorted(tests.iterdir()):
        if path.is_file() and path.name not in TEST_ROOT_FILES:
            found[path.name] = f"tests/{path.name}: a file at the top of tests/"
    return found


def test_tests_mirror_the_code() -> None:
    """Each folder under tests/ is a code package's (tests/shep/runs for shep/runs) or one of
    the few of their own (whole-CLI tests, shared tooling); a new folder must be one of them."""
    found = stray_test_folders()
    assert not found, f"tests/ does not mirror the code here: {sorted(found.values())}"


if __name__ == "__main__":  # the current violations, to fill KNOWN: python tests/test_layout.py
    for rule, found in (
        ("prints", prints()),
        ("cycles", {" ".join(c): "" for c in cycles()}),
        ("arrows", arrows()),
        ("sizes", sizes()),
        ("private", private()),
        ("procs", procs()),
        ("words", words()),
    ):
        print(rule, sorted(found))
