"""Every Python code block of the README and the docs runs, so a snippet a reader copies works on the pinned
versions.

A page's blocks run in order in one namespace, as a reader would paste them, after the page's setup below
(the imports and objects its prose assumes: a Spark session, a ``job.yaml`` in the working directory, the
example's task). Two kinds of block are checked differently:

* a block whose first line names a file of this repository (``# examples/pageviews/pageviews.py``) is an
  excerpt: it must appear in that file word for word (the file itself runs in the examples' tests);
* a block whose first line names a file that does not exist (``# myjob/filter.py``) is a file the reader
  writes: it is written into a project directory, and the page's ``test_*.py`` files are then run with pytest.

The snippets' ``job.yaml`` and absolute paths (``/checkpoints/...``) are moved under the test's temporary
directory, since Spark's Python workers run in the directory the shared session started in.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TypeGuard

import pytest
import yaml

from millstream.composition.systems import system_factory
from millstream.config import load_config
from millstream.config.settings import Settings
from millstream.contracts.systems import StreamSpec
from millstream.model import SystemStream
from millstream.testing import write_stream
from tests.helpers import create_stream
from tests.spark.sources.test_store_datasource import run_counting_job

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
FILE_HEADER = re.compile(r"# ([\w./-]+\.py)\n")
SPARK_PAGES = frozenset({"docs/guides/dataframes.md", "docs/spark.md"})

IMPORTS = """
from collections import Counter
from millstream import *
from millstream.api.application import StreamApplicationDescriptor
from millstream.api.table import AdjunctTableDescriptor
from millstream.config import Config
"""

HIGH_LEVEL = """
app = StreamApplicationDescriptor(Config({"job.name": "docs"}))
views = app.input(InputDescriptor("log.page-views", msg_serde="json"))
orders = app.input(InputDescriptor("kafka.orders", msg_serde="json"))
clicks_in = InputDescriptor("log.clicks", msg_serde="json")
views_in = InputDescriptor("log.views", msg_serde="json")
price_in_eur = lambda order, rate: {**order, "eur": order["amount"] * rate}
"""

EXAMPLE_TASK = f"""
sys.path.insert(0, {str(ROOT / "examples" / "pageviews")!r})
from pageviews import PageViewCounter
"""

DATAFRAMES = """
import millstream.spark.datasource
df = spark.sql("SELECT named_struct('id', 'ada') AS user, '/home' AS page")
"""

SETUPS = {
    "README.md": IMPORTS + HIGH_LEVEL + EXAMPLE_TASK,
    "docs/guides/high-level-api.md": IMPORTS + HIGH_LEVEL,
    "docs/guides/metrics.md": IMPORTS,
    "docs/guides/testing.md": IMPORTS + EXAMPLE_TASK,
    "docs/state.md": IMPORTS,
    "docs/guides/dataframes.md": DATAFRAMES,
    "docs/spark.md": DATAFRAMES,
}
"""The imports and objects each page's prose assumes before its first block."""

TEARDOWNS = {"docs/spark.md": "query.processAllAvailable(); query.stop(); spark.sql('DROP TABLE IF EXISTS page_views')"}


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    code: str

    @property
    def file(self) -> str | None:
        """The file the block's first line names, if it names one."""
        match = FILE_HEADER.match(self.code)
        return match.group(1) if match else None


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    name = str(page.relative_to(ROOT))
    return [Block(name, text.count("\n", 0, m.start()) + 1, m.group(1)) for m in BLOCK.finditer(text)]


PAGES_WITH_CODE = [str(page.relative_to(ROOT)) for page in PAGES if blocks(page)]


def _page_params() -> Iterator[object]:
    for page in PAGES_WITH_CODE:
        marks = [pytest.mark.spark] if page in SPARK_PAGES else []
        yield pytest.param(page, marks=marks, id=page)


PAGE_PARAMS = list(_page_params())


def test_the_pages_with_code_are_found() -> None:
    assert {"README.md", "docs/guides/dataframes.md", "docs/guides/tasks.md"} <= set(PAGES_WITH_CODE)


@pytest.mark.parametrize("page", PAGE_PARAMS)
def test_every_python_block_of_the_page_runs(page: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    page_blocks = blocks(ROOT / page)
    namespace: dict[str, object] = {"__name__": "docs_page", "sys": sys}
    if page in SPARK_PAGES:
        namespace["spark"] = request.getfixturevalue("spark")
        JOBS[page](tmp_path)
    project = tmp_path / "project"
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        _run(SETUPS.get(page, ""), namespace, f"{page}: setup")
        for block in page_blocks:
            if block.file is None:
                _run(_in_directory(block.code, tmp_path), namespace, block)
            elif (ROOT / block.file).exists():
                _check_excerpt(block)
            else:
                (project / block.file).parent.mkdir(parents=True, exist_ok=True)
                (project / block.file).write_text(block.code, encoding="utf-8")
        _run(TEARDOWNS.get(page, ""), namespace, f"{page}: teardown")
    finally:
        os.chdir(cwd)
        sys.path[:] = [entry for entry in sys.path if "examples" not in entry]
    _run_readers_tests(project)


def _in_directory(code: str, directory: Path) -> str:
    """The snippet with its ``job.yaml`` and absolute paths under ``directory``: Spark's Python workers do not
    share the test's working directory."""
    return code.replace('"job.yaml"', f'"{directory}/job.yaml"').replace('"/checkpoints/', f'"{directory}/checkpoints/')


def _run(code: str, namespace: dict[str, object], where: object) -> None:
    try:
        exec(compile(code, str(where), "exec"), namespace)
    except Exception as error:
        raise AssertionError(f"{where}: {type(error).__name__}: {error}\n{textwrap.indent(code, '    ')}") from error


def _check_excerpt(block: Block) -> None:
    """Each top-level definition of the block is in the file, alike but for type hints (which the docs leave
    out for brevity)."""
    assert block.file is not None
    in_file = {
        node.name: _without_hints(node) for node in ast.parse((ROOT / block.file).read_text()).body if _named(node)
    }
    for node in ast.parse(block.code).body:
        assert _named(node), f"{block.page}:{block.line}: an excerpt holds only definitions of {block.file}"
        assert in_file.get(node.name) == _without_hints(node), (
            f"{block.page}:{block.line}: {node.name} is not as in {block.file} any more"
        )


def _named(node: ast.stmt) -> TypeGuard[ast.ClassDef | ast.FunctionDef]:
    return isinstance(node, ast.ClassDef | ast.FunctionDef)


class _DropHints(ast.NodeTransformer):
    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        self.generic_visit(node)
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.stmt:
        if node.value is None:
            return node
        return ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno)


def _without_hints(node: ast.AST) -> str:
    return ast.dump(_DropHints().visit(node))


def _run_readers_tests(project: Path) -> None:
    tests = sorted(project.rglob("test_*.py"))
    if not tests:
        return
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *{str(test.parent) for test in tests}])
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *map(str, tests)],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def _write_job(directory: Path) -> None:
    """``job.yaml`` for the DataFrame snippets: the embedded log as systems ``log`` and ``kafka`` (the snippets'
    stream names; Kafka itself is read and written in tests/integration/kafka), and a record to read."""
    values = {
        "job.name": "docs",
        "job.data.dir": str(directory / "data"),
        "task.class": "tests.jobs:PassThrough",
        "task.inputs": "log.page-views",
    }
    for system in ("log", "kafka"):
        values[f"systems.{system}.samza.factory"] = "log"
        values[f"systems.{system}.samza.key.serde"] = "string" if system == "log" else "json"
        values[f"systems.{system}.samza.msg.serde"] = "json"
        values[f"systems.{system}.samza.offset.default"] = "oldest"
    (directory / "job.yaml").write_text(yaml.safe_dump(values), encoding="utf-8")
    config = Settings(values)
    for system, stream in (("log", "page-views"), ("kafka", "orders"), ("kafka", "page-views")):
        admin = system_factory(config, system).get_admin(system, config)
        admin.start()
        try:
            admin.create_stream(StreamSpec(system, stream, 1))
        finally:
            admin.stop()
    write_stream(config, SystemStream("log", "page-views"), [("ada", {"page": "/home", "user": "ada"})])


def _run_counting_job(directory: Path) -> None:
    """``job.yaml`` of a job that has run and left a store ``counts`` (the state audit snippet), with a stream
    ``log.page-views`` for the streaming source snippet."""
    config = load_config(run_counting_job(directory, "changelog"))
    create_stream(config, "page-views", 1)
    write_stream(config, SystemStream("log", "page-views"), [("ada", {"page": "/home"})])


JOBS = {"docs/guides/dataframes.md": _write_job, "docs/spark.md": _run_counting_job}
"""What each Spark page's snippets read, written into the test's directory as ``job.yaml``."""
