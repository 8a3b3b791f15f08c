"""Kernel families: each module declares its config space, its default and its build function."""
