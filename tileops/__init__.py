"""tileops: linear-attention operators for PyTorch whose kernels are chosen from a tuning database."""

from pathlib import Path as _Path

__version__ = "0.1.0"

# db/, dispatch/, tuner/ and cli/ sit beside this folder in the repository and install as its
# subpackages. A checkout used without installing (on PYTHONPATH, as on the GPU machine) serves
# them the same way.
_CHECKOUT = _Path(__file__).resolve().parent.parent
if (_CHECKOUT / "setup.py").is_file() and not (_Path(__file__).parent / "db").exists():
    __path__.append(str(_CHECKOUT))
