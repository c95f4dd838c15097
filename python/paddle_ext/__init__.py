"""paddle_ext: fast, exact custom operators for PaddlePaddle."""

from ._library import library_path
from .logcumsumexp import logcumsumexp
from .put_along_axis import put_along_axis, put_along_axis_

__version__ = "0.1.0"

__all__ = ["logcumsumexp", "put_along_axis", "put_along_axis_", "library_path"]
