"""``millstream --version``: which release is installed, the first thing a bug report needs."""

from __future__ import annotations

from typing import Annotated

import typer

from millstream import __version__
from millstream.cli.common import out


def _print_version(requested: bool) -> None:
    if requested:
        out.print(f"millstream {__version__}", highlight=False)
        raise typer.Exit()


def root(
    version: Annotated[
        bool,
        typer.Option("--version", help="Print the installed version and exit.", is_eager=True, callback=_print_version),
    ] = False,
) -> None:
    """Samza-style stream jobs on Apache Spark."""
