"""Build hook: the package layout (four top-level folders -> ``a2acc``), the compiled cores and the JIT's
start-up ``.pth`` file.

Project metadata lives in pyproject.toml. The packages are discovered from the folders, so a new module or
subpackage needs no edit here or in pyproject.toml; likewise every ``compiler/native/NAME.c`` is built as the
optional extension ``a2acc._NAME`` (without a C compiler the install goes on and the pure-Python references
run; :mod:`a2acc.native` loads whichever cores exist). ``a2acc-jit.pth`` goes to the root of a built wheel
(so ``pip install a2acc`` puts it into site-packages); editable installs get it from
``python -m a2acc.runtime.activate --install-hook`` (``make`` runs it), because setuptools' editable wheels
have no public hook for files outside the package.
"""

from __future__ import annotations

import glob
import os
import shutil

from setuptools import Extension, find_packages, setup
from setuptools.command.build_py import build_py

PTH = os.path.join("runtime_patches", "a2acc-jit.pth")
ROOTS = {
    "a2acc": "compiler",
    "a2acc.backends": "backends",
    "a2acc.runtime": "runtime_patches",
    "a2acc.topologies": "topologies",
}


def package_dirs() -> dict[str, str]:
    out: dict[str, str] = {}
    for name, root in ROOTS.items():
        out[name] = root
        for sub in find_packages(root):
            out[f"{name}.{sub}"] = os.path.join(root, *sub.split("."))
    return dict(sorted(out.items()))


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        if not getattr(self, "editable_mode", False):
            shutil.copyfile(PTH, os.path.join(self.build_lib, "a2acc-jit.pth"))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        extra = (
            [] if getattr(self, "editable_mode", False) else [os.path.join(self.build_lib, "a2acc-jit.pth")]
        )
        return [*super().get_outputs(include_bytecode), *extra]


def native_extensions() -> list[Extension]:
    return [
        Extension(
            f"a2acc._{os.path.splitext(os.path.basename(src))[0]}",
            [src],
            depends=sorted(glob.glob(os.path.join("compiler", "native", "*.h"))),
            optional=True,
            extra_compile_args=["-O2"],
        )
        for src in sorted(glob.glob(os.path.join("compiler", "native", "*.c")))
    ]


DIRS = package_dirs()
setup(
    packages=list(DIRS),
    package_dir=DIRS,
    ext_modules=native_extensions(),
    cmdclass={"build_py": BuildPyWithPth},
)
