"""The run: one broker, the input written once, every contender in turn, each output verified before
its figures count, the results written as JSON, a Markdown table and a plot."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path

from benchmarks.peers.contenders import CONTENDERS, REPO, Contender, NotRunnableError, interpreter
from benchmarks.peers.measure import ContenderFailedError, run_measured
from benchmarks.peers.report import Measurement, Outcome, markdown_table, targets
from benchmarks.peers.verify import (
    OutputMismatchError,
    expected_counts,
    read_output,
    verify_counts,
    verify_passthrough,
)
from benchmarks.peers.window import SteadyWindow, cpu_between, steady_window
from benchmarks.peers.workload import delete_topics, write_input
from tests.integration.kafka.helpers import create_topic

RUN_ID = uuid.uuid4().hex[:6]
INPUT = f"peers-{RUN_ID}-in"


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name.lower()).strip("-")


def measure_once(
    contender: Contender,
    python: Path,
    workload: str,
    index: int,
    args: argparse.Namespace,
    root: Path,
    env: dict[str, str],
) -> Measurement:
    """One run of ``contender`` on ``workload``: its own output topic and work directory, its output
    read back and verified, then its figures."""
    name = f"peers-{RUN_ID}-{_slug(contender.name)}-{workload}-{index}"
    workdir = root / name
    workdir.mkdir()
    create_topic(args.bootstrap, name, args.partitions, **{"message.timestamp.type": "LogAppendTime"})
    command = [str(python), *contender.command, "--bootstrap", args.bootstrap, "--input", INPUT, "--output", name]
    command += ["--workload", workload, "--messages", str(args.messages), "--partitions", str(args.partitions)]
    command += ["--workdir", str(workdir), "--name", name]
    cost = run_measured(command, REPO, args.logs / f"{name}.log", args.timeout, env)
    try:
        if not contender.verified_output:
            report = json.loads(cost.stdout.strip().splitlines()[-1])
            if report["messages"] != args.messages:
                raise OutputMismatchError(f"{INPUT}: read {report['messages']:,} messages of {args.messages:,}")
            window = SteadyWindow(report["steady_messages"], report["steady_start"], report["steady_end"])
        else:
            records = read_output(args.bootstrap, name, args.partitions)
            expected = expected_counts(args.messages, args.keys)
            (verify_passthrough if workload == "w1" else verify_counts)(name, records, expected)
            window = steady_window(record.timestamp_ms for record in records)
        steady_cpu = cpu_between(cost.cpu_series, window.start, window.end) / window.messages * 1_000_000
        return Measurement(window.rate, steady_cpu, cost.cpu_seconds, cost.peak_rss_bytes, cost.wall_seconds)
    finally:
        delete_topics(args.bootstrap, name)


def measure_contender(contender: Contender, args: argparse.Namespace, root: Path) -> list[Outcome]:
    try:
        python = interpreter(contender)
        env = {**os.environ, **(contender.prepare() if contender.prepare else {})}
    except NotRunnableError as error:
        return [Outcome(contender.name, w, args.messages, not_run=str(error)) for w in contender.workloads]
    outcomes = []
    for workload in contender.workloads:
        runs: list[Measurement] = []
        try:
            for index in range(args.runs):
                runs.append(measure_once(contender, python, workload, index, args, root, env))
                print(f"  {contender.name} {workload} run {index + 1}: {runs[-1]}", flush=True)
                if sum(run.wall_seconds for run in runs) / len(runs) * (len(runs) + 1) > args.budget:
                    print(f"  {contender.name} {workload}: another run would overrun --budget", flush=True)
                    break
            outcomes.append(Outcome(contender.name, workload, args.messages, tuple(runs), runs_wanted=args.runs))
        except (ContenderFailedError, OutputMismatchError) as error:
            reason = str(error).splitlines()[0]
            print(f"  {contender.name} {workload}: not run: {error}", flush=True)
            outcomes.append(Outcome(contender.name, workload, args.messages, not_run=reason))
    return outcomes


def run_all(args: argparse.Namespace, root: Path) -> None:
    rate = write_input(args.bootstrap, INPUT, args.partitions, args.messages, args.keys)
    print(f"{args.messages:,} messages over {args.keys:,} keys in {INPUT} (written at {rate:,.0f}/s)", flush=True)
    chosen = [c for c in CONTENDERS if not args.only or c.name in args.only]
    outcomes: list[Outcome] = []
    for contender in chosen:
        print(f"{contender.name}:", flush=True)
        outcomes += measure_contender(contender, args, root)
        write_results(outcomes, args, final=contender is chosen[-1])


def write_results(outcomes: list[Outcome], args: argparse.Namespace, final: bool) -> None:
    """The results so far (after every contender, so an interrupted run still leaves a table)."""
    args.out.mkdir(parents=True, exist_ok=True)
    title = (
        f"{args.messages:,} messages of ~100 B, {args.keys:,} keys, {args.partitions} partitions, median of {args.runs}"
    )
    table = markdown_table(outcomes)
    summary = "\n".join(targets(outcomes))
    (args.out / "peers.json").write_text(
        json.dumps({"title": title, "outcomes": [asdict(o) for o in outcomes]}, indent=1)
    )
    (args.out / "peers.txt").write_text(
        f"{title}\n\n{table}\n\n" + "".join(f"- {line}\n" for line in summary.splitlines())
    )
    from benchmarks.peers.plot import plot_rates

    plot_rates(outcomes, title, args.out / "peers.png")
    if final:
        print(f"\n{title}\n\n{table}\n\n{summary}\n\nwritten to {args.out}", flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.peers", description=__doc__)
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3, help="runs per contender and workload; medians reported")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds one run may take")
    parser.add_argument(
        "--budget",
        type=float,
        default=900.0,
        help="seconds one contender's runs of one workload may take together: fewer runs (named in the table) "
        "for a contender too slow for all of them",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=[contender.name for contender in CONTENDERS],
        default=[],
        help="a contender to run, repeatable (names hold commas, so one per --only); default: all",
    )
    parser.add_argument("--bootstrap", help="an existing broker (default: start one from the test harness)")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "assets" / "performance")
    args = parser.parse_args(argv)
    if args.messages % args.keys or args.keys % args.partitions:
        parser.error("--keys must divide --messages and --partitions must divide --keys (equal partitions)")
    root = Path(tempfile.mkdtemp(prefix="millstream-peers-"))
    args.logs = Path(tempfile.mkdtemp(prefix="millstream-peers-logs-"))
    print(f"contenders' output in {args.logs}", flush=True)
    started = time.perf_counter()
    try:
        if args.bootstrap:
            run_all(args, root)
        else:
            from tests.integration.kafka_broker import KafkaBroker

            with KafkaBroker(root / "broker", log_level="WARN") as broker:
                args.bootstrap = broker.bootstrap_servers
                run_all(args, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"total {time.perf_counter() - started:,.0f} s", flush=True)
