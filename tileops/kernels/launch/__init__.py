"""Launchers: the programs a config runs, compiled for a call (``chunked_programs``), and the
callables that allocate outputs and launch them (``chunked``, ``decode``)."""
