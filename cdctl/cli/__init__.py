"""The command line: flags and environment to settings to entry points, plus the event-log history commands."""
