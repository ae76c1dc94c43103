"""The package's layout: no import cycles (module-level or inside functions), imports that
go one way only, down the layers of subpackages (docs/architecture.md), no module over
500 lines, and no tracked file that points outside the repository."""
import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "spacy_maral"
MAX_LINES = 500
# a path that leaves the repository: the workplace's shared folder, or an absolute path to it
# The layers of the package, lowest first: a module imports modules of its own layer and
# of the layers below it, never of a layer above (module level or inside a function). A
# layer is a subpackage, or the package's top-level modules that every layer may use.
LAYERS: List[Tuple[str, ...]] = [
    ("about", "util", "fileio", "fingerprint", "threads", "prf"),  # shared helpers
    ("corpora",),
    ("ml",),
    ("adaptation",),  # stage 2's state: maral_ner holds it
    ("pipeline",),
    ("evaluation",),
    ("inference",),
    ("training",),
    ("workflow",),
    ("encoders",),
    ("cli",),  # python -m spacy_maral
    ("bench",),  # python -m spacy_maral.bench, the benchmark project's tools (on cli's app layout)
    ("", "__main__"),  # the package itself and `python -m spacy_maral` (registrations come through entry points)
]
OUTSIDE = re.compile("|".join([r"\.\./" + "shared", "/" + "work/", r"parents?\b[^\n]*/ *\"" + "shared", "file:" + r"///\w"]))


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def import_graph(package: Path) -> Dict[str, Set[str]]:
    """module -> the package's modules it imports, anywhere in its code (functions too).

    `from a.b import c` counts as an import of a.b.c when that is a module, else of a.b.
    """
    modules = {module_name(p): p for p in package.rglob("*.py")}
    graph: Dict[str, Set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf8"))):
            targets: List[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".") if is_package else name.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join(anchor + ([base] if base else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                if target in modules and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One import cycle (a list of modules, the first repeated at the end), or []."""
    state: Dict[str, int] = {}
    stack: List[str] = []

    def visit(node: str) -> List[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_cycle_finder_finds_a_cycle_inside_a_function(tmp_path: Path) -> None:
    pkg = tmp_path / "spacy_maral"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from spacy_maral.sub.b import f\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from . import a\n")
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        assert find_cycle(import_graph(pkg)) == ["spacy_maral.sub.a", "spacy_maral.sub.b", "spacy_maral.sub.a"]
        (pkg / "sub" / "b.py").write_text("def f():\n    pass\n")
        assert find_cycle(import_graph(pkg)) == []
    finally:
        ROOT = old


def test_no_import_cycles() -> None:
    cycle = find_cycle(import_graph(PACKAGE))
    assert not cycle, "import cycle: " + " -> ".join(cycle)


def layer_of(module: str) -> int:
    """The rank of a module's layer in LAYERS (0: the lowest); KeyError for a module of
    no layer."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    for rank, names in enumerate(LAYERS):
        if top in names:
            return rank
    raise KeyError(f"{module} is in no layer: add {top!r} to LAYERS in tests/test_layout.py (and docs/architecture.md)")


def upward_imports(graph: Dict[str, Set[str]]) -> List[str]:
    """Every import of a module of a higher layer than the importer's, as text."""
    return sorted(
        f"{a} ({'/'.join(LAYERS[layer_of(a)]) or 'the package'}) imports {b} ({'/'.join(LAYERS[layer_of(b)])})"
        for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a)
    )


def test_layer_check_finds_an_upward_import_inside_a_function(tmp_path: Path) -> None:
    pkg = tmp_path / "spacy_maral"
    for sub in ("ml", "cli"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "cli" / "run.py").write_text("from spacy_maral.ml.model import f\n")
    (pkg / "ml" / "model.py").write_text("def f():\n    from spacy_maral.cli import run\n")
    global ROOT
    old, ROOT = ROOT, tmp_path
    try:
        assert upward_imports(import_graph(pkg)) == ["spacy_maral.ml.model (ml) imports spacy_maral.cli.run (cli)"]
        (pkg / "ml" / "model.py").write_text("def f():\n    pass\n")
        assert upward_imports(import_graph(pkg)) == []
    finally:
        ROOT = old


def test_every_module_is_in_a_layer() -> None:
    for module in import_graph(PACKAGE):
        layer_of(module)  # KeyError names the module


def test_imports_go_down_the_layers() -> None:
    upward = upward_imports(import_graph(PACKAGE))
    assert not upward, "imports of a higher layer (see LAYERS):\n" + "\n".join(upward)


# the modules whose signatures are the engines' and the partition runner's contract: typed, no Any
TYPED_SIGNATURES = ("spacy_maral/inference/engines", "spacy_maral/inference/runner.py")


def any_in_signatures(path: Path) -> List[str]:
    """The functions of a module with `Any` in a parameter's or the return's annotation."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf8"))):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            params = [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, [args.vararg, args.kwarg])]
            annotations = [a.annotation for a in params if a.annotation is not None] + ([node.returns] if node.returns else [])
            names = {n.id for a in annotations for n in ast.walk(a) if isinstance(n, ast.Name)}
            names |= {n.attr for a in annotations for n in ast.walk(a) if isinstance(n, ast.Attribute)}
            if "Any" in names:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    return found


def test_engine_and_runner_signatures_have_no_any() -> None:
    paths = [p for where in TYPED_SIGNATURES for p in sorted((ROOT / where).rglob("*.py") if (ROOT / where).is_dir() else [ROOT / where])]
    found = [hit for path in paths for hit in any_in_signatures(path)]
    assert paths and not found, "Any in an engine's or the runner's signature: " + ", ".join(found)


def test_no_module_over_500_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py") if (n := len(p.read_text(encoding="utf8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def tracked_files() -> List[Path]:
    try:
        out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout")
    return [ROOT / line for line in out.splitlines() if line]


def test_no_tracked_file_points_outside_the_repository() -> None:
    outside = []
    for path in tracked_files():
        if not path.is_file() or path.suffix in {".png", ".spacy", ".parquet"}:
            continue
        text = path.read_text(encoding="utf8", errors="replace")
        for n, line in enumerate(text.splitlines(), start=1):
            if OUTSIDE.search(line):
                outside.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not outside, "paths outside the repository:\n" + "\n".join(outside[:30])


def test_outside_pattern_catches_the_forms_seen() -> None:
    assert OUTSIDE.search("summarised in " + "../" + "shared/docs/METHOD.md")
    assert OUTSIDE.search('SHARED = REPO.parent / "' + 'shared" / "data"')
    assert OUTSIDE.search("cd /" + "work/main")
    assert OUTSIDE.search("TORCH_INDEX=file:" + "///opt/pypi/simple")  # a machine's own files
    assert not OUTSIDE.search("the trainings' shared overrides")


# user-facing text speaks of the product and dated results, never of work sessions or issues
WORK_HISTORY = re.compile(r"\bsessions?\b|\bissue[ -]?#?\d+|\bissue\d+|#\d+\b", re.IGNORECASE)
USER_FACING = ("README.md", "BENCHMARKS.md", "docs", "configs", "project")


def test_no_work_history_in_user_facing_text() -> None:
    hits = []
    for path in tracked_files():
        rel = path.relative_to(ROOT)
        if not path.is_file() or rel.parts[0] not in USER_FACING or path.suffix in {".spacy", ".png"}:
            continue
        for n, line in enumerate(path.read_text(encoding="utf8", errors="replace").splitlines(), start=1):
            if WORK_HISTORY.search(line):
                hits.append(f"{rel}:{n}: {line.strip()[:100]}")
    assert not hits, "work-history wording:\n" + "\n".join(hits[:30])


def test_work_history_pattern() -> None:
    assert WORK_HISTORY.search("measured in session 3") and WORK_HISTORY.search("see issue 13")
    assert WORK_HISTORY.search("runs/issue13") and WORK_HISTORY.search("Sessions")
    assert not WORK_HISTORY.search("the issues tracker") and not WORK_HISTORY.search("a successful run")


def test_ruff_is_clean() -> None:
    """The code passes the linter that pyproject.toml configures (ruff: pycodestyle,
    pyflakes, isort, bugbear), installed with the dev extra."""
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "spacy_maral", "tests", "benchmarks"],
                          cwd=str(ROOT), capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-1000:]


def _entry_points() -> dict:
    tree = ast.parse((ROOT / "setup.py").read_text(encoding="utf8"))
    call = next(n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "setup")
    return ast.literal_eval(next(k.value for k in call.keywords if k.arg == "entry_points"))


def test_entry_points_name_the_registered_functions() -> None:
    """Every function that setup.py's entry points name is the one the registry holds under
    that name: spaCy finds them there without importing the package (an installed
    pipeline's `[components.transformer.model]` is built before maral_ner is created)."""
    import importlib

    import catalogue
    from spacy.language import Language
    from spacy.util import registry

    entry_points = _entry_points()
    assert "spacy_maral.EncoderRuntime.v1" in str(entry_points) and "spacy_maral.encoder_windows.v1" in str(entry_points)
    for group, lines in entry_points.items():
        for line in lines:
            name, target = (part.strip() for part in line.split("="))
            module, attr = target.split(":")
            function = getattr(importlib.import_module(module), attr)
            if group == "spacy_factories":
                assert Language.get_factory_meta(name).factory == name
                continue
            kind = getattr(registry, group.split("_", 1)[1])
            assert kind.get(name) is function, line
            # and the decorator in the code registers that function (get() prefers the entry point)
            assert catalogue.REGISTRY.get((*kind.namespace, name)) is function, f"{line}: the code registers another function"


def test_every_registered_name_is_found_through_its_entry_point_without_an_import() -> None:
    """`import spacy_maral` registers nothing (it imports nothing heavy): in a process that
    never imports the package, spaCy's registries find every name the package registers,
    through the entry point of the group they read (thinc's `thinc_layers` for layers)."""
    import importlib
    import pkgutil

    from spacy.util import registry

    import spacy_maral

    for module in pkgutil.walk_packages(spacy_maral.__path__, "spacy_maral."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)  # every registration made
    names = sorted(
        (kind, name)
        for kind in registry.get_registry_names()
        for name, func in getattr(registry, kind).get_all().items()
        if name.startswith("spacy_maral.") or getattr(func, "__module__", "").startswith("spacy_maral.")
    )
    assert len(names) >= 14 and ("layers", "spacy_maral.first_subword.v1") in names, names
    code = (
        "import json, spacy\n"
        "from spacy.util import registry\n"
        "spacy.blank('xx')  # a Language reads the factories' entry points, as spacy.load does\n"
        "found = {}\n"
        f"for kind, name in {names!r}:\n"
        "    try:\n"
        "        found[kind + ' ' + name] = getattr(registry, kind).get(name).__module__.startswith('spacy_maral.')\n"
        "    except Exception as err:\n"
        "        found[kind + ' ' + name] = str(err)[:100]\n"
        "print(json.dumps(found))\n"
    )
    env = {**os.environ, "PYTHONPATH": ""}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/", env=env, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    found = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(found) == len(names) and {name: ok for name, ok in found.items() if ok is not True} == {}
