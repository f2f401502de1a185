"""Where the ``pgoutput`` program is: the one this package installed, as ruff finds its own."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from typing import Optional

ENV = "PGOUTPUT_BINARY"


def find_binary(explicit: Optional[str] = None) -> str:
    """The path of the ``pgoutput`` program: ``explicit`` if given, else the environment
    variable ``PGOUTPUT_BINARY``, else the one installed with this package (the scripts
    directory of this environment, or of the user scheme), else ``pgoutput`` on ``PATH``."""
    for chosen in (explicit, os.environ.get(ENV)):
        if chosen:
            if not os.path.isfile(chosen):
                raise FileNotFoundError(f"the pgoutput program {chosen!r} does not exist")
            return chosen
    name = "pgoutput" + (sysconfig.get_config_var("EXE") or "")
    schemes = [sysconfig.get_default_scheme() if hasattr(sysconfig, "get_default_scheme") else None]
    schemes.append(f"{os.name}_user")
    for scheme in schemes:
        try:
            scripts = sysconfig.get_path("scripts", scheme) if scheme else sysconfig.get_path("scripts")
        except KeyError:
            continue
        candidate = os.path.join(scripts, name)
        if os.path.isfile(candidate):
            return candidate
    # A bin directory next to the interpreter (a virtual environment run without activating).
    candidate = os.path.join(os.path.dirname(sys.executable), name)
    if os.path.isfile(candidate):
        return candidate
    found = shutil.which(name)
    if found:
        return found
    raise FileNotFoundError(
        "the pgoutput program was not found: install the pgoutput-codec wheel for this "
        f"platform, put pgoutput on PATH, or name it in {ENV}"
    )
