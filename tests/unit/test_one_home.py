"""One home per method (issue 42): a registered method's name appears in the package's code only under its own
folder, ``src/tandem/methods/<name>/``. Its settings, prompts, parsing, training and CLI shorthands live
there; the rest of the package reaches it through the registry, never by name.

What counts as the name (:func:`name_pattern`), for every name ``tandem.registry.METHODS`` holds:

- its code forms, for every method: the import path or folder (``methods.NAME``, ``methods/NAME``), the
  registry key as a string (``"NAME"``, ``'NAME'``) and the command-line / keyword forms (``--method NAME``,
  ``method=NAME``);
- for a name that is not an ordinary English word (all but :data:`ORDINARY_WORDS`), also the name itself in
  lower case as a word of an identifier or a text (``train_NAME``, ``docs/methods/NAME.md``, ``--method
  NAME`` in a help text). Capitalised prose such as "as DualRAG runs it" is left alone: a baseline that
  follows the DualRAG paper's protocol cites that paper; it does not reach into its method's folder.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import tandem
from tandem.registry import METHODS

SRC = Path(tandem.__file__).resolve().parent  # src/tandem
HOMES = SRC / "methods"
# method names that are ordinary words of the package's prose ("a direct answer", "the NQ-open oracle
# passages"): only their code forms are searched
ORDINARY_WORDS = {"direct", "oracle"}
# (file under src/tandem, method name) -> why the name may appear there; each must still be needed
EXCEPTIONS: dict[tuple[str, str], str] = {
    ("corpus/formats.py", "ircot"): "the QA file format of IRCoT's released processed data (HotpotQA dev500 is "
                                    "in it): a dataset format's name (`--format ircot`), not the method",
    ("rerank/rala.py", "cooprag"): "RaLa is a shared reranker (`reranker=rala`, the index's `rala` extra) that the "
                                   "CoopRAG paper defines; its docstring cites the page that documents and "
                                   "measures it (docs/methods/cooprag.md)",
}


def method_names() -> list[str]:
    """The registered methods that ship with the package (a plugin's method, built outside it, has no folder)."""
    return [name for name in METHODS.names()
            if (getattr(METHODS.get(name).build, "__module__", None) or "").startswith("tandem.")]


def name_pattern(name: str) -> re.Pattern[str]:
    """The forms of ``name`` searched for (the module docstring)."""
    word = re.escape(name)
    end = r"(?![A-Za-z0-9])"
    forms = [rf"methods[./]{word}{end}", rf"[\"']{word}[\"']", rf"--method[ =]{word}{end}",
             rf"\bmethod\s*=\s*[\"']?{word}{end}"]
    if name not in ORDINARY_WORDS:
        forms.append(rf"(?<![A-Za-z0-9]){word}{end}")
    return re.compile("|".join(forms))


def hits(name: str, files: list[Path]) -> list[str]:
    """``path:line: text`` of every line of ``files`` holding one of ``name``'s forms (paths under src/tandem)."""
    pattern = name_pattern(name)
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if pattern.search(line):
                found.append(f"{path.relative_to(SRC).as_posix()}:{number}: {line.strip()}")
    return found


def outside_home(name: str) -> list[Path]:
    """Every .py file of the package outside ``methods/<name>/``."""
    home = HOMES / name
    return sorted(p for p in SRC.rglob("*.py") if home not in p.parents)


def test_every_shipped_method_has_its_folder_and_registers_there():
    """The scan below is not empty-handed: each method's folder exists and its own registration matches."""
    names = method_names()
    assert len(names) >= 5, names
    for name in names:
        home = HOMES / name
        assert (home / "__init__.py").is_file(), f"method {name!r} has no folder {home}"
        own = hits(name, sorted(home.rglob("*.py")))
        assert any(f'register("{name}"' in line for line in own), (name, own)


@pytest.mark.parametrize("name", method_names())
def test_a_method_name_appears_only_in_its_own_folder(name):
    """No .py file of the package outside ``methods/<name>/`` holds one of the name's forms (but the listed
    exceptions)."""
    allowed = {path for path, method in EXCEPTIONS if method == name}
    found = [h for h in hits(name, outside_home(name)) if h.split(":", 1)[0] not in allowed]
    assert not found, (f"method {name!r} is named outside src/tandem/methods/{name}/ (move the code into its folder, "
                       "reach it through the registry, or use a generic name):\n" + "\n".join(found))


def test_each_exception_is_still_needed():
    """An exception names a registered method and a file that still names it: none outlives its reason."""
    names = set(method_names())
    for (path, name), reason in EXCEPTIONS.items():
        assert reason and name in names, (path, name)
        assert hits(name, [SRC / path]), f"{path} no longer names {name!r}: drop its exception"


@pytest.mark.parametrize(("line", "name", "found"), [
    ("from tandem.methods.dualrag.prompts import ROLES", "dualrag", True),
    ('help="A `tandem eval qa --method dualrag` run folder."', "dualrag", True),
    ("def register_r2ag(app): ...", "r2ag", True),
    ('"""Iter-RetGen as DualRAG runs it (methods.md)."""', "dualrag", False),  # a citation of the paper
    ('METHOD_SETTINGS = {"direct": {}}', "direct", True),
    ("answer directly: a direct answer", "direct", False),  # an ordinary word
    ("build_method('oracle', llm)", "oracle", True),
    ("the NQ-open oracle passages (nq_oracle)", "oracle", False),
    ("naive_rag_settings = 1", "naive_rag", True),
])
def test_the_forms_searched(line, name, found):
    """Code forms are found for every name, prose forms only for names that are no ordinary word."""
    assert bool(name_pattern(name).search(line)) is found
