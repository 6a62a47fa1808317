"""``python -m pyattacker`` is the same as the ``pyattacker`` command."""

from .cli import main

if __name__ == "__main__":
    main()
