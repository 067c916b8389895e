"""Command line: a thin adapter over the library (``tandem --help``), one module per command group."""

from __future__ import annotations

import itertools
import os
import signal
import sys
from typing import Annotated

import typer
from rich.markup import escape

from tandem.cli import ask, data, evaluate, index, train
from tandem.cli.common import console, out, set_verbosity
from tandem.cli.components import register as register_components
from tandem.cli.exports import register as register_exports
from tandem.cli.federate import federate_app
from tandem.cli.llm import llm_app
from tandem.cli.mcp import register as register_mcp
from tandem.cli.serve import register as register_serve
from tandem.errors import TandemError
from tandem.interrupts import exit_code, stop_signals
from tandem.secrets import redact

app = typer.Typer(help="tandem: retrieval-augmented multi-hop QA, retriever and LLM working together.", no_args_is_help=True,
                  pretty_exceptions_show_locals=False)
for command in (index.retrieve, ask.ask, ask.report):
    app.command()(command)
register_components(app)
# ``tandem index --out DIR ...`` builds (the group's own callback); ``tandem index verify DIR`` checks
index_app = typer.Typer(invoke_without_command=True)
index_app.callback()(index.index)
index_app.command("verify")(index.verify)
app.add_typer(index_app, name="index")
app.add_typer(evaluate.eval_app, name="eval")
app.add_typer(data.data_app, name="data")
app.add_typer(train.export_app, name="export")
app.add_typer(train.train_app, name="train")
app.add_typer(federate_app, name="federate")
app.add_typer(llm_app, name="llm")
register_exports(train.export_app)
register_serve(app)
register_mcp(app)


def _expand_multi_value_options(argv: list[str], options: tuple[str, ...] = ("--k", "-k")) -> list[str]:
    """Let ``eval retrieval --k 2 5 10`` mean ``--k 2 --k 5 --k 10`` (click options take one value each)."""
    if argv[:2] != ["eval", "retrieval"]:
        return argv
    result: list[str] = []
    multi: str | None = None
    for arg in argv:
        if arg in options:
            multi = arg
        elif multi is not None and arg.isdigit():
            if result[-1] != multi:
                result.append(multi)
        else:
            multi = None
        result.append(arg)
    return result


def _version(value: bool) -> None:
    if value:
        from tandem.version import __version__

        out.print(f"tandem {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="Print the version and exit.")] = False,
          verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also show third-party libraries' logs, "
                                                                         "warnings and progress bars.")] = False,
          quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Only results and errors: no progress bars "
                                                                     "or notes.")] = False) -> None:
    """tandem: retrieval-augmented multi-hop QA, retriever and LLM working together."""
    set_verbosity(1 if verbose else -1 if quiet else 0)


def main() -> None:
    """Console entry point. Exit codes: 0 success; 1 the work failed (:class:`RunError`, or an unexpected
    error, printed without local variables and with secrets redacted); 2 bad input or settings; 130
    interrupted (Ctrl-C); 143 / 129 stopped by SIGTERM / SIGHUP, handled as Ctrl-C (:mod:`tandem.interrupts`)."""
    import logging

    from tandem.logs import quiet_third_party
    from tandem.model_files import offline_env

    offline_env()
    # before any library is imported: -v (an option of the root command, so before the subcommand) lets
    # third-party logs, warnings and bars through
    leading = [a for a in itertools.takewhile(lambda a: a.startswith("-"), sys.argv[1:])]
    quiet_third_party(verbose=bool({"-v", "--verbose"} & set(leading)))
    handler = logging.StreamHandler()
    handler.setLevel(logging.WARNING)  # on the handler: libraries that set their own loggers to DEBUG stay quiet
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s", handlers=[handler])
    try:
        # non-standalone typer turns Ctrl-C (and click's Exit) into a returned exit code
        with stop_signals():
            code = app(args=_expand_multi_value_options(sys.argv[1:]), prog_name="tandem", standalone_mode=False)
        if code == 130:
            raise KeyboardInterrupt
        if isinstance(code, int) and code:
            raise SystemExit(code)
    except TandemError as exc:
        console.quiet = False
        console.print(f"[red]error:[/red] {escape(redact(str(exc)))}", highlight=False)
        raise SystemExit(exc.exit_code) from None
    except (KeyboardInterrupt, typer.Abort):
        console.quiet = False
        code = exit_code()
        why = f" ({signal.Signals(code - 128).name})" if code != 130 else ""
        console.print(f"[red]interrupted[/red]{why}: finished work is saved; run the same command again to resume")
        sys.stdout.flush()
        sys.stderr.flush()
        # not SystemExit: a Ctrl-C that passed through a C extension's PyRun_* call (e.g. during an import)
        # makes CPython 3.11 end the process with SIGINT (-2) even after it was handled; the folders are
        # already cleaned up and unlocked by the context managers the interrupt unwound
        os._exit(code)
    except Exception as exc:  # noqa: BLE001 - the last stop: click's usage errors, a full disk, then anything unexpected
        import click

        from tandem.io import write_error

        if isinstance(exc, click.ClickException):
            exc.show()
            raise SystemExit(exc.exit_code) from None
        if isinstance(exc, OSError) and (error := write_error(exc, exc.filename or "a file")) is not None:
            console.quiet = False
            console.print(f"[red]error:[/red] {escape(str(error))}", highlight=False)
            raise SystemExit(error.exit_code) from None
        import traceback

        sys.stderr.write(redact("".join(traceback.format_exception(exc))))
        console.quiet = False
        console.print(f"[red]internal error:[/red] {escape(redact(f'{type(exc).__name__}: {exc}'))}", highlight=False)
        raise SystemExit(1) from None


if __name__ == "__main__":
    main()
