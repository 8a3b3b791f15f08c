"""The one kernel entry of the chunked programs: their arguments, for each way a call hands over
its sequences.

- ``equal``: B sequences of ``seq_len`` tokens each; the scalar ``seq_len`` follows the outputs.
- ``packed``: sequences bounded by ``cu_seqlens`` (int32, [N + 1]), after the inputs.
- ``pieces``: CTA (hv, p) walks tokens ``begin[p, hv]`` to ``end[p]`` from row ``init_row[p, hv]``
  of the initial state (zeros where it is −1), stores outputs from token ``start[p]`` on and its
  last state in row ``out_row[p]`` of the final state unless that is −1 (``plans.pieces``).

Tokens are flattened to [B·T]; a program that carries a state takes ``has_init`` (0 or 1: whether
``h0`` holds an initial state) last, except in pieces, where ``init_row`` says it. Token bounds
read from a device table are clamped to 0 ≤ begin ≤ end ≤ tokens: offsets the caller got wrong
give wrong sequences, never an access outside the tensors (checking them would take a host sync). A program
declares its inputs and outputs once and writes its launch (a ``T.macro``) against a
``Sequences``, which says where a CTA's sequence lies whatever the kind.
"""

import tilelang.language as T  # no postponed annotations: TileLang evaluates them with closures
from tilelang.language.eager.builder import Builder, _patch_prim_func_attrs

KINDS = ("equal", "packed", "pieces")


class Sequences:
    """The sequence arguments of one entry and where sequence (or piece) ``n`` lies in them."""

    def __init__(self, kind: str, value_heads: int, with_state: bool, tokens):
        assert kind in KINDS, kind
        self.kind, self.value_heads, self.with_state, self.tokens = kind, value_heads, with_state, tokens
        self.nseq = T.dynamic("nseq")
        if kind == "pieces":
            self.rows_in, self.rows_out, self.count = T.dynamic("rows_in"), T.dynamic("rows_out"), T.dynamic("pieces")
        self.args = {}

    def state_shape(self, value_heads: int, dim_k: int, dim_v: int, v_first: bool, out: bool = False) -> list:
        """The initial (or, ``out``, final) state's shape: a row per sequence, or per row the pieces name."""
        rows = (self.rows_out if out else self.rows_in) if self.kind == "pieces" else self.nseq
        return [rows, value_heads, dim_v, dim_k] if v_first else [rows, value_heads, dim_k, dim_v]

    def tables(self) -> list:
        """(name, annotation) of the arguments between the inputs and the outputs."""
        if self.kind == "packed":
            return [("cu_seqlens", T.Tensor([self.nseq + 1], "int32"))]
        if self.kind == "pieces":
            HV, P = self.value_heads, self.count
            return [("begin", T.Tensor([P, HV], "int32")), ("end", T.Tensor([P], "int32")),
                    ("start", T.Tensor([P], "int32")), ("init_row", T.Tensor([P, HV], "int32")),
                    ("out_row", T.Tensor([P], "int32"))]
        return []

    def scalars(self) -> list:
        """(name, annotation) of the arguments after the outputs."""
        out = [("seq_len", T.int32)] if self.kind == "equal" else []
        return out + ([("has_init", T.int32)] if self.with_state and self.kind != "pieces" else [])

    @property
    def walks(self):
        """How many sequences (pieces) the grid spans."""
        return self.count if self.kind == "pieces" else self.nseq

    @property
    def bounds(self):
        """What a program that finds each token's sequence itself reads: ``cu_seqlens`` or ``seq_len``."""
        return self.args["cu_seqlens"] if self.kind == "packed" else self.args["seq_len"]

    def begin(self, n, hv=None):
        """Where the walk of sequence n starts (a piece: its warm-up's first token)."""
        if self.kind == "pieces":
            return self.clamped(self.args["begin"][n, hv], 0)
        return self.clamped(self.args["cu_seqlens"][n], 0) if self.kind == "packed" else n * self.args["seq_len"]

    def end(self, n, hv=None):
        """One past the last token of sequence n (at least its ``begin``)."""
        if self.kind == "pieces":
            return self.clamped(self.args["end"][n], self.begin(n, hv))
        if self.kind == "packed":
            return self.clamped(self.args["cu_seqlens"][n + 1], self.begin(n))
        return (n + 1) * self.args["seq_len"]

    def clamped(self, offset, low):
        """A token offset from a device table, inside low..tokens."""
        return T.min(T.max(offset, low), self.tokens)

    def store_from(self, n):
        """The first token whose output is stored (a piece's warm-up stores none)."""
        return self.args["start"][n] if self.kind == "pieces" else self.begin(n)

    def init_row(self, n, hv):
        """The row of the initial state the walk starts from."""
        return T.max(self.args["init_row"][n, hv], 0) if self.kind == "pieces" else n

    def has_init(self, n, hv):
        """Non-zero when the walk starts from an initial state (init_row + 1 is 0 exactly for row −1)."""
        return self.args["init_row"][n, hv] + 1 if self.kind == "pieces" else self.args["has_init"]

    def transition(self, n, hv):
        """A summary's job that carries a transition instead of a state (pieces: ``init_row`` −2)."""
        return self.args["init_row"][n, hv] == -2

    def out_row(self, n):
        """The row of the final state the walk ends in (pieces: −1 for none)."""
        return self.args["out_row"][n] if self.kind == "pieces" else n


def kernel_entry(name: str, sequences: Sequences, inputs: list, outputs: list, launch):
    """The prim_func ``name``: (inputs, sequence tables, outputs, sequence scalars), each a
    (name, annotation) pair, whose body is ``launch(*inputs, *outputs, sequences)``."""
    builder = Builder()
    with builder.prim_func(name):
        params = [*inputs, *sequences.tables(), *outputs, *sequences.scalars()]
        # A scalar's annotation is its dtype, which makes the variable when called.
        args = {arg: builder.arg(arg, a() if callable(a) else a) for arg, a in params}
        sequences.args = args
        launch(*(args[arg] for arg, _ in inputs + outputs), sequences)
    return _patch_prim_func_attrs(builder.get(), builder)
