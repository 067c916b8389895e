"""Readable renderings of an Answer's trace (for ``tandem ask`` and logs)."""

from __future__ import annotations

from rich.console import Group
from rich.panel import Panel
from rich.text import Text

from tandem.index.store import DocStore
from tandem.types import Answer

INDENT = "    "


def _titles(value: object, store: DocStore | None) -> object:
    """A list of document ids shown as their titles when every id is in ``store``."""
    if store is not None and isinstance(value, list) and value and all(isinstance(v, str) and v in store for v in value):
        return [store.get(v).title or v for v in value]
    return value


def _append_note(body: Text, value: object, store: DocStore | None) -> None:
    """A note on one line; a multi-line text (e.g. the knowledge outline) as an indented block; a dict
    one indented line per key (lists of document ids shown as titles)."""
    if isinstance(value, str) and "\n" in value.strip():
        body.append("\n" + "".join(f"{INDENT}{line}\n" for line in value.strip().splitlines()))
    elif isinstance(value, dict) and value:
        body.append("\n")
        for k, v in value.items():
            body.append(f"{INDENT}{k}: ", style="italic")
            body.append(f"{_titles(v, store)}\n")
    else:
        body.append(f"{value}\n")


def render_trace(answer: Answer, store: DocStore | None = None, max_chars: int = 160) -> Group:
    """One panel per step: its notes, queries, hits (with titles), LLM calls with their cost
    and, for a reply that could not be parsed, the parser's message."""
    panels = []
    for i, step in enumerate(answer.trace.steps, start=1):
        body = Text()
        for key, value in step.notes.items():
            body.append(f"{key}: ", style="bold")
            _append_note(body, value, store)
        for query in step.queries:
            body.append("query: ", style="bold cyan")
            body.append(f"{query}\n")
        for hit in step.hits:
            title = store.get(hit.doc_id).title if store is not None and hit.doc_id in store else hit.doc_id
            body.append(f"  #{hit.rank} {title} ({hit.score:.3f})\n", style="dim")
        for call in step.llm_calls:
            output = call.output if len(call.output) <= max_chars else call.output[: max_chars - 3] + "..."
            body.append(f"{call.role} → ", style="bold magenta")
            body.append(f"{output!r}  ")
            body.append(f"[{call.prompt_tokens}+{call.completion_tokens} tok"
                        f"{f' ({call.reused_tokens} reused)' if call.reused_tokens else ''}, {call.latency_s:.2f}s"
                        f"{', cached' if call.cached else ''}]\n", style="dim")
            if call.parse_error is not None:
                body.append(f"{INDENT}parse error: {call.parse_error}\n", style="red")
        panels.append(Panel(body, title=f"step {i}: {step.name}", title_align="left"))
    summary = Text(f"answer: {answer.text}", style="bold green")
    cost = Text(f"{len(answer.trace.llm_calls)} LLM calls, {answer.trace.tokens} tokens, "
                f"{len(answer.trace.docs_read)} documents read", style="dim")
    return Group(*panels, summary, cost)
