"""paddle_ext: fast, exact custom operators for PaddlePaddle."""

from ._library import library_path
from .logcumsumexp import logcumsumexp
from .mutual_information import mutual_information_recursion

__version__ = "0.1.0"

__all__ = ["logcumsumexp", "library_path", "mutual_information_recursion"]
