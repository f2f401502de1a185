"""``python -m pgoutput_codec ARGS`` runs the ``pgoutput`` program this package installed."""

import os
import subprocess
import sys

from ._binary import find_binary


def main() -> int:
    binary = find_binary()
    if sys.platform == "win32":
        return subprocess.call([binary, *sys.argv[1:]])
    os.execv(binary, [binary, *sys.argv[1:]])
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
