"""An example third-party plugin for pyattacker."""
