"""Dispatch: from a call to a config to a compiled kernel, without database I/O on the hot path."""
