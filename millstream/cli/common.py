"""What every ``millstream`` subcommand shares: the ``Job`` a config file describes, consoles, and errors as
exit codes. Every command that acts on a job goes through :class:`millstream.Job`."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console

from millstream.config import parse_override
from millstream.errors import ConfigError, MillstreamError, StreamNotFoundError
from millstream.job import Job

# Never break names, paths or table cells across lines in a pipe, where rich would assume 80 columns.
_PIPE_WIDTH = None if sys.stdout.isatty() else 200
out = Console(soft_wrap=True, width=_PIPE_WIDTH)
err = Console(stderr=True, soft_wrap=True, width=_PIPE_WIDTH)

ConfigPath = Annotated[Path, typer.Argument(help="Job config: YAML or .properties", show_default=False)]
Overrides = Annotated[list[str] | None, typer.Option("--set", "-s", help="Override a config key: key=value")]

T = TypeVar("T")


def guarded(action: Callable[[], T], *, usage: bool = False) -> T:
    """Run ``action``; a millstream error becomes a one-line message and the documented exit code:
    2 for bad config, a missing stream, or (``usage``) any refused request; 1 otherwise."""
    try:
        return action()
    except MillstreamError as error:
        raise failed(error, usage=usage) from None


def failed(error: MillstreamError, *, usage: bool = False) -> typer.Exit:
    """Print ``error`` as one line; the exit that ends the command with its code."""
    err.print(f"[bold red]error:[/] {error}", markup=True, highlight=False)
    return typer.Exit(exit_code_of(error, usage=usage))


def exit_code_of(error: MillstreamError, *, usage: bool = False) -> int:
    # ConfigError, StreamNotFoundError and the others that mean "could not start" carry exit_code 2.
    if isinstance(error, (ConfigError, StreamNotFoundError)) or getattr(error, "exit_code", 1) == 2 or usage:
        return 2
    return 1


def load(config: Path, overrides: list[str] | None) -> Job:
    """The job ``config`` describes with the ``--set`` overrides, prepared; a bad key exits 2 naming it."""
    return guarded(lambda: Job.from_file(config, dict(parse_override(o) for o in overrides or [])))


def with_stage(overrides: list[str] | None, stage: int | None) -> list[str]:
    """The ``--set`` overrides with ``--stage N`` as ``app.stage=N``."""
    return [*(overrides or []), *([f"app.stage={stage}"] if stage is not None else [])]
