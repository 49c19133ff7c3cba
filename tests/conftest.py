"""Test-wide settings: nothing touches a model hub; torch uses the machine's 2 cores on the kernels `memlens` pins
by default (harness/cli.py pin_cpu_kernels), set before anything loads torch; our folders are imported only as
subpackages of memlens."""

import importlib.abc
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from memlens.harness.cli import pin_cpu_kernels  # noqa: E402  (after the variables above; it loads no torch)

pin_cpu_kernels()


class RefuseBareFolderNames(importlib.abc.MetaPathFinder):
    """pytest runs from the checkout, where `import recipes` would silently load recipes/ a second time, beside
    memlens.recipes; on a user's machine that name is another project's (torchtune's `recipes`, PyPI's `harness`
    and `synthetic-data`). Any such import, static or dynamic (importlib, a patch target), fails the test."""

    FOLDERS = ("harness", "recipes", "synthetic_data")

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in self.FOLDERS:
            raise ModuleNotFoundError(f"{fullname}: import it as memlens.{fullname} (the installed name)")
        return None


sys.meta_path.insert(0, RefuseBareFolderNames())
