"""``python -m pyigprof ARGS``: the ``pyigprof`` command installed with this package."""

import os
import sys
import sysconfig

from pyigprof import library


def main():
    command = os.path.join(sysconfig.get_path("scripts"), "pyigprof")
    if not os.path.isfile(command):
        sys.stderr.write("pyigprof: the pyigprof command is not installed at %s\n" % command)
        return 2
    lib = library()
    if lib and "PYIGPROF_LIB" not in os.environ:
        os.environ["PYIGPROF_LIB"] = lib
    os.execv(command, [command] + sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
