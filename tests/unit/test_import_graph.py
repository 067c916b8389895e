"""The package's folders import each other without circles (scripts/import_graph.py draws the graph)."""

import importlib.util
from pathlib import Path

_SPEC = importlib.util.spec_from_file_location("import_graph", Path(__file__).resolve().parents[2] / "scripts" /
                                               "import_graph.py")
import_graph = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(import_graph)


def test_the_folders_import_each_other_without_circles():
    edges = import_graph.import_edges()
    assert ("compose", "methods") in edges and ("cli", "eval") in edges  # the graph is read, not empty
    circle = import_graph.find_circle(edges)
    assert circle is None, f"import circle {' -> '.join(circle)}: " + "; ".join(
        f"{a} -> {b} in {sorted(edges[(a, b)])}" for a, b in zip(circle, circle[1:], strict=False))


def test_a_circle_is_found_and_named(tmp_path):
    pkg = tmp_path / "tandem"
    for unit, other in (("alpha", "beta"), ("beta", "alpha")):
        (pkg / unit).mkdir(parents=True)
        (pkg / unit / "__init__.py").write_text(f"def f():\n    from tandem.{other} import x\n")
    (pkg / "gamma.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import tandem.alpha\n")
    edges = import_graph.import_edges(pkg)
    assert set(edges) == {("alpha", "beta"), ("beta", "alpha")}  # a TYPE_CHECKING import is no edge
    assert set(import_graph.find_circle(edges)) == {"alpha", "beta"}
