"""Prints where the Python package goes under the install prefix argv[1]: this Python's own
site-packages when it lies under that prefix, else <prefix>/lib/pythonX.Y/site-packages (what
a virtual environment at that prefix reads)."""
import os
import sys
import sysconfig

prefix = os.path.abspath(sys.argv[1])
own = os.path.abspath(sysconfig.get_path("platlib"))
if own.startswith(prefix + os.sep):
    print(own)
else:
    scheme = "posix_prefix" if os.name == "posix" else "nt"
    print(sysconfig.get_path("platlib", scheme, vars={"base": prefix, "platbase": prefix}))
