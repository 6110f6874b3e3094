"""The ``durably chaos``, ``durably simulate`` and ``durably bench`` commands.

They load on first use (:mod:`durably.cli`), so their imports (rich, the experiment
modules) cost nothing until one of them runs.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource
from rich.console import Console
from rich.table import Table

from ..chaos import simulate as sim
from ..errors import ConfigError
from .common import CommandError, db_option, term

_JOBS = click.IntRange(1, 64)
_WIDTH_PIPED = 140  # rich wraps at 80 columns when not on a terminal; tables need more


def _console() -> Console:
    """A console that does not squeeze tables when the output is piped or captured."""
    return Console() if sys.stdout.isatty() else Console(width=_WIDTH_PIPED)


def _progress(total: int, label: str, enabled: bool) -> Any:
    """A rich progress bar on stderr, refreshed by hand: a refresh thread would be copied
    into every forked child, and forking a threaded process is unsafe."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

    progress = Progress(
        "[progress.description]{task.description}",
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        auto_refresh=False,
        transient=True,
        disable=not enabled,
    )
    task = progress.add_task(label, total=total)
    return progress, task


@click.command(short_help="SIGKILL an agent at every step boundary; count repeats.")
@db_option
@click.option(
    "--workflow",
    "workflow_spec",
    metavar="MODULE:FUNCTION",
    help="Crash-test this registered workflow instead of the built-in agent. It performs"
    " the workflow's real effects and model calls, once per kill point.",
)
@click.option(
    "--args",
    "args_json",
    default="[]",
    show_default=True,
    metavar="JSON",
    help="The workflow's arguments: a JSON list (positional) or object (keyword).",
)
@click.option(
    "--allow-repeat",
    multiple=True,
    metavar="STEP",
    help="A step known to be safe to run twice (a read); repeatable.",
)
@click.option(
    "--park",
    type=click.Choice(["answer", "stop"]),
    default="answer",
    show_default=True,
    help="With --workflow, a run that parks: answer it (approve each approval request as"
    " 'durably chaos', send each awaited signal with null data, wait out a timer due"
    " within 10 s) or stop it there with a message.",
)
@click.option("--detail", is_flag=True, help="Print every kill point, not just the summary.")
@click.option(
    "--plot",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE.png",
    help="Save the bar chart of duplicates per policy (needs durably[plot]).",
)
@click.option("--jobs", type=_JOBS, default=None, help="Kill points run at once [CPUs].")
@click.option(
    "--durability",
    type=click.Choice(["power", "process", "effects"]),
    default=None,
    help="The journal's durability mode (docs/durability.md) [power].",
)
@click.option(
    "--synchronous",
    type=click.Choice(["FULL", "NORMAL"]),
    default=None,
    help="The journal's SQLite synchronous setting (a store detail: prefer --durability).",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def chaos(
    ctx: click.Context,
    db: str,
    workflow_spec: str | None,
    args_json: str,
    allow_repeat: tuple[str, ...],
    park: str,
    detail: bool,
    plot: Path | None,
    jobs: int | None,
    durability: str | None,
    synchronous: str | None,
    as_json: bool,
) -> None:
    """SIGKILL an agent at every step boundary and count what it did twice.

    Without --workflow: the crash matrix. A scripted incident agent (5 turns, 3 writes) is
    killed at 10 steps x 3 windows under four persistence policies (120 real process
    deaths), restarted, and the world is audited for duplicate writes and extra tokens.

    With --workflow module:function: the same sweep for your workflow, on a temporary
    journal (or --db); exits 1 when a step with no idempotency key and no reconcile ran
    twice. Read and idempotent tools (@durably.tool) may repeat. A run that parks for an
    approval, a signal or a short timer is answered or stopped (--park), never waited
    for without end.
    """
    if workflow_spec is not None:
        explicit = ctx.get_parameter_source("db") is not ParameterSource.DEFAULT
        _chaos_workflow(
            workflow_spec,
            args_json,
            db if explicit else None,
            frozenset(allow_repeat),
            jobs,
            detail,
            as_json,
            park,
        )
        return
    from ..chaos import matrix

    if plot is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise click.ClickException(
                "--plot needs matplotlib: pip install 'durably[plot]'"
            ) from None
    progress, task = _progress(
        len(matrix.kill_points()), "killing the agent", not as_json and sys.stderr.isatty()
    )
    with progress:

        def done(_: matrix.KillPoint) -> None:
            progress.advance(task)
            progress.refresh()

        try:
            report = matrix.run_matrix(
                jobs=jobs, synchronous=synchronous, durability=durability, on_done=done
            )
        except (matrix.ChaosError, ConfigError) as exc:
            raise CommandError(str(exc)) from exc
    if plot is not None:
        matrix.plot(report.summaries, plot)
    if as_json:
        click.echo(json.dumps(report.to_json(), sort_keys=True))
        return
    _print_matrix(report, detail, plot)


def _print_matrix(report: Any, detail: bool, plot: Path | None) -> None:
    from ..chaos import matrix

    console = _console()
    table = Table(title="SIGKILL at every step boundary: 30 kill points per policy")
    for h in matrix.SUMMARY_HEADERS:
        table.add_column(h, justify="left" if h == "policy" else "right")
    for s in report.summaries:
        table.add_row(*matrix.summary_cells(s))
    console.print(table)
    if detail:
        d = Table(title="every kill point")
        for h in ("policy", "pos", "step", "window", "duplicates", "extra tokens"):
            d.add_column(
                h, justify="right" if h in ("pos", "duplicates", "extra tokens") else "left"
            )
        for r in report.rows:
            d.add_row(
                r.policy,
                str(r.position),
                r.step,
                r.window,
                str(r.duplicates),
                f"{r.extra_tokens:,}",
            )
        console.print(d)
    n = len(report.rows)
    console.print(
        f"{n} kills (real SIGKILL, each followed by a restart) in"
        f" {report.seconds:.1f} s with {report.jobs} at a time;"
        f" clean run: {report.summaries[0].clean_tokens:,} tokens."
    )
    if plot is not None:
        console.print(f"chart saved to {plot}")


def _chaos_workflow(
    spec: str,
    args_json: str,
    url: str | None,
    allow_repeat: frozenset[str],
    jobs: int | None,
    detail: bool,
    as_json: bool,
    park: str = "answer",
) -> None:
    from ..chaos import workflow_chaos as wc

    try:
        parsed = json.loads(args_json)
    except json.JSONDecodeError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint="--args") from None
    if not isinstance(parsed, list | dict):
        raise click.BadParameter("give a JSON list or object", param_hint="--args")
    args, kwargs = (parsed, {}) if isinstance(parsed, list) else ([], parsed)
    try:
        wf = wc.load_workflow(spec)
        click.echo(
            f"durably chaos: this runs {wf.name!r} for real, once clean and again for every"
            " kill point: its real effects and model calls happen each time (emails, charges,"
            " tokens). Point it at test doubles or a sandbox.",
            err=True,
        )
        report = wc.run_workflow_chaos(
            wf, args, kwargs, url=url, allow_repeat=allow_repeat, jobs=jobs, park=park
        )
    except wc.WorkflowLoadError as exc:
        raise CommandError(str(exc)) from exc
    if as_json:
        click.echo(json.dumps(report.to_json(), sort_keys=True, default=str))
    else:
        _print_workflow_report(report, detail)
    if report.failed:
        sys.exit(1)


def _print_workflow_report(report: Any, detail: bool) -> None:
    console = _console()
    # Step names and outcomes come from the user's workflow and its errors: escaped.
    table = Table(title=f"workflow {term(repr(report.workflow))}: a SIGKILL at every step x window")
    for h in (
        "pos",
        "step",
        "window",
        "outcome",
        "same result",
        "ran twice",
        "same key",
        "extra tokens",
    ):
        table.add_column(h)
    for k in report.kills:
        if not detail and not k.repeats and k.outcome == "completed":
            continue
        twice = ", ".join(f"{term(r.name)} x{r.executions} ({r.verdict})" for r in k.repeats)
        keys = ", ".join(
            "yes" if r.same_key else "no key" if r.keys[0] is None else "NO" for r in k.repeats
        )
        same = "-" if k.same_result is None else "yes" if k.same_result else "no"
        table.add_row(
            term(k.position),
            term(k.name),
            k.window,
            term(k.outcome),
            same,
            twice or "-",
            keys or "-",
            f"{k.extra_tokens:,}",
        )
    console.print(table)
    console.print(
        f"{len(report.kills)} kill points over {len(report.steps)} steps in"
        f" {report.seconds:.1f} s" + ("" if detail else "; clean kill points hidden (--detail)")
    )
    for name in report.unsafe_steps:
        console.print(
            f"[bold red]UNSAFE[/]: step {term(repr(name))} ran twice after a crash and has no"
            " idempotency_key parameter and no reconcile: its side effect, if any,"
            " happened twice. Give it an idempotency_key (and make the receiver"
            " honour it), declare @durably.step(effect=True, reconcile=...), declare it"
            " @durably.tool(kind='read') if it only reads, or pass --allow-repeat."
        )
    bad = [k for k in report.kills if k.outcome not in ("completed", "parked in doubt (safe)")]
    # (a run stopped at a park, --park stop, is reported here with the reason)
    for k in bad:
        console.print(
            f"[bold red]NOT RESUMED[/]: kill at {term(k.position)} {k.window}: {term(k.outcome)}"
        )
    if not report.failed:
        console.print("[green]every kill point resumed safely[/]")


@click.command(short_help="The Monte-Carlo crash experiment, on the real engine.")
@click.option("--tasks", type=click.IntRange(1, sim.TASKS_MAX), default=20_000, show_default=True)
@click.option("--seed", type=int, default=5, show_default=True)
@click.option(
    "--crash-before",
    type=click.FloatRange(0, 1),
    default=0.03,
    show_default=True,
    help="Crash probability before each live step's effect.",
)
@click.option(
    "--crash-after-effect",
    type=click.FloatRange(0, 1),
    default=0.03,
    show_default=True,
    help="Crash probability after the effect, before its record.",
)
@click.option(
    "--keys",
    "key_mode",
    type=click.Choice(["stable", "random"]),
    default="stable",
    show_default=True,
    help="random: a fresh key per attempt (protects nothing).",
)
@click.option(
    "--dedupe-window",
    type=click.IntRange(0),
    default=None,
    metavar="W",
    help="The mail service forgets a key after W attempts (all tasks counted).",
)
@click.option(
    "--in-flight",
    type=click.IntRange(1, 10_000),
    default=1,
    show_default=True,
    help="Tasks interleaved; a crashed one resumes after a random delay.",
)
@click.option(
    "--find-window", is_flag=True, help="Report the smallest dedupe window with zero duplicates."
)
@click.option(
    "--saga",
    is_flag=True,
    help="'email finance' fails for good 1% of the time; a compensation deletes the report.",
)
@click.option(
    "--one-stream",
    is_flag=True,
    help="Draw every task's crashes from one random stream, as the chapter's program does"
    " (reproduces its figures exactly; each strategy then runs in one process).",
)
@click.option("--jobs", type=_JOBS, default=None, help="Worker processes [CPUs].")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def simulate(
    tasks: int,
    seed: int,
    crash_before: float,
    crash_after_effect: float,
    key_mode: str,
    dedupe_window: int | None,
    in_flight: int,
    find_window: bool,
    saga: bool,
    one_stream: bool,
    jobs: int | None,
    as_json: bool,
) -> None:
    """The Monte-Carlo crash experiment, run on the real replay engine.

    Six-step tasks (three model calls, a read, a file write, an email) crash with the
    given probabilities at two points per step under three strategies: progress in
    memory, a journal, and a journal with idempotency keys. Ends with a replay of an old
    history against code whose steps were reordered.
    """
    import time

    cfg = sim.SimConfig(
        tasks,
        seed,
        crash_before,
        crash_after_effect,
        key_mode,
        dedupe_window,
        in_flight,
        saga,
        one_stream,
    )
    jobs = jobs or os.cpu_count() or 1
    t0 = time.perf_counter()
    if find_window:
        w, at_w, below = sim.find_window(cfg, jobs)
        secs = time.perf_counter() - t0
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "window": w,
                        "duplicates_at_window": at_w,
                        "duplicates_below": below,
                        "in_flight": in_flight,
                        "seconds": round(secs, 3),
                    }
                )
            )
            return
        click.echo(
            f"smallest dedupe window with zero duplicate emails: {w} attempts"
            f" (--in-flight {in_flight}, {tasks:,} tasks); W={w} gives {at_w},"
            f" W={w - 1} gives {below} duplicates ({secs:.1f} s)"
        )
        return
    results = sim.run(cfg, jobs=jobs)
    secs = time.perf_counter() - t0
    message = sim.reorder_demo()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "config": cfg.__dict__,
                    "seconds": round(secs, 3),
                    "nondeterminism": message,
                    "strategies": {
                        s: {
                            **{k: v for k, v in r.__dict__.items() if k != "resend_gaps"},
                            "extra_pct": round(r.extra_pct(tasks), 2),
                        }
                        for s, r in results.items()
                    },
                },
                sort_keys=True,
            )
        )
        return
    _print_sim(cfg, results, secs, message)


def _print_sim(
    cfg: sim.SimConfig, results: dict[str, sim.StrategyResult], secs: float, message: str
) -> None:
    console = _console()
    console.print(
        f"{cfg.tasks:,} tasks, crash probability {cfg.crash_before} before and"
        f" {cfg.crash_after_effect} after the effect of each step (real engine)"
    )
    table = Table()
    cols = ["strategy", "crashes", "model calls", "extra", "duplicate emails"]
    if cfg.saga:
        cols += ["failed emails", "compensated", "orphaned reports"]
    for c in cols:
        table.add_column(c, justify="left" if c == "strategy" else "right")
    for s, r in results.items():
        row = [
            sim.LABELS[s],
            f"{r.crashes:,}",
            f"{r.model_calls:,}",
            f"{r.extra_pct(cfg.tasks):.1f}%",
            f"{r.duplicate_emails:,}",
        ]
        if cfg.saga:
            row += [f"{r.failed_emails:,}", f"{r.compensated:,}", f"{r.orphaned_reports:,}"]
        table.add_row(*row)
    console.print(table)
    plain = sim.SimConfig(tasks=cfg.tasks, seed=cfg.seed, one_stream=cfg.one_stream)
    if cfg == plain and cfg.tasks == 20_000:
        ref = "; ".join(
            f"{sim.LABELS[s]} {c:,} / {m:,} / {e}% / {d:,}"
            for s, (c, m, e, d) in sim.SEED_FIGURES.items()
        )
        how = "drawn from the same stream" if cfg.one_stream else "one stream for all tasks"
        console.print(f"the chapter's figures ({how}): {ref}")
    console.print(f"({secs:.1f} s)")
    console.print("\nreplaying an old history after a deploy reordered two steps:")
    console.print(f"  NonDeterminism: {message}", highlight=False, soft_wrap=True)


@click.group()
def bench() -> None:
    """Benchmarks that measure this machine."""


@bench.command("commit")
@click.option("--samples", type=click.IntRange(1, 100_000), default=500, show_default=True)
@click.option(
    "--dir",
    "folder",
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    default=None,
    help="A folder on the disk to measure [temp folder].",
)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def bench_commit(samples: int, folder: Path | None, as_json: bool) -> None:
    """Median and p99 latency of one durable journal commit on this disk."""
    from ..chaos import commitbench as cb

    figures = cb.run_bench(samples, folder)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "figures": [{**f.__dict__, "suspicious": f.suspicious} for f in figures],
                    "reference": cb.SEED_REFERENCE,
                },
                sort_keys=True,
            )
        )
        return
    console = _console()
    table = Table(title=f"one commit, {samples} samples, in {folder or 'the temp folder'}")
    for h in ("method", "median", "p99"):
        table.add_column(h, justify="left" if h == "method" else "right")
    for f in figures:
        table.add_row(f.method, f"{f.median_ms:.3f} ms", f"{f.p99_ms:.3f} ms")
    console.print(table)
    console.print(f"reference: {cb.SEED_REFERENCE}; {cb.SEED_NO_FULLFSYNC}")
    for f in figures:
        if f.suspicious:
            console.print(
                f"[yellow]warning[/]: {f.method} took {f.median_ms:.3f} ms, too fast"
                f" for a write to reach stable storage (< {cb.TOO_FAST_MS} ms): a"
                " volatile write cache, a RAM disk (tmpfs) or a virtual disk that"
                " ignores flushes is answering. Measure with --dir on the real"
                " disk."
            )
