"""serve/cli.py's local cluster: its replicas run at the server's own priority."""

from __future__ import annotations

import os


def test_replicas_are_not_niced_below_the_server(ray_cluster):
    @ray_cluster.remote
    def niceness() -> int:
        return os.nice(0)

    # Ray's default adds 15: a replica would give way to every other process on a shared CPU.
    assert ray_cluster.get(niceness.remote(), timeout=60) == os.nice(0)
