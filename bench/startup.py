"""App startup time on the shipped models: from `python app.py` to the page answering HTTP 200.

    python -m bench.startup [--repeats 3] [--models DIR] [--out FILE]

Starts `app.py` in a fresh Python process (imports, manifest reading, building every tab, Gradio's
server) `--repeats` times on a free port and reports the median seconds until GET / returns 200.
The models themselves load in a background thread after the page is up (docs/APP.md), so this is
the wait a user sees. It measures nothing else and needs no torch.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from . import common

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT_SECONDS = 120


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def seconds_to_first_page(extra_models: list[str]) -> float:
    """Seconds from starting `python app.py` until its page answers; the app is then stopped."""
    port = _free_port()
    command = [sys.executable, str(ROOT / "app.py"), "--port", str(port)]
    for directory in extra_models:
        command += ["--models", directory]
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - start < TIMEOUT_SECONDS:
            if process.poll() is not None:
                raise RuntimeError(f"app.py exited with status {process.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=1) as response:
                    if response.status == 200:
                        return time.perf_counter() - start
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"app.py did not answer within {TIMEOUT_SECONDS} s")
    finally:
        process.terminate()
        process.wait(timeout=30)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", action="append", default=[], help="extra model directory")
    parser.add_argument("--out", type=Path, default=common.RESULTS / "startup.json")
    args = parser.parse_args(argv)
    runs = [seconds_to_first_page(args.models) for _ in range(args.repeats)]
    models = sorted(p.parent.name + "/" + p.name for p in (ROOT / "models").glob("*/*"))
    median = statistics.median(runs)
    print(f"app startup: median {median:.2f} s over {len(runs)} runs ({', '.join(models)})")
    common.write_results(
        args.out,
        {
            "benchmark": "startup",
            "environment": common.environment(threads=os.cpu_count() or 1),
            "models": models,
            "runs_seconds": runs,
            "table": common.markdown_table(
                ["what", "median seconds", "runs"],
                [["`python app.py` → page answers", f"{median:.2f}", len(runs)]],
            ),
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
