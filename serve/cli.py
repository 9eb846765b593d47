"""`scriptorium serve` (or `python -m serve`): deploy model bundles on Ray Serve behind `/v1`.

Starts a local Ray cluster, or joins one with `--address`, deploys one `ModelServer` deployment
per bundle found under `--models` (default: the shipped models/ and the flagship
SmolLM2-135M-Instruct; a GGUF file is converted once, export/flagship.py) and the OpenAI-compatible
gateway on `--host:--port`, then serves until interrupted. docs/SCALING.md shows how to run it
on several machines.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import threading
from pathlib import Path

from export.flagship import model_roots

ROOT = Path(__file__).resolve().parent.parent
# Tokenized text generators. Masked LMs, word vectors and the character-level paraphraser have
# no completion semantics (or no tokenizer) and stay with the in-process app.
COMPLETION_TASKS = ("causal-lm", "seq2seq")
DEFAULT_MODELS = ROOT / "models"


def model_specs(
    roots, replicas=1, threads=1, cpus=None, autoscale=None, concurrency=4, max_ongoing=64
):
    """A `ModelSpec` per text-completion bundle under `roots` (tasks in `COMPLETION_TASKS`);
    ids are paths relative to their root ("bible-lm/int8"), as ui/registry.py's `find_bundles`
    names them."""
    from ui.registry import find_bundles

    from .deployments import ModelSpec

    return [
        ModelSpec(
            model_id=relative.as_posix(),
            path=str(path.resolve()),
            replicas=replicas,
            threads=threads,
            cpus=cpus,
            autoscaling=autoscale,
            concurrency=concurrency,
            max_ongoing_requests=max_ongoing,
        )
        for _, relative, path in find_bundles(roots)
        if serves_completions(path)
    ]


def serves_completions(path: Path) -> bool:
    """Whether a model directory is one `/v1/completions` can serve: a plain optimum export
    (no manifest) or a bundle whose task is in `COMPLETION_TASKS`."""
    manifest = Path(path) / "manifest.json"
    return not manifest.exists() or json.loads(manifest.read_text()).get("task") in COMPLETION_TASKS


def parse_autoscale(text: str | None) -> tuple[int, int] | None:
    """ "MIN:MAX" -> (MIN, MAX).

    >>> parse_autoscale("1:4"), parse_autoscale(None)
    ((1, 4), None)
    """
    if text is None:
        return None
    low, sep, high = text.partition(":")
    valid = sep and low.isdigit() and high.isdigit() and int(low) <= int(high) and int(high) >= 1
    if not valid:
        raise ValueError(
            f"`--autoscale` must be MIN:MAX with 0 <= MIN <= MAX and MAX >= 1, got {text!r}"
        )
    return int(low), int(high)


def application(args: dict):
    """A Serve application builder, for `serve run` / a Serve config file / a KubeRay
    RayService: `import_path: serve.cli:application` with `args` named like this command's
    flags, e.g. {"models": ["/models"], "replicas": 2, "threads_per_replica": 1}."""
    from .deployments import build_app

    models = args.get("models")  # the default set includes the flagship
    roots = model_roots(models or [DEFAULT_MODELS], flagship=not models)
    autoscale = parse_autoscale(args.get("autoscale"))
    specs = model_specs(
        roots,
        int(args.get("replicas", 1)),
        int(args.get("threads_per_replica", 1)),
        args.get("cpus_per_replica"),
        autoscale,
        int(args.get("concurrency", 4)),
        int(args.get("max_ongoing", 64)),
    )
    return build_app(specs)


def connect(address: str | None = None, num_cpus: int | None = None) -> None:
    """Join the Ray cluster at `address`, or start a local one whose workers import this
    checkout's packages (on a cluster, install scriptorium on every node instead)."""
    import ray

    if address:
        ray.init(address=address)
        return
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    ray.init(num_cpus=num_cpus, runtime_env={"env_vars": env})


def deploy(specs, host: str = "127.0.0.1", port: int = 8000):
    """Start Serve's HTTP proxy on host:port and run the application; returns its handle."""
    from ray import serve

    from .deployments import build_app

    serve.start(http_options={"host": host, "port": port})
    return serve.run(build_app(specs), name="scriptorium", route_prefix="/")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scriptorium serve", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models", action="append", default=None, help="model directory or GGUF (repeatable)"
    )
    parser.add_argument("--replicas", type=int, default=1, help="replicas per model")
    parser.add_argument(
        "--threads-per-replica", type=int, default=1, help="onnxruntime threads per replica"
    )
    parser.add_argument(
        "--cpus-per-replica", type=float, default=None, help="CPUs Ray reserves (default: threads)"
    )
    parser.add_argument("--autoscale", default=None, help="MIN:MAX replicas, instead of --replicas")
    parser.add_argument(
        "--concurrency", type=int, default=4, help="generations one replica runs at once"
    )
    parser.add_argument(
        "--max-ongoing", type=int, default=64, help="requests one replica accepts (others queue)"
    )
    parser.add_argument("--host", default="127.0.0.1", help="HTTP address (0.0.0.0: all)")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port")
    parser.add_argument("--address", default=None, help="join this Ray cluster (e.g. auto)")
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local cluster")
    args = parser.parse_args(argv)
    for name in ("replicas", "threads_per_replica", "concurrency", "max_ongoing"):
        if getattr(args, name) < 1:
            parser.error(f"`--{name.replace('_', '-')}` must be >= 1, got {getattr(args, name)}")
    try:
        autoscale = parse_autoscale(args.autoscale)
    except ValueError as error:
        parser.error(str(error))
    roots = model_roots(args.models or [DEFAULT_MODELS], flagship=not args.models)
    specs = model_specs(
        roots,
        args.replicas,
        args.threads_per_replica,
        args.cpus_per_replica,
        autoscale,
        args.concurrency,
        args.max_ongoing,
    )
    if not specs:
        parser.error(f"no model bundles under {', '.join(map(str, roots))}")
    connect(args.address, args.num_cpus)
    deploy(specs, args.host, args.port)
    print(f"serving {', '.join(s.model_id for s in specs)} at http://{args.host}:{args.port}/v1")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        stop.wait()
    except KeyboardInterrupt:
        pass
    from ray import serve

    serve.shutdown()
    return 0
