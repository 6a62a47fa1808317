"""Where ``python -m pyattacker`` and the ``pyattacker`` command start (``[project.scripts]``).

Nothing is imported at the top of this module: the command line (rich-click, the commands,
the plugins) is imported inside ``main``, under the same ``KeyboardInterrupt`` handler as the
command itself. A Ctrl-C while it loads (the first tens of milliseconds of every command) used
to print a traceback from inside an import; now it ends the command like a later one does:
``Interrupted.`` on stderr and exit code 130. Once the command is done, SIGINT gets its default
action back, so a Ctrl-C while the interpreter shuts down ends the process at once (a shell
sees 130) instead of printing a traceback from the shutdown.

Only the interpreter's own start-up, before this module runs, is out of reach.
"""


def main(argv: list[str] | None = None) -> None:
    """The console script: ``pyattacker.cli.main`` with Ctrl-C handled from the first import on."""
    try:
        try:
            from .cli import main as cli_main

            cli_main(argv)
        finally:
            _default_sigint()
    except KeyboardInterrupt:
        import sys

        sys.stderr.write("Interrupted.\n")
        raise SystemExit(130) from None


def _default_sigint() -> None:
    """The default action for SIGINT from now on (a signal already pending is raised here, as a
    ``KeyboardInterrupt``, before the handler changes)."""
    import signal

    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
    except ValueError:  # not the main thread (main() called from code of one's own): leave it
        pass


if __name__ == "__main__":
    main()
