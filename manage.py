#!/usr/bin/env python
"""Django's command-line utility for Marina."""
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marina.settings")
    from django.core.management import execute_from_command_line

    from kernel.env import ConfigError

    try:
        execute_from_command_line(sys.argv)
    except ConfigError as exc:  # a malformed variable: one line naming it, not a traceback
        sys.exit(f"Marina's configuration: {exc}")
