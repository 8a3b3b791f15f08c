"""The CUDA-graph check the prefill GPU tests share."""

from __future__ import annotations

import torch


def replays_as_eager(op, *args) -> bool:
    """Whether a captured call of ``op``, replayed, gives the eager call's outputs bit for bit."""
    eager = [x.clone() for x in op(*args)]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = op(*args)
    graph.replay()
    torch.cuda.synchronize()
    return all(torch.equal(x, y) for x, y in zip(captured, eager))
