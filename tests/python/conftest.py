"""The bridge's tests run from ctest (tests/CMakeLists.txt: python.bridge)
with PYTHONPATH=build/python and ATTNCHECK the command's path; pytester
drives the plugin in test_pytest_plugin.py."""

import os
import sys

import attncheck

pytest_plugins = ["pytester"]

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# pytester's runs start in a temporary folder: the package by absolute path.
_package = os.path.dirname(os.path.dirname(os.path.abspath(attncheck.__file__)))
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_package] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])


def attncheck_command():
    """The attncheck command beside the package of this build (build/attncheck)."""
    default = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(attncheck.__file__))),
                           "attncheck")
    return os.environ.get("ATTNCHECK", default)
