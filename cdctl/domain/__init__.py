"""Pure domain: ids, typed events and their upcasters, state machines, errors.

No I/O; imported by every layer.
"""
