"""The test suite; ``tests.support`` holds what the tests share."""
