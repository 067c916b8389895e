"""Write (or ``--check``) the settings tables in the docs from the registry's settings models.

A table stands between ``<!-- settings: REGISTRY/NAME -->`` and ``<!-- /settings -->`` (REGISTRY: methods,
retrievers, stores, rerankers, ...); this script replaces what is between them with
:meth:`tandem.registry.Entry.markdown`. ``--check`` changes nothing and exits 1 naming every table that
differs (tests/unit/test_docs_settings.py runs it)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from tandem.registry import ALL

ROOT = Path(__file__).resolve().parent.parent
BLOCK = re.compile(r"(<!-- settings: ([\w-]+)/(\w+) -->\n)(.*?)(<!-- /settings -->)", re.S)


def render(text: str) -> str:
    """``text`` with every settings block regenerated."""
    return BLOCK.sub(lambda m: m.group(1) + ALL[m.group(2)].get(m.group(3)).markdown() + "\n" + m.group(5), text)


def stale(files: list[Path]) -> list[str]:
    """``FILE: REGISTRY/NAME`` for every block whose table is not what the settings model says."""
    out = []
    for path in files:
        text = path.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            if m.group(4) != ALL[m.group(2)].get(m.group(3)).markdown() + "\n":
                out.append(f"{path.relative_to(ROOT)}: {m.group(2)}/{m.group(3)}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table is stale")
    args = parser.parse_args()
    files = sorted((ROOT / "docs").rglob("*.md"))
    if args.check:
        bad = stale(files)
        for line in bad:
            print(f"stale settings table: {line} (run python scripts/docs_settings.py)", file=sys.stderr)
        return 1 if bad else 0
    for path in files:
        text = path.read_text(encoding="utf-8")
        new = render(text)
        if new != text:
            path.write_text(new, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
