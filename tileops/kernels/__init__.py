"""The kernels: a shared layer of building blocks and programs, and per family what is its own.

Layout (the shared layer never imports a family; families import only the shared layer):

- ``hardware``: SM count (from the device, else the arch), shared-memory and register budgets,
  warp and warpgroup sizes, the compile target
- ``blocks/``: device building blocks by role: ``transforms`` (input transforms), ``kkt``,
  ``solve_tril`` + ``wy_merge`` (the WY solve), ``wy_registers`` (chunk gates / cumsum, decays
  and the WY inverse on registers), ``channel_pairs`` (the in-block pairs under one decay per key
  channel), ``chunk_h`` (the state walk, outputs included),
  ``walk_moves``, ``chunk_loads``, ``state_io`` and ``entry`` (one kernel entry for equal-length,
  packed and pieces calls)
- ``programs/``: whole programs composed from the blocks (``chunk_prep``, ``chain_key``,
  ``chain_value``, ``chunk_fused`` (also the pieces' summaries), ``warm_start``,
  ``piece_entries``, ``wy_fast`` (w and u from the inverse), ``decode``; under one decay per
  key channel ``chunk_prep_channel``, ``channel_entries``, and GLA's backward ``chunk_dh_channel``
  and ``chunk_grads_channel``)
- ``plans/``: host-side plans: ``tiles`` (footprints), ``pieces`` (cuts, warm-up, order),
  ``entries`` (the exact schedule of cut sequences), ``channel_pieces`` (GLA's cut sequences),
  ``packing``, ``decode_tile``
- ``launch/``: compiling a config's programs for a call and launching them; ``launch.compiled``
  keeps each compiled program (``kept``: a folder of TileLang's cache) and loads it in a later
  process without TileLang
- ``prefill_kernel``: the chunked prefill of the delta-rule families (``PrefillConfig``, its
  constraints ``tile_problem``, refusals, ``default``, ``plan``), registered per family by
  ``register_prefill`` with its gate (none or one per head) and its ops' argument order
- ``decode_kernel``: one family's decode kernel from the shared decode pieces
- ``calls``: what every kernel takes of a call (16-bit tokens, square 64- or 128-wide state)
- ``base`` (``KernelDef``), ``config`` (``KernelConfig``), ``registry``, ``code_hash`` (the
  hash tuning rows carry: the kernel's code as parsed, so text edits and moves keep rows fresh;
  kept per version of the package's files)
- ``reference_kernels``: the PyTorch ``reference`` target of every op

Per family, where to look (gate ∈ {none, scalar, per key channel} × delta rule ∈ {yes, no}):

- GDN (scalar gate, delta rule): reference ``tileops/reference/delta_rule`` (``naive``: the
  recurrence, ``chunk``: the chunked form) with the gate in ``reference/transforms.gdn_gate``,
  served on CPU by ``reference_kernels``; kernels ``gdn/prefill.py`` (``tl.gdn_prefill`` on
  ``prefill_kernel``: ``programs.chunk_prep`` + ``chain_key`` / ``chain_value``, or
  ``chunk_fused``; cut into pieces, with ``warm_start`` and the exact schedule of
  ``plans.entries``) and ``gdn/decode.py`` (``tl.gdn_decode``: ``programs.decode`` through
  ``decode_kernel``). Tuning key: ``tileops.dispatch.key.key_for`` (kernel name, arch, device,
  dtype, widths, program flags, shape buckets); rows carry ``KernelDef.source_hash``.
- DeltaNet (no gate, delta rule; reference ``reference/delta_rule`` without g):
  ``deltanet/prefill.py`` (``tl.deltanet_prefill``: ``prefill_kernel`` without a gate, every
  cut piece from its exact entry) and ``deltanet/decode.py`` (``tl.deltanet_decode``: its
  ``DecodeRule`` on the shared decode pieces, also the one-step op) and ``deltanet/chunk_fwd.py``
  (``tl.deltanet_chunk_fwd``: ``launch.chunk_fwd``, the chunked training forward in BHSD) and
  ``deltanet/chunk_bwd.py`` (``tl.deltanet_chunk_bwd``: ``launch.chunk_bwd``, ``programs.chunk_dh``'s
  backward state walk then ``programs.chunk_grads``, every chunk's gradients with the WY backward).
- KDA (per-channel gate, delta rule; its gate in ``reference/transforms.kda_gate``) and GLA
  (per-channel gate, no delta rule; reference ``reference/gla``): ``kda/decode.py`` and
  ``gla/decode.py`` register ``tl.kda_decode`` and ``tl.gla_decode``, each a ``DecodeRule``
  (gate, delta rule) and its ops' argument order on the shared decode pieces (``decode_kernel``:
  ``plans.decode_tile``'s ``DecodeConfig``, ``default_config`` and ``decode_problem``,
  ``programs.decode``, ``launch.decode``). ``kda/prefill.py`` and ``gla/prefill.py``
  (``tl.kda_prefill`` with the delta rule, ``tl.gla_prefill`` without) register the per-channel
  prefill, ``channel_prefill_kernel`` (``launch.chunked_channel``: ``programs.chunk_prep_channel``'s
  per-channel gated products, then ``chain_value`` under ``chunk_h``'s per-channel walk).
  ``gla/chunk_fwd.py`` (``tl.gla_chunk_fwd``) is GLA's prefill whose chain also stores the state
  at every chunk boundary, the chunked training forward; ``gla/chunk_bwd.py``
  (``tl.gla_chunk_bwd``: ``launch.chunk_bwd_channel``, the first pass again, ``chunk_dh_channel``'s
  backward state walk, then ``chunk_grads_channel``) its backward.
"""
