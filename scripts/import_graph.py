"""The package's import graph between its folders (and top-level modules): who imports whom, drawn as Mermaid
or listed, with any circle named. Imports under ``if TYPE_CHECKING:`` are left out (they never run); imports
inside functions count (they run when the function does).

    python scripts/import_graph.py              # the edges, then "no circles" or the circle found
    python scripts/import_graph.py --mermaid    # a Mermaid flowchart of the same edges

A test (tests/unit/test_import_graph.py) holds the package to no circles."""

from __future__ import annotations

import argparse
import ast
import graphlib
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "src" / "tandem"


def _unit(module: str) -> str | None:
    """``tandem.index.build`` -> ``index``; ``tandem.compose`` -> ``compose``; ``tandem`` -> None."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "tandem" else None


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skip.update(id(n) for n in ast.walk(node))
    return skip


def import_edges(root: Path = ROOT) -> dict[tuple[str, str], set[str]]:
    """(importer, imported) between units -> the files (relative to ``root``) that make the edge."""
    edges: dict[tuple[str, str], set[str]] = defaultdict(set)
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        source = rel.parts[0].removesuffix(".py") if rel.parts[0] != "__init__.py" else None
        if source is None:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        skip = _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [node.module]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                unit = _unit(target)
                if unit is not None and unit != source:
                    edges[(source, unit)].add(str(rel))
    return dict(edges)


def find_circle(edges: dict[tuple[str, str], set[str]]) -> list[str] | None:
    """A circle of units (``[a, b, ..., a]``: a imports b, ...), or None where the graph has none."""
    graph: dict[str, set[str]] = defaultdict(set)
    for importer, imported in edges:
        graph[importer].add(imported)
    try:
        tuple(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as exc:
        return list(reversed(exc.args[1]))  # graphlib lists each node before the one that imports it
    return None


def mermaid(edges: dict[tuple[str, str], set[str]]) -> str:
    """The graph as a Mermaid flowchart (importer --> imported)."""
    return "\n".join(["flowchart TD", *(f"  {a} --> {b}" for a, b in sorted(edges))])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mermaid", action="store_true", help="print a Mermaid flowchart")
    args = parser.parse_args(argv)
    edges = import_edges()
    if args.mermaid:
        print(mermaid(edges))
    else:
        for (a, b), files in sorted(edges.items()):
            print(f"{a} -> {b}  ({', '.join(sorted(files)[:3])}{' ...' if len(files) > 3 else ''})")
    circle = find_circle(edges)
    print(f"circle: {' -> '.join(circle)}" if circle else "no circles", file=sys.stderr)
    return 1 if circle else 0


if __name__ == "__main__":
    sys.exit(main())
