"""Where ``python -m pyattacker`` and the ``pyattacker`` command start (``[project.scripts]``).

Nothing is imported at the top of this module: the command line (rich-click, the commands,
the plugins) is imported inside ``main``, under the same ``KeyboardInterrupt`` handler as the
command itself, so a Ctrl-C while it loads (the first tens of milliseconds of every command)
ends the command like a later one does: ``Interrupted.`` on stderr and exit code 130. Every
import below is inside a function for that reason.

Once the command has decided its exit code, a Ctrl-C during the interpreter's shutdown ends the
process at once with that code (what was to be printed is flushed first), instead of a
traceback from the shutdown; the shard parent reads a shard's code, so it must stay the
command's own, not a death by SIGINT.

A command whose process ran no task code (the parent of ``run --shards``) may ask to end
without the interpreter's teardown (``pyattacker.cli.process_end``): the process then leaves here,
once its code is decided.

Only the interpreter's own start-up, before this module runs, is out of reach. (So this
module imports nothing at its top, not even ``typing``.)
"""

#: ``ExitCode.OK`` and ``ExitCode.INTERRUPTED`` (``pyattacker.errors``), spelled out: importing
#: them would load ``asyncio`` before the handler that turns a Ctrl-C into this code is in place
_OK = 0
_INTERRUPTED = 130


def main(argv: list[str] | None = None) -> None:
    """The console script: ``pyattacker.cli.main`` with Ctrl-C handled from the first import on."""
    exit_code = [_INTERRUPTED]  # what a late Ctrl-C exits with: the command's code once it has one
    swallowed = _catch_swallowed_interrupts()
    loading = _SigintWhileLoading()
    try:
        try:
            from pyattacker.cli.process_end import end_if_requested, forget_request

            forget_request()
            from pyattacker.cli.main import main as cli_main

            loading.restore()
            if swallowed:
                raise KeyboardInterrupt
            cli_main(argv)
            if swallowed:
                raise KeyboardInterrupt
            exit_code[0] = _OK
        except SystemExit as exc:
            exit_code[0] = _code_of(exc.code)
            if swallowed and exit_code[0] == _OK:
                raise KeyboardInterrupt from None
            end_if_requested(exit_code[0])  # a command that ran no task code: no teardown
            raise
        except Exception as exc:
            if loading.pressed or _caused_by_interrupt(exc):  # a Ctrl-C Python wrapped or lost
                raise KeyboardInterrupt from None
            raise
        finally:
            _late_sigint_exits_with(exit_code)
    except KeyboardInterrupt:
        import sys

        exit_code[0] = _INTERRUPTED
        sys.stderr.write("Interrupted.\n")
        raise SystemExit(_INTERRUPTED) from None


def _caused_by_interrupt(exc: BaseException) -> bool:
    """Whether a ``KeyboardInterrupt`` is behind ``exc``: Python 3.11 turns one raised while a
    class body's ``__set_name__`` runs (a dataclass being defined during an import) into
    ``RuntimeError("Error calling __set_name__ ...")`` with the interrupt as its cause."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


class _SigintWhileLoading:
    """Records a Ctrl-C that lands while the command line is imported, until ``restore()``.

    Python may lose the ``KeyboardInterrupt`` it raises there: one that lands while the
    import system builds the message of a ``from m import name`` that fails (``ssl`` does that
    on purpose, for an optional name) comes out as ``TypeError: expected a message argument``,
    with nothing chained. Any error that escapes the import after a Ctrl-C is therefore the
    Ctrl-C. The handler raises as Python's own does, and only replaces that one: an ignored
    SIGINT (a background job) stays ignored. ``restore()`` puts Python's handler back before
    the command runs, so that ``asyncio`` still installs its own."""

    def __init__(self) -> None:
        import signal

        self.pressed = False
        try:
            if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
                signal.signal(signal.SIGINT, self._note)
        except ValueError:  # not the main thread (main() called from code of one's own)
            pass

    def _note(self, signum: int, frame: object) -> None:
        self.pressed = True
        raise KeyboardInterrupt

    def restore(self) -> None:
        import signal

        if signal.getsignal(signal.SIGINT) == self._note:
            signal.signal(signal.SIGINT, signal.default_int_handler)


def _catch_swallowed_interrupts() -> list[bool]:
    """A Ctrl-C that lands in a callback Python runs for itself (the import system's module
    locks are released by weakref callbacks) cannot propagate: Python prints "Exception ignored
    in ..." with a traceback, and the command goes on as if nothing was pressed. Such an
    interrupt is recorded instead (the returned list becomes non-empty) and ``main`` raises it
    at its next step; any other unraisable exception is shown as Python shows it."""
    import sys

    swallowed: list[bool] = []
    previous = sys.unraisablehook

    def hook(unraisable: object) -> None:
        if isinstance(getattr(unraisable, "exc_value", None), KeyboardInterrupt):
            swallowed.append(True)
            return
        previous(unraisable)  # type: ignore[arg-type]

    sys.unraisablehook = hook
    return swallowed


def _code_of(code: object) -> int:
    """The process exit code ``SystemExit(code)`` stands for (the interpreter's rule: a message
    is 1, whatever it says)."""
    if code is None:
        return _OK
    return code if isinstance(code, int) else 1


def _late_sigint_exits_with(exit_code: list[int]) -> None:
    """From now on SIGINT flushes stdout/stderr and ends the process with ``exit_code[0]``.

    ``signal.signal`` first raises a Ctrl-C that is already pending, as a ``KeyboardInterrupt``
    (then the handler is not installed, and ``main`` reports the interrupt)."""
    import os
    import signal

    from pyattacker.cli.process_end import flush_std_streams

    def exit_now(signum: int, frame: object) -> None:
        flush_std_streams()
        os._exit(exit_code[0])

    try:
        signal.signal(signal.SIGINT, exit_now)
    except ValueError:  # not the main thread (main() called from code of one's own): leave it
        pass


if __name__ == "__main__":
    main()
