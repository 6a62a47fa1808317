"""What the tests share: runners, stores, CLI calls, fixtures. Imported as ``tests.support.X``."""

from pathlib import Path

#: the checkout's root folder
REPO = Path(__file__).resolve().parents[2]
