"""The import graph of tracekern/, built from the source with `ast`: no cycle, no import of a
tracekern module inside a function (where a cycle would hide), and the layers point one way.

Optional dependencies (numba.cuda, dask, distributed, matplotlib) may be imported in functions: they
are not tracekern modules. The backend registry loads a backend's module when it is first used; its
module names count as edges of the graph. Nothing outside backends/ compares a backend's name with
"cuda": it asks the backends (backends.on_device)."""
import ast
import pathlib
import textwrap

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def module_files(package_dir: pathlib.Path) -> dict[str, pathlib.Path]:
    out = {}
    for path in package_dir.rglob("*.py"):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _target(module: str, node: ast.AST, is_package: bool, known: dict) -> list[str]:
    """The modules an import statement names (a `from package import module` names the module)."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level:
        base = base[: len(base) - (node.level - 1)]
        prefix = ".".join(base + ([node.module] if node.module else []))
    else:
        prefix = node.module
    return [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in known else prefix for a in node.names]


def import_graph(package_dir: pathlib.Path):
    """(edges: module -> set of modules it imports when it is imported, function_level: list of
    (module, line, imported module) for tracekern imports inside functions)."""
    known = module_files(package_dir)
    root = package_dir.name
    edges = {m: set() for m in known}
    function_level = []
    for module, path in known.items():
        tree = ast.parse(path.read_text(), str(path))
        is_package = path.name == "__init__.py"

        def visit(node, in_function):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in _target(module, child, is_package, known):
                        if target != root and not target.startswith(root + "."):
                            continue
                        while target not in known and "." in target:
                            target = target.rsplit(".", 1)[0]
                        if in_function:
                            function_level.append((module, child.lineno, target))
                        else:
                            edges[module].add(target)
                            # importing a.b.c runs the packages a.b and a first, unless this module
                            # is inside them (then they are being imported already)
                            parent = target.rsplit(".", 1)[0] if "." in target else None
                            while parent and parent != root:
                                if not (module == parent or module.startswith(parent + ".")):
                                    edges[module].add(parent)
                                parent = parent.rsplit(".", 1)[0] if "." in parent else None
                elif isinstance(child, ast.Constant) and isinstance(child.value, str) and "." in child.value \
                        and child.value in known and child.value != module:   # (a module naming itself: no edge)
                    edges[module].add(child.value)   # a module loaded by its dotted name (the backend registry)
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

        visit(tree, False)
    return edges, function_level


def find_cycle(edges: dict) -> list[str] | None:
    """One cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def dfs(m):
        state[m] = 1
        stack.append(m)
        for n in sorted(edges.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n):] + [n]
            if n not in state:
                found = dfs(n)
                if found:
                    return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(edges):
        if m not in state:
            found = dfs(m)
            if found:
                return found
    return None


EDGES, FUNCTION_LEVEL = import_graph(ROOT / "tracekern")


def test_no_function_level_import_of_a_tracekern_module():
    assert not FUNCTION_LEVEL, "imports inside functions: " + ", ".join(f"{m}:{line} imports {t}"
                                                                         for m, line, t in FUNCTION_LEVEL)


def test_no_import_cycle():
    cycle = find_cycle(EDGES)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def reaches(start: str, edges: dict) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        m = todo.pop()
        for n in edges.get(m, ()):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


# module -> rooms it must never import, directly or through others: the pipeline runs one way,
# ir <- primitives <- trace <- autodiff / remat / passes <- api; backends render finished graphs
LAYERS = {
    "tracekern.ir": ["tracekern.primitives", "tracekern.trace"],
    "tracekern.primitives": ["tracekern.trace", "tracekern.autodiff", "tracekern.numpy", "tracekern.passes",
                             "tracekern.api", "tracekern.backends"],
    "tracekern.passes": ["tracekern.trace", "tracekern.autodiff", "tracekern.api"],
    "tracekern.trace": ["tracekern.autodiff", "tracekern.remat", "tracekern.numpy", "tracekern.api",
                        "tracekern.staging", "tracekern.backends"],
    "tracekern.remat": ["tracekern.trace", "tracekern.autodiff", "tracekern.api", "tracekern.backends"],
    "tracekern.autodiff": ["tracekern.numpy", "tracekern.api", "tracekern.staging", "tracekern.backends"],
    "tracekern.forward": ["tracekern.numpy", "tracekern.api", "tracekern.staging", "tracekern.backends"],
    "tracekern.staging": ["tracekern.api", "tracekern.vectorize", "tracekern.jacobians"],
    "tracekern.api": ["tracekern.jacobians"],
    "tracekern.vectorize": ["tracekern.api", "tracekern.jacobians"],
    "tracekern.batching": ["tracekern.numpy", "tracekern.api", "tracekern.staging",
                           "tracekern.backends"],
    "tracekern.backends.fusion": ["tracekern.trace", "tracekern.autodiff", "tracekern.api", "tracekern.numpy"],
    "tracekern.backends.cpu": ["tracekern.trace", "tracekern.autodiff", "tracekern.api", "tracekern.numpy"],
    "tracekern.backends.cuda": ["tracekern.trace", "tracekern.autodiff", "tracekern.api", "tracekern.numpy"],
    "tracekern.backends.interpret": ["tracekern.trace", "tracekern.autodiff", "tracekern.api", "tracekern.numpy"],
    # the CUDA runtime and the PTX check render nothing (the runtime takes cuda_math's device functions)
    "tracekern.backends.cuda_runtime": ["tracekern.backends.cuda", "tracekern.backends.cuda_calls"],
    "tracekern.backends.ptx_check": ["tracekern.backends.render", "tracekern.backends.fusion", "tracekern.backends.cuda"],
    # a backend's rooms: the driver (cpu, cuda) over its loops compiled whole or on the device, over its kernels;
    # the cpu step's runtime renders nothing
    "tracekern.backends.cpu_runtime": ["tracekern.backends.render", "tracekern.backends.cpu", "tracekern.backends.cpu_kernels",
                                       "tracekern.backends.cpu_loops"],
    "tracekern.backends.cpu_kernels": ["tracekern.backends.cpu", "tracekern.backends.cpu_loops", "tracekern.backends.cpu_runtime"],
    "tracekern.backends.cpu_loops": ["tracekern.backends.cpu"],
    "tracekern.backends.cuda_kernels": ["tracekern.backends.cuda", "tracekern.backends.cuda_loops",
                                        "tracekern.backends.cuda_runtime"],
    "tracekern.backends.cuda_loops": ["tracekern.backends.cuda"],
}


@pytest.mark.parametrize("module", sorted(LAYERS))
def test_layers_point_one_way(module):
    below = reaches(module, EDGES) | {module}
    wrong = sorted(m for m in below for banned in LAYERS[module] if m == banned or m.startswith(banned + "."))
    assert not wrong, f"{module} imports (maybe through others) {wrong}"


def test_the_checks_catch_a_cycle_a_hidden_import_and_a_cycle_through_a_package(tmp_path):
    pkg = tmp_path / "tracekern"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "from . import a\n",
        "a.py": "from . import b\n",
        "b.py": "import numpy\n\ndef f():\n    from . import a\n    from dask import array\n    return a\n",
        "c.py": "from .sub import d\n",
        "sub/__init__.py": "from . import d, e\n",
        "sub/d.py": "X = 1\n",
        "sub/e.py": "from .. import c\n",
        "g.py": "MODULES = {'x': 'tracekern.a'}\n",
    }
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    edges, function_level = import_graph(pkg)
    assert function_level == [("tracekern.b", 4, "tracekern.a")]     # (dask is not a tracekern module)
    # c -> sub.d runs the package sub first, which imports e, which imports c
    assert find_cycle(edges) == ["tracekern.c", "tracekern.sub", "tracekern.sub.e", "tracekern.c"]
    assert "tracekern.a" in edges["tracekern.g"]
    edges["tracekern.sub.e"].clear()
    assert find_cycle(edges) is None
    edges["tracekern.a"].add("tracekern.g")
    assert find_cycle(edges) == ["tracekern.a", "tracekern.g", "tracekern.a"]


# ----------------------------------------------------------------------------- backend names


def _is_cuda(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and node.value == "cuda"


def cuda_comparisons(tree: ast.AST) -> list[int]:
    """The lines that compare something with the string "cuda": ==, !=, `in`/`not in` a tuple, list or
    set that holds it (or the string itself), and a match case on it."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, operands, operands[1:]):
                if isinstance(op, (ast.Eq, ast.NotEq, ast.Is, ast.IsNot)) and (_is_cuda(left) or _is_cuda(right)):
                    lines.append(node.lineno)
                elif isinstance(op, (ast.In, ast.NotIn)) and (_is_cuda(right) or (
                        isinstance(right, (ast.Tuple, ast.List, ast.Set)) and any(_is_cuda(e) for e in right.elts))):
                    lines.append(node.lineno)
        elif isinstance(node, ast.MatchValue) and _is_cuda(node.value):
            lines.append(node.lineno)
    return sorted(set(lines))


def test_no_cuda_string_comparison_outside_the_backends():
    """api.py, staging.py and the rest ask the backends (backends.on_device), never `backend == "cuda"`."""
    package = ROOT / "tracekern"
    outside = [path for path in sorted(package.rglob("*.py")) if (package / "backends") not in path.parents]
    assert len(outside) > 20   # (the walk found the package)
    found = [f"{path.relative_to(ROOT)}:{line}" for path in outside
             for line in cuda_comparisons(ast.parse(path.read_text(), str(path)))]
    assert not found, "comparisons with \"cuda\" outside tracekern/backends/ (ask backends.on_device): " + ", ".join(found)


def test_the_cuda_check_catches_each_form():
    source = textwrap.dedent("""
        device = backend == "cuda"
        if "cuda" != name:
            pass
        ok = name in ("cpu", "cuda")
        ok = name not in ["cuda"]
        ok = name in {"cuda"}
        match name:
            case "cuda":
                pass
        fine = name == "cpu" or "cuda" in names or label == f"{name}"
    """)
    assert cuda_comparisons(ast.parse(source)) == [2, 3, 5, 6, 7, 9]
# -- backends differ by tables ------------------------------------------------------------------------
# Dispatch on primitive names is a table look-up (a registry of kernel writers, a named set such as
# render.CONTROL): in tracekern/backends/, no `if`/`elif` chain tests a primitive's name (an expression
# ending in `.primitive.name`, or a local variable assigned from one) against a string literal (`==`/`!=`
# a str constant, `in`/`not in` a literal tuple, list or set of str), and no function has two such
# tests. One lone `if` is one question about one equation, not dispatch (cpu_runtime._gemm_macs: "is it a
# float matmul"), and so is a conditional expression choosing a value (`"sort" if ... else ...`);
# membership in a named table (`name in CONTROL`, `name in KERNELS`) is the look-up itself.


def _is_primitive_name(node: ast.AST, aliases: set[str]) -> bool:
    if isinstance(node, ast.Attribute) and node.attr == "name" and isinstance(node.value, ast.Attribute) \
            and node.value.attr == "primitive":
        return True
    return isinstance(node, ast.Name) and node.id in aliases


def _is_literal_name(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return True
    return isinstance(node, (ast.Tuple, ast.List, ast.Set)) and bool(node.elts) and all(
        isinstance(x, ast.Constant) and isinstance(x.value, str) for x in node.elts)


def _tests_a_name(test: ast.AST, aliases: set[str]) -> bool:
    for node in ast.walk(test):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(_is_primitive_name(s, aliases) for s in sides) and any(_is_literal_name(s) for s in sides):
                return True
    return False


def name_dispatch(source: str) -> list[tuple[str, list[int]]]:
    """(function, lines of its if tests on primitive names) for every function that has more than one."""
    found = []
    for fn in ast.walk(ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        aliases = {t.id for node in ast.walk(fn) if isinstance(node, ast.Assign)
                   and _is_primitive_name(node.value, set()) for t in node.targets if isinstance(t, ast.Name)}
        chained = set()   # the `if`s of if/elif chains
        for node in ast.walk(fn):
            if isinstance(node, ast.If) and len(node.orelse) == 1 and isinstance(node.orelse[0], ast.If):
                chained |= {id(node), id(node.orelse[0])}
        lines = [(node.lineno, id(node) in chained) for node in ast.walk(fn) if isinstance(node, (ast.If, ast.While))
                 and _tests_a_name(node.test, aliases)]
        if len(lines) > 1 or any(in_chain for _, in_chain in lines):
            found.append((fn.name, sorted(line for line, _ in lines)))
    return found


@pytest.mark.parametrize("path", sorted((ROOT / "tracekern" / "backends").glob("*.py")), ids=lambda p: p.name)
def test_backends_dispatch_by_tables_not_by_name_chains(path):
    found = name_dispatch(path.read_text())
    assert not found, f"{path.name}: if/elif on primitive names (register the primitive instead): {found}"


def test_the_name_dispatch_check_catches_a_chain_and_allows_tables():
    chain = textwrap.dedent("""
        def call(self, k):
            name = k.eqn.primitive.name
            if name == "matmul":
                pass
            elif name in ("concatenate", "unslice"):
                pass
        def two_ifs(e):
            if e.primitive.name == "print":
                return 1
            if e.primitive.name != "cond":
                return 2
        def one_in_a_chain(self, e):
            if e.primitive.name in CONTROL:
                pass
            elif e.primitive.name == "print":
                pass
        """)
    assert name_dispatch(chain) == [("call", [4, 6]), ("two_ifs", [9, 11]), ("one_in_a_chain", [16])]
    allowed = textwrap.dedent("""
        def call(self, k):
            name = k.eqn.primitive.name
            if name in CONTROL:
                pass
            elif name in KERNELS:
                KERNELS[name](self, k)
            x = "a" if name == "sort" else "b"
            if k.eqn.primitive.name == "matmul" and k.eqn.outputs[0].dtype.kind == "f":
                return x
            if k.eqn.outputs[0].dtype.name == "float32":
                return x
        """)
    assert name_dispatch(allowed) == []
