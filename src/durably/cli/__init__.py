"""The ``durably`` command: one module per command group.

Every command takes ``--db URL`` (or the ``DURABLY_URL`` environment variable) and
``--json`` where it prints data. Command modules are imported only when their command
runs, so ``durably --help`` and ``import durably`` stay fast.

Modules: :mod:`.common` (options and formatting every command shares), :mod:`.runs`
(``runs list|show|tail|why``), :mod:`.recovery` (``retry``, ``skip``, ``fork``),
:mod:`.cancel`, :mod:`.recover`, :mod:`.signal`, :mod:`.worker`, :mod:`.replay`
(``replay --check``), :mod:`.migrate`, :mod:`.proof` (``chaos``, ``simulate``,
``bench``), :mod:`.approvals` (``approvals list``, ``approve``, ``reject``), :mod:`.ui`
(``ui``, the dashboard), :mod:`.lint` (``lint``), :mod:`.audit` (``audit``),
:mod:`.retention` (``prune``, ``runs delete``).
"""

from __future__ import annotations

import importlib

import click

# name -> "module:attribute" of every command; loaded on first use.
COMMANDS: dict[str, str] = {
    "runs": "durably.cli.runs:runs",
    "retry": "durably.cli.recovery:retry_cmd",
    "skip": "durably.cli.recovery:skip_cmd",
    "fork": "durably.cli.recovery:fork_cmd",
    "cancel": "durably.cli.cancel:cancel_cmd",
    "recover": "durably.cli.recover:recover_cmd",
    "signal": "durably.cli.signal:signal_cmd",
    "replay": "durably.cli.replay:replay_cmd",
    "worker": "durably.cli.worker:worker_cmd",
    "migrate": "durably.cli.migrate:migrate",
    "chaos": "durably.cli.proof:chaos",
    "simulate": "durably.cli.proof:simulate",
    "bench": "durably.cli.proof:bench",
    "approvals": "durably.cli.approvals:approvals",
    "approve": "durably.cli.approvals:approve_cmd",
    "reject": "durably.cli.approvals:reject_cmd",
    "ui": "durably.cli.ui:ui_cmd",
    "lint": "durably.cli.lint:lint_cmd",
    "audit": "durably.cli.audit:audit_cmd",
    "prune": "durably.cli.retention:prune_cmd",
}


class _LazyGroup(click.Group):
    """A click group whose commands load from their modules on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return super().get_command(ctx, cmd_name)
        module, attr = target.split(":")
        cmd: click.Command = getattr(importlib.import_module(module), attr)
        return cmd

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """An unknown command names the nearest ones (``durably run`` -> ``runs``), and
        ``run`` says where a workflow is run from."""
        name = args[0] if args else ""
        if args and self.get_command(ctx, name) is None and not name.startswith("-"):
            import difflib

            close = difflib.get_close_matches(name, self.list_commands(ctx), n=2, cutoff=0.6)
            hint = f" Did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
            if name in ("run", "start"):
                hint += (
                    " A workflow runs from Python: engine.run(wf, ...) in this process, or"
                    " engine.start(wf, ...) and `durably worker MODULE:ENGINE`."
                )
            ctx.fail(f"No such command {name!r}.{hint} `durably --help` lists the commands.")
        return super().resolve_command(ctx, args)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="durably")
def main() -> None:
    """durably: agent runs that survive crashes without redoing their real-world work."""


__all__ = ["main"]
