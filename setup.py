"""`pip install .`: dp_engine (python/dp_engine) and the exporter (tools/dp_export), with the extension
dp_engine._core built by CMake in build-pip/ for the Python running pip (pyproject.toml has the rest)."""
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


class CMakeExtension(build_ext):
    def build_extension(self, ext):
        build = os.path.join(ROOT, "build-pip")
        # CUDA where this machine has a GPU (as tools/setup.sh decides): the kernels take long to compile
        cuda = "ON" if shutil.which("nvidia-smi") and subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0 else "OFF"
        generator = ["-G", "Ninja"] if shutil.which("ninja") else []
        subprocess.run(["cmake", *generator, "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", f"-DDP_CUDA={cuda}",
                        f"-DPython_EXECUTABLE={sys.executable}"], check=True)
        subprocess.run(["cmake", "--build", build, "-j", str(os.cpu_count() or 1), "--target", "dp_engine_core"], check=True)
        built = next(f for f in os.listdir(os.path.join(build, "python", "dp_engine")) if f.startswith("_core"))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copy(os.path.join(build, "python", "dp_engine", built), target)


# setuptools' own folders beside CMake's, not in build/ (tools/setup.sh's tree)
os.makedirs(os.path.join(ROOT, "build-pip"), exist_ok=True)
setup(
    options={"build": {"build_base": "build-pip/setuptools"}, "egg_info": {"egg_base": "build-pip"}},
    packages=["dp_engine", "dp_export"],
    package_dir={"dp_engine": "python/dp_engine", "dp_export": "tools/dp_export"},
    package_data={"dp_engine": ["*.pyi", "py.typed"]},
    ext_modules=[Extension("dp_engine._core", sources=[])],
    cmdclass={"build_ext": CMakeExtension},
)
