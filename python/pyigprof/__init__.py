"""pyigprof: a sampling profiler for Python's mixed (Python and native) call stacks.

The profiler is a preloaded library (``libpyigprof.so``, in this package); the
``pyigprof`` command runs a program under it (``pyigprof record -- python app.py``)
and reads profiles (``pyigprof report FILE``). ``python -m pyigprof`` is that command.
"""

import glob
import os

__all__ = ["library"]


def library():
    """The path of the preload library installed with this package, or None."""
    here = os.path.dirname(os.path.abspath(__file__))
    found = sorted(
        path
        for path in glob.glob(os.path.join(here, "pyigprof*.so"))
        # The pushes' HTTP client, which the library loads itself.
        if not os.path.basename(path).startswith("pyigprof_push")
    )
    return found[0] if found else None
