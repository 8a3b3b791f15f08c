"""tileops: linear-attention operators for PyTorch whose kernels are chosen from a tuning database."""

__version__ = "0.1.0"
