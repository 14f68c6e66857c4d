"""What every CLI command shares: exit codes, JSON output, error printing."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NoReturn

import typer
from rich.console import Console

if TYPE_CHECKING:  # only named in hints: `corral --version` need not load pydantic
    from rich.table import Table

    from corral.shared.configio import ConfigError, Issue

# Exit codes, the same for every command.
EXIT_OK = 0
EXIT_NEGATIVE = 1  # the answer is no: nothing can be planned, the request failed, ...
EXIT_INPUT = 2  # the user's input is wrong (invalid file, unknown name, refused)
EXIT_TIMEOUT = 3  # --timeout passed while still waiting
EXIT_INTERRUPTED = 130  # Ctrl-C, as a shell reports a program ended by SIGINT (128 + 2)

# emoji=False: rich turns ``:name:`` into an emoji even where markup is off, so an accelerator
# written ``H100:100:`` (or any name with colons) would print as a picture.
out = Console(highlight=False, soft_wrap=True, emoji=False)
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)


def wide_console(like: Console, width: int) -> Console:
    """A console writing where ``like`` writes, ``width`` columns wide, with the same rules
    (no highlighting, no markup or emoji in data)."""
    return Console(file=like.file, width=width, highlight=False, soft_wrap=True, emoji=False)


def data_row(table: Table, *cells: str) -> None:
    """Add a row whose cells are data: printed as written, never read as markup (``[red]``)
    or emoji codes (``:100:``)."""
    from rich.text import Text

    table.add_row(*(Text(cell) for cell in cells))


def print_json(obj: Any) -> None:
    """Machine output: one JSON document on stdout."""
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
    sys.stdout.flush()


def list_envelope(kind: str, items: list[Any], **extra: Any) -> dict[str, Any]:
    """The one shape of every list a command prints with ``--json``, the API's own:
    ``{"<kind>": [...], "count": N}`` (``kind`` plural: requests, instances, pools, ...), plus
    whatever the list is about (``extra``: the accelerator asked for, the planner's reasons)."""
    return {kind: items, "count": len(items), **extra}


def print_list(kind: str, items: list[Any], **extra: Any) -> None:
    """Print a list in its envelope (:func:`list_envelope`)."""
    print_json(list_envelope(kind, items, **extra))


def say(text: str) -> None:
    """One line on stdout, as written (names are data, never markup)."""
    out.print(text, markup=False)


def report(as_json: bool, doc: Any, line: str) -> None:
    """What a command did: ``doc`` as JSON with ``--json``, else ``line``."""
    if as_json:
        print_json(doc)
    else:
        say(line)


def command_text(args: list[str]) -> str:
    """The command given after ``--``: one word as written (a shell line), else quoted."""
    import shlex

    return args[0] if len(args) == 1 else shlex.join(args)


def write_output(pieces: Iterable[str | int], shown: bool = True) -> int:
    """A command's output as it comes, on stdout as written (unless not ``shown``); its exit
    code, the last piece (1 when none came)."""
    code = 1
    for piece in pieces:
        if isinstance(piece, int):
            code = piece
        elif shown:
            sys.stdout.write(piece)
            sys.stdout.flush()
    return code


def notice(message: str) -> None:
    """A one-line notice on stderr (never on stdout, so --json output stays parseable)."""
    from rich.text import Text

    err.print(Text.assemble(("notice", "yellow"), ": ", message), highlight=False)


def warning(message: str) -> None:
    """A one-line warning on stderr: done, but something the user must see to (stdout stays
    parseable)."""
    from rich.text import Text

    err.print(Text.assemble(("warning", "bold yellow"), ": ", message), highlight=False)


def print_issues(issues: Iterable[Issue]) -> None:
    for issue in issues:
        err.print(str(issue), markup=False)


def fail_input(exc: ConfigError, as_json: bool = False) -> NoReturn:
    """Report a user's mistake and exit 2 (never a traceback)."""
    if as_json:
        print_json({"error": "invalid input", "issues": [i.as_dict() for i in exc.issues]})
    print_issues(exc.issues)
    raise typer.Exit(EXIT_INPUT)


def fail(message: str, code: int = EXIT_NEGATIVE, as_json: bool = False) -> NoReturn:
    """Report an error (as ``{"error": message}`` too with ``--json``) and exit ``code``."""
    if as_json:
        print_json({"error": message})
    err.print(f"error: {message}", markup=False)
    raise typer.Exit(code)
