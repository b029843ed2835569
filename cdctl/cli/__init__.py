"""The command line: flags and environment to settings to entry points, and the event-log commands."""
