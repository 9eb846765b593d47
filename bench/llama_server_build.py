"""llama-server, the serving peer of bench/serve_peers.py, built once per machine from the
llama.cpp that llama-cpp-python `PEER_VERSION`'s sdist vendors (the same llama.cpp bench/llm.py
runs), and cached under the benchmarks' work folder. It does not run the server.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

PEER_VERSION = "0.3.36"  # llama-cpp-python, the installed peer of bench/llm.py
PEER_LLAMA_CPP_COMMIT = "0c1e57098"  # what its CHANGELOG says 0.3.36 vendors
CMAKE_OPTIONS = (
    "-G",
    "Ninja",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_OPENSSL=OFF",  # the server listens on 127.0.0.1 over plain HTTP
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # else the build downloads the web UI
    f"-DLLAMA_BUILD_COMMIT={PEER_LLAMA_CPP_COMMIT}",  # no git in an sdist: `--version` says it
)
BUILD_JOBS = 2


def peer_folder(work: Path) -> Path:
    return Path(work).expanduser() / "llama-server" / PEER_VERSION


def peer_binary(work: Path) -> Path:
    """Where the built `llama-server` is cached; it is copied there only once a build is done."""
    return peer_folder(work) / "llama-server"


def build_peer(work: Path) -> Path:
    """`llama-server` built from llama-cpp-python `PEER_VERSION`'s sdist (downloaded by pip into
    `peer_folder(work)`), niced, with `BUILD_JOBS` jobs; the cached binary when there is one.
    RuntimeError naming the log when a step fails."""
    folder = peer_folder(work)
    binary = peer_binary(work)
    if binary.is_file():
        return binary
    folder.mkdir(parents=True, exist_ok=True)
    sdist = folder / f"llama_cpp_python-{PEER_VERSION}.tar.gz"
    if not sdist.is_file():
        _logged_step(
            [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
            + [f"llama-cpp-python=={PEER_VERSION}", "-d", str(folder)],
            folder / "download.log",
        )
    source = folder / sdist.name.removesuffix(".tar.gz") / "vendor" / "llama.cpp"
    if not source.is_dir():
        shutil.unpack_archive(sdist, folder)
    build = folder / "build"
    niced = ["nice", "-n", "19"]
    print(f"building llama-server {PEER_VERSION} in {build} (≈ 10+ minutes on 2 cores)", flush=True)
    _logged_step(
        [*niced, "cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS],
        folder / "configure.log",
    )
    _logged_step(
        [*niced, "cmake", "--build", str(build), "--target", "llama-server", "-j", str(BUILD_JOBS)],
        folder / "build.log",
    )
    partial = folder / "llama-server.partial"
    shutil.copy2(build / "bin" / "llama-server", partial)
    os.replace(partial, binary)
    return binary


def _logged_step(command: list[str], log: Path) -> None:
    with open(log, "w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"`{' '.join(command[:4])} …` failed (exit {done.returncode}): {log}")


def peer_or_reason(work: Path, build: bool) -> tuple[Path | None, str | None]:
    """(the llama-server binary, None), or (None, why the peer is skipped): not cached and
    `build` is off, or the build failed."""
    binary = peer_binary(work)
    if binary.is_file():
        return binary, None
    if not build:
        return None, (
            f"llama-server {PEER_VERSION} is not built in {peer_folder(work)}: run without "
            "--no-build to build it once (cmake, g++, ≈ 10+ minutes)"
        )
    try:
        return build_peer(work), None
    except (OSError, RuntimeError) as error:
        return None, f"llama-server could not be built: {error}"


def peer_version(binary: Path) -> str:
    """What `llama-server --version` prints (llama.cpp's version, commit, compiler, target)."""
    done = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    return (done.stdout + done.stderr).strip()
