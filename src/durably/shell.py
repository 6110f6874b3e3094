"""Commands durably prints for a person to copy and run (``durably retry RUN``, ...).

A run id, a signal name or a request id comes from the journal and may hold anything a
run id may: blanks, quotes, ``;``, ``$(...)``, a leading ``-``. Pasted into a shell as
printed, such a word could run another command or read as an option. Every such word is
quoted for a POSIX shell here, and positional words that start with ``-`` go after
``--``, so the printed command does exactly what it says. An option's value from the
journal (a queue name) goes through :func:`option`. A test greps every printer in
``src/durably`` for a journal word pasted into a command without these.
"""

from __future__ import annotations

__all__ = ["command", "option"]


def command(verb: str, *args: str, options: str = "") -> str:
    """``durably VERB ARGS... OPTIONS``, each of ``args`` quoted for a POSIX shell.

    ``verb`` and ``options`` are durably's own text (e.g. ``"retry"``, ``"--at 3"``) and
    are used as given. An argument that starts with ``-`` puts the options first and the
    arguments after ``--``, where the command line never reads them as options.
    """
    import shlex  # printed in error messages only: not a cost of every start

    quoted = " ".join(shlex.quote(a) for a in args)
    if any(a.startswith("-") for a in args):
        parts = ["durably", verb, options, "--", quoted]
    else:
        parts = ["durably", verb, quoted, options]
    return " ".join(p for p in parts if p)


def option(flag: str, value: str) -> str:
    """``--flag VALUE`` for :func:`command`'s ``options``, with ``value`` (journal text,
    e.g. a queue name) quoted for a POSIX shell; a value that starts with ``-`` is
    written ``--flag=VALUE``, so it cannot read as another option."""
    import shlex

    if value.startswith("-"):
        return f"{flag}={shlex.quote(value)}"
    return f"{flag} {shlex.quote(value)}"
