"""pyattacker's built-in plugins: each module is one plugin, registered through the same
``pyattacker.plugins`` entry points that a third-party package uses."""
