"""Export a reference kernel package as one self-contained contest submission file.

``python -m reference_kernels.export blocked_wy -o PATH`` inlines the modules the package lists in
``EXPORT_MODULES`` (dependency order; a package built on another starts its list with the other's),
removes the imports between them, and appends ``custom_kernel`` calling the package's ``qr``.

The modules share one namespace in the output, so a top-level name a module binds that an earlier
module already bound is renamed in the later module (``name__package_module``), and a name imported
from another listed module is rewritten to that module's final name. The renaming follows Python's
scoping (``symtable``): a function parameter or local of the same name is left alone. Source text is
otherwise copied verbatim, which Triton needs: it compiles kernels from their source.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import re
import symtable
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ExportError", "export_source", "main"]

PACKAGE = "reference_kernels"


class ExportError(Exception):
    """A package that cannot be flattened into one file; the message says why."""


@dataclass(frozen=True)
class _Module:
    name: str
    source: str
    tree: ast.Module


def _load(name: str) -> _Module:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ExportError(f"module {name} not found")
    source = Path(spec.origin).read_text()
    return _Module(name, source, ast.parse(source))


def _is_internal(node: ast.stmt) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == PACKAGE
    return isinstance(node, ast.Import) and any(a.name.split(".")[0] == PACKAGE for a in node.names)


def _bound_names(node: ast.stmt) -> list[str]:
    """Top-level names a statement binds (imports excluded)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [node.name]
    targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
    return [n.id for t in targets if t is not None for n in ast.walk(t) if isinstance(n, ast.Name)]


def _import_names(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.asname or a.name.split(".")[0] for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module != "__future__":
        return [a.asname or a.name for a in node.names]
    return []


def _definer(module: str, name: str) -> tuple[str, str]:
    """(module, name) where ``from module import name`` is defined, following package re-exports."""
    obj = getattr(importlib.import_module(module), name)
    owner, own_name = getattr(obj, "__module__", None), getattr(obj, "__name__", None)
    if owner is None or own_name is None or importlib.util.find_spec(module).submodule_search_locations is None:
        return module, name
    return owner, own_name


def _position(lines: list[str], lineno: int, byte_col: int) -> tuple[int, int]:
    """(line index, character column) of an AST position (AST columns count UTF-8 bytes)."""
    line = lines[lineno - 1]
    return lineno - 1, len(line.encode()[:byte_col].decode())


class _Spans(ast.NodeVisitor):
    """Positions of every identifier that refers to one of ``names`` at module scope."""

    def __init__(self, source: str, names: set[str]) -> None:
        self.lines = source.splitlines(keepends=True)
        self.names = names
        self.table = symtable.symtable(source, "<export>", "exec")
        self.spans: list[tuple[int, int, str]] = []

    def _refers_globally(self, name: str) -> bool:
        if self.table.get_type() == "module":
            return True
        try:
            return self.table.lookup(name).is_global()
        except KeyError:
            return True  # not bound here: resolved outward, so global unless an enclosing function binds it

    def _add(self, lineno: int, col: int, name: str) -> None:
        self.spans.append((*_position(self.lines, lineno, col), name))

    def _add_keyword_name(self, node: ast.stmt, keyword: str, name: str) -> None:
        line = self.lines[node.lineno - 1]
        match = re.compile(rf"\b{keyword}\s+({re.escape(name)})\b").search(line)
        if match is None:
            raise ExportError(f"cannot locate `{keyword} {name}` on line {node.lineno}")
        self.spans.append((node.lineno - 1, match.start(1), name))

    def _enter(self, node: ast.AST, kind: str, name: str, body: list[ast.AST]) -> None:
        outer = self.table
        key = (kind, name, node.lineno)
        children = [c for c in outer.get_children() if (c.get_type(), c.get_name(), c.get_lineno()) == key]
        if len(children) != 1:
            raise ExportError(f"cannot match scope {kind} {name} at line {node.lineno}")
        self.table = children[0]
        for child in body:
            self.visit(child)
        self.table = outer

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for expr in [*node.decorator_list, *node.args.defaults, *filter(None, node.args.kw_defaults)]:
            self.visit(expr)
        for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs, node.args.vararg, node.args.kwarg]:
            if arg is not None and arg.annotation is not None:
                self.visit(arg.annotation)
        if node.returns is not None:
            self.visit(node.returns)
        if node.name in self.names and self.table.get_type() == "module":
            self._add_keyword_name(node, "def", node.name)
        self._enter(node, "function", node.name, node.body)

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for expr in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expr)
        if node.name in self.names and self.table.get_type() == "module":
            self._add_keyword_name(node, "class", node.name)
        self._enter(node, "class", node.name, node.body)

    def visit_Lambda(self, node: ast.Lambda) -> None:
        for expr in [*node.args.defaults, *filter(None, node.args.kw_defaults)]:
            self.visit(expr)
        self._enter(node, "function", "lambda", [node.body])

    def visit_Global(self, node: ast.Global) -> None:
        for name in set(node.names) & self.names:
            self._add_keyword_name(node, "global", name)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.names and self._refers_globally(node.id):
            self._add(node.lineno, node.col_offset, node.id)


def _rename(source: str, renames: dict[str, str]) -> str:
    """Apply ``renames`` to every module-scope reference at once, then check none was missed."""
    if not renames:
        return source
    finder = _Spans(source, set(renames))
    finder.visit(ast.parse(source))
    lines = source.splitlines(keepends=True)
    for row, col, name in sorted(finder.spans, reverse=True):
        line = lines[row]
        if line[col : col + len(name)] != name:
            raise ExportError(f"expected {name!r} at line {row + 1}, column {col}")
        lines[row] = line[:col] + renames[name] + line[col + len(name) :]
    renamed = "".join(lines)
    leftover = _Spans(renamed, set(renames) - set(renames.values()))
    leftover.visit(ast.parse(renamed))
    if leftover.spans:
        raise ExportError(f"could not rename {sorted({s[2] for s in leftover.spans})} everywhere")
    return renamed


def _unique(name: str, module: str, taken: set[str]) -> str:
    base = f"{name}__{'_'.join(module.split('.')[1:])}"
    candidate, i = base, 2
    while candidate in taken:
        candidate, i = f"{base}{i}", i + 1
    return candidate


def _flatten(module: _Module, finals: dict[tuple[str, str], str], taken: set[str], listed: set[str]) -> str:
    """The module's source for the one-file namespace; records its names in ``finals``/``taken``."""
    drop: list[ast.stmt] = []
    renames: dict[str, str] = {}
    own: list[str] = []
    for node in module.tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            drop.append(node)
        elif _is_internal(node):
            if not isinstance(node, ast.ImportFrom) or node.level > 0:
                raise ExportError(f"{module.name}: use `from {PACKAGE}.x import name` (line {node.lineno})")
            for alias in node.names:
                definer = _definer(node.module, alias.name)
                if definer[0] not in listed or definer not in finals:
                    raise ExportError(f"{module.name}: {node.module}.{alias.name} is not defined by an earlier module")
                renames[alias.asname or alias.name] = finals[definer]
            drop.append(node)
        elif isinstance(node, ast.Assign) and _bound_names(node) == ["__all__"]:
            drop.append(node)
        elif not isinstance(node, ast.Import | ast.ImportFrom | ast.Expr):
            own.extend(_bound_names(node))
    for node in ast.walk(module.tree):
        if _is_internal(node) and node not in module.tree.body:
            raise ExportError(f"{module.name}: imports from {PACKAGE} must be at module level (line {node.lineno})")

    for name in dict.fromkeys(own):
        final = _unique(name, module.name, taken | set(renames.values())) if name in taken else name
        if final != name:
            renames[name] = final
        finals[(module.name, name)] = final
    lines = module.source.splitlines(keepends=True)
    docstring = ast.get_docstring(module.tree, clean=False) is not None
    for node in drop + module.tree.body[:docstring]:
        for row in range(node.lineno - 1, node.end_lineno):
            lines[row] = ""
    body = re.sub(r"\n{4,}", "\n\n\n", _rename("".join(lines), renames)).strip("\n")
    imported = {name for node in module.tree.body if not _is_internal(node) for name in _import_names(node)}
    clobbered = imported & set(finals.values())
    if clobbered:
        raise ExportError(f"{module.name}: imports would rebind {sorted(clobbered)} defined by an earlier module")
    taken.update(finals[(module.name, name)] for name in own)
    taken.update(imported)
    return body


def export_source(package: str) -> str:
    """One-file submission for ``reference_kernels.<package>``."""
    pkg = importlib.import_module(f"{PACKAGE}.{package}")
    names = tuple(dict.fromkeys(getattr(pkg, "EXPORT_MODULES", ())))  # a module listed twice is inlined once
    if not names:
        raise ExportError(f"{pkg.__name__} has no EXPORT_MODULES")
    modules = [_load(name) for name in names]
    finals: dict[tuple[str, str], str] = {}
    taken: set[str] = {"custom_kernel", "input_t", "output_t"}
    bodies = [f"# ---- {m.name} ----\n{_flatten(m, finals, taken, set(names))}" for m in modules]
    entry = _definer(pkg.__name__, "qr")
    if entry not in finals:
        raise ExportError(f"{pkg.__name__}.qr is not defined by a module in EXPORT_MODULES")
    future = any(
        isinstance(n, ast.ImportFrom) and n.module == "__future__" for m in modules for n in m.tree.body
    )
    header = [
        f'"""Contest submission generated from {pkg.__name__} by reference_kernels.export: edit the package."""',
        "",
        *(["from __future__ import annotations", ""] if future else []),
        "from task import input_t, output_t",
    ]
    footer = f"def custom_kernel(data: input_t) -> output_t:\n    return {finals[entry]}(data)\n"
    text = "\n".join(header) + "\n\n" + "\n\n\n".join([*bodies, f"# ---- submission ----\n{footer}"])
    compile(text, "<export>", "exec")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m {__name__}", description=__doc__.splitlines()[0])
    parser.add_argument("package", help="a package under reference_kernels/, e.g. blocked_wy")
    parser.add_argument("-o", "--output", type=Path, help="file to write (default: standard output)")
    args = parser.parse_args(argv)
    try:
        text = export_source(args.package)
    except ExportError as error:
        print(f"export: {error}", file=sys.stderr)
        return 1
    if args.output is None:
        sys.stdout.write(text)
    else:
        args.output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
