"""Build hook: ship ``a2acc-jit.pth`` at the root of site-packages (project metadata lives in pyproject.toml).

Python runs ``import`` lines of ``.pth`` files at interpreter start; ours only reads ``A2ACC_JIT`` and does
nothing else when it is unset (see runtime_patches/activate.py).
"""

from __future__ import annotations

import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = os.path.join("runtime_patches", "a2acc-jit.pth")


class BuildPyWithPth(build_py):
    def run(self) -> None:
        super().run()
        shutil.copyfile(PTH, os.path.join(self.build_lib, "a2acc-jit.pth"))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, "a2acc-jit.pth")]


class EditableWheelWithPth(editable_wheel):
    def _create_wheel_file(self, bdist_wheel):  # type: ignore[no-untyped-def]
        # editable installs: add the hook next to setuptools' own editable .pth inside the wheel
        orig = self._run_build_commands

        def run_build_commands(dist_name, unpacked_wheel, build_lib, tmp_dir):  # type: ignore[no-untyped-def]
            res = orig(dist_name, unpacked_wheel, build_lib, tmp_dir)
            shutil.copyfile(PTH, os.path.join(unpacked_wheel, "a2acc-jit.pth"))
            return res

        self._run_build_commands = run_build_commands  # type: ignore[method-assign]
        return super()._create_wheel_file(bdist_wheel)


setup(cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth})
