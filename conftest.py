"""Loads qrbench's pytest plugin in a plain checkout; once qrbench is installed, pytest has
already loaded it under this same name through the ``pytest11`` entry point, and this is a no-op."""

pytest_plugins = ["evaluator.pytest_plugin"]
