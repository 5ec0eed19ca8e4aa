"""The package's shape, checked: no import cycles, layers that only import downwards, the method
switch only inside ``satseq/methods/``, and docs/design.md's layout table naming real modules.

The import graph counts every ``import`` statement, at module level or inside a function (a lazy
import is still a dependency), except under ``if TYPE_CHECKING:``. Plugin discovery through
``importlib`` (the method registry finding ``satseq/methods/<name>/method.py``) is not a static
import and is not an edge.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "satseq"
REPO = PKG.parent


def _module_name(path: Path) -> str:
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


MODULES = {_module_name(p): p for p in PKG.rglob("*.py")}


def _resolve(name: str) -> str | None:
    """The satseq module an imported dotted name refers to (longest existing prefix)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def _in_type_checking(node, parents) -> bool:
    p = parents.get(node)
    while p is not None:
        if isinstance(p, ast.If) and "TYPE_CHECKING" in ast.unparse(p.test):
            return True
        p = parents.get(p)
    return False


def import_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for mod, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        is_pkg = path.name == "__init__.py"
        deps: set[str] = set()
        for node in ast.walk(tree):
            if _in_type_checking(node, parents):
                continue
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = mod.split(".") if is_pkg else mod.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                names = [f"{base}.{a.name}" for a in node.names] + [base]
            for n in names:
                if n.startswith("satseq"):
                    target = _resolve(n)
                    if target and target != mod:
                        deps.add(target)
        graph[mod] = deps
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_graph_sees_lazy_imports():
    g = import_graph()
    assert "satseq.registry" in g["satseq.loop"]            # module level
    assert "satseq.registry" in g["satseq.config.loader"]    # inside finalize()


def test_no_import_cycles():
    assert _cycles(import_graph()) == []


def _reaches(graph, start: str, prefix: str) -> list[str]:
    return sorted(d for d in graph[start] if d == prefix or d.startswith(prefix + "."))


def test_layers_only_import_downwards():
    g = import_graph()
    records = [m for m in g if m == "satseq.records"]
    assert records and not g["satseq.records"], "records import nothing from satseq"
    for mod, deps in g.items():
        bad = []
        if mod.startswith("satseq.algos"):
            bad += _reaches(g, mod, "satseq.methods")               # formulas never import methods
        if mod.startswith(("satseq.workflows", "satseq.update", "satseq.rollout", "satseq.rewards", "satseq.data")):
            bad += _reaches(g, mod, "satseq.eval") + _reaches(g, mod, "satseq.loop")
            bad += [d for d in deps if d.startswith("satseq.methods")]
        if mod == "satseq.plotting.common":
            bad += sorted(deps)                                     # the plotting helpers stand alone
        if mod.startswith("satseq.envs"):
            bad += _reaches(g, mod, "satseq.methods") + _reaches(g, mod, "satseq.loop")  # an episode, not an update
        if mod.startswith("satseq.methods.") and mod.count(".") >= 2 and not mod.startswith("satseq.methods.base"):
            own = ".".join(mod.split(".")[:3])                      # no method imports another method
            bad += [d for d in _reaches(g, mod, "satseq.methods") if d != "satseq.methods.base"
                    and not d.startswith(own + ".") and d != own]
        assert not bad, f"{mod} imports upwards: {bad}"


def test_method_switch_lives_only_in_methods():
    pattern = re.compile(r"method ==|method in \(")
    hits = [f"{p.relative_to(REPO)}:{i}" for p in PKG.rglob("*.py") for i, line in
            enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pattern.search(line)]
    assert all(h.startswith("satseq/methods/") for h in hits), hits


def test_design_table_matches_the_code():
    """Every module or folder docs/design.md's layout table names exists, and every module of the
    package appears in the table (as itself or through its folder)."""
    text = (REPO / "docs" / "design.md").read_text(encoding="utf-8")
    table = text[text.index("| step |"): text.index("\n\n", text.index("| step |"))]
    named = set(re.findall(r"`(satseq/[\w/]+(?:\.py)?/?)`", table))
    assert named
    missing = sorted(n for n in named if not (REPO / n).exists())
    assert not missing, f"docs/design.md names files that do not exist: {missing}"
    folders = {n.rstrip("/") for n in named if not n.endswith(".py")}
    files = {n for n in named if n.endswith(".py")}
    unlisted = []
    for p in PKG.rglob("*.py"):
        rel = str(p.relative_to(REPO))
        if p.name == "__init__.py" or rel in files:
            continue
        if any(rel.startswith(f + "/") for f in folders):
            continue
        unlisted.append(rel)
    assert not unlisted, f"modules missing from docs/design.md's layout table: {sorted(unlisted)}"


def _code_without_docs(path: Path) -> str:
    """A module's code with its docstrings and comments removed (names in prose do not count)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            body[0] = ast.Pass()
    return ast.unparse(tree)


def test_distribution_lives_only_in_the_strategy():
    """The loop, the updaters, the checkpoint code and the methods ask the run's Strategy
    (satseq/strategy.py) and import nothing from satseq/scale/ (module level or lazily)."""
    g = import_graph()
    for mod, deps in g.items():
        if mod in ("satseq.loop", "satseq.checkpoint") or mod.startswith(("satseq.update", "satseq.methods")):
            assert not _reaches(g, mod, "satseq.scale"), f"{mod} imports {_reaches(g, mod, 'satseq.scale')}"
    assert not _reaches(g, "satseq.strategy", "satseq.scale")  # the contract sits below its implementations


def test_scale_names_no_method():
    """satseq/scale/ imports no method and names none in its code: a strategy runs any method's
    updater through the public contracts (Method.build_updater / build_agent_updater, AgentSteps)."""
    from satseq.registry import method_names

    g = import_graph()
    names = [n for n in method_names() if n != "toy_reinforce"]
    pattern = re.compile(r"\b(" + "|".join(map(re.escape, names)) + r")\b|StageCoordinator|\bSatSeq\b|\bGRPO\b")
    for p in sorted((PKG / "scale").glob("*.py")):
        mod = _module_name(p)
        assert not _reaches(g, mod, "satseq.methods"), f"{mod} imports {_reaches(g, mod, 'satseq.methods')}"
        hits = [line for line in _code_without_docs(p).splitlines() if pattern.search(line)]
        assert not hits, f"{p.relative_to(REPO)} names a method: {hits[:3]}"


# ------------------------------------------------------------------ a method is one folder
METHOD_DIRS = sorted(p.parent.name for p in (PKG / "methods").glob("*/method.py"))
# A method built on another one imports it (a baseline that is SAT-Seq's relay with another update,
# PAG's A*-PO update, the PAG/A*-PO/GRPO dashboard layout). Listed, so that a new edge is a choice.
METHOD_ON_METHOD = {("grpo", "pag"), ("pag", "apo"), ("shared_policy", "simultaneous"), ("simultaneous", "sat_seq")}


def _method_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[:2] == ["satseq", "methods"] and parts[2] in METHOD_DIRS else None


def test_only_a_method_imports_its_own_package():
    """No module outside ``satseq/methods/<name>/`` imports ``satseq.methods.<name>`` (the registry
    finds the methods through ``importlib``, which is not an edge); a method imports another only
    along the listed edges."""
    assert {"sat_seq", "grpo", "apo", "pag", "mlmt"} <= set(METHOD_DIRS)
    bad = []
    for mod, deps in import_graph().items():
        for d in deps:
            target, own = _method_of(d), _method_of(mod)
            if target is None or target == own:
                continue
            if own is None or (own, target) not in METHOD_ON_METHOD:
                bad.append(f"{mod} -> {d}")
    assert not bad, f"modules importing a method's package from outside it: {sorted(bad)}"


def test_the_registry_finds_methods_without_importing_them():
    g = import_graph()
    assert not [d for d in g["satseq.registry"] if _method_of(d)]
    assert "importlib.import_module" in (PKG / "registry.py").read_text(encoding="utf-8")


def test_the_config_schema_names_no_method():
    """``satseq/config/schema.py`` imports no method, and no name, string or attribute in its code is a
    method's name or a method's config section: the sections are mounted through the registry."""
    from satseq.config.schema import method_sections
    from satseq.registry import method_names

    names = set(method_names()) | {key for key, *_ in method_sections()} | set(METHOD_DIRS)
    tree = ast.parse((PKG / "config" / "schema.py").read_text(encoding="utf-8"))
    docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                  if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)) and n.body
                  and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            hits += [f"import {m}" for m in mods if m.startswith("satseq.methods")]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            hits += [f"{node.lineno}: {node.value!r}" for n in names if node.value == n]
        elif isinstance(node, ast.Attribute) and node.attr in names:
            hits.append(f"{node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Name) and node.id in names:
            hits.append(f"{node.lineno}: {node.id}")
    assert not hits, f"satseq/config/schema.py names methods: {hits}"
    assert not [d for d in import_graph()["satseq.config.schema"] if d.startswith("satseq.methods")]
