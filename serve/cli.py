"""`scriptorium serve` (or `python -m serve`): serve model bundles behind `/v1`, from this one
process (serve/one_process.py) or, with `--ray` or a flag only Ray honours, on Ray Serve.

One process, the default on one machine: one `ModelServer` replica per bundle found under
`--models` (default: the shipped models/ and the flagship SmolLM2-135M-Instruct; a GGUF file is
converted once, convert/flagship.py) and the OpenAI-compatible gateway on `--host:--port`, until
Ctrl-C or SIGTERM. On Ray (`--ray`, or `--replicas` above 1, `--autoscale`, `--address`,
`--num-cpus`, `--cpus-per-replica`): starts a local Ray cluster, or joins one with `--address`,
deploys one `ModelServer` deployment per bundle and the same gateway, then serves until
interrupted (Ctrl-C or SIGTERM stop a local cluster within seconds; on a cluster joined with
`--address`, Ctrl-C deletes the application). When the replicas would reserve more CPUs than
the cluster has and `--cpus-per-replica` is not given, each replica reserves a share of the
cluster's CPUs instead (`fit_cpus`), so every model is placed and the server becomes ready; it
says so. The client limits
(`--max-body-bytes`, `--max-prompt-chars`, `--max-sequences`, `--max-downloads`) and `--api-key` are
docs/SCALING.md's "Limits" and "Authentication". docs/SCALING.md shows how to run it on several
machines.
"""

from __future__ import annotations

import argparse
import errno
import ipaddress
import math
import os
import signal
import stat
import sys
import threading
from pathlib import Path

from convert.flagship import FetchError, gguf_support, model_roots
from runtime.engine import parse_kv_budget
from runtime.request_caps import SERVE_LIMITS

ROOT = Path(__file__).resolve().parent.parent
# Tokenized text generators. Masked LMs, word vectors and the character-level paraphraser have
# no completion semantics (or no tokenizer) and stay with the in-process app.
COMPLETION_TASKS = ("causal-lm", "seq2seq")
DEFAULT_MODELS = ROOT / "models"
MODELS_RULE = "`--models` must be a model directory, a .gguf file or hf://org/repo[/file.gguf]"


def model_specs(
    roots,
    replicas=1,
    threads=1,
    cpus=None,
    autoscale=None,
    concurrency=SERVE_LIMITS.concurrency,
    max_ongoing=SERVE_LIMITS.max_ongoing,
):
    """A `ModelSpec` per text-completion bundle under `roots` (tasks in `COMPLETION_TASKS`);
    ids are paths relative to their root ("bible-lm/int8"), as runtime.loading's `find_bundles`
    names them."""
    from runtime.loading import find_bundles

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
    from runtime.manifest import Manifest

    manifest = Path(path) / "manifest.json"
    return not manifest.exists() or Manifest.read(manifest).task in COMPLETION_TASKS


def check_models_value(value: str) -> None:
    """ValueError, before anything is loaded or fetched, when a local `--models` value cannot
    name models: it must be a directory or a `.gguf` file (`hf://` values are checked by the
    Hub's parser as they are fetched). Says what the path is instead: missing, a symlink loop,
    a FIFO, a socket, a device, another file."""
    if value.startswith("hf://"):
        return
    try:
        mode = os.stat(value).st_mode
    except OSError as error:
        what = "a symlink loop" if error.errno == errno.ELOOP else error.strerror.lower()
        raise ValueError(f"{MODELS_RULE}, got {value!r}: {what}") from None
    if stat.S_ISDIR(mode) or (stat.S_ISREG(mode) and value.endswith(".gguf")):
        return
    kinds = {stat.S_ISFIFO: "a FIFO", stat.S_ISSOCK: "a socket", stat.S_ISCHR: "a device"}
    what = next((kind for test, kind in kinds.items() if test(mode)), "not a .gguf file")
    raise ValueError(f"{MODELS_RULE}, got {value!r}: {what}")


def _one_line(error: BaseException) -> str:
    """An error's message on one line (a Hub or file-system message may span several)."""
    return " ".join(str(error).split()) or type(error).__name__


def exposure_warning(host: str, api_key: str | None) -> str | None:
    """What to tell an operator who serves on `host` without an API key, when `host` is not a
    loopback address (None when it is, or when there is a key).

    >>> exposure_warning("127.0.0.1", None) is None, exposure_warning("0.0.0.0", "k") is None
    (True, True)
    >>> exposure_warning("0.0.0.0", None).split(":")[0]
    'listening on 0.0.0.0 without an API key'
    """
    if api_key or host == "localhost" or _is_loopback(host):
        return None
    return (
        f"listening on {host} without an API key: anyone who can reach this machine can run "
        "the models; set --api-key or $SCRIPTORIUM_API_KEY"
    )


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name: only "localhost" is known to stay on this machine
        return False


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


def fit_cpus(specs, cluster_cpus: float):
    """`specs` with each replica's CPU reservation scaled down so that all of them fit in
    `cluster_cpus` (specs with an explicit `cpus` are kept), and a sentence saying what was
    done (None when everything fits as asked). Replicas count at their minimum when autoscaling.

    >>> from serve.deployments import ModelSpec
    >>> fitted, said = fit_cpus([ModelSpec(str(i), ".") for i in range(4)], 2)
    >>> [s.cpus for s in fitted], said.split(":")[0]
    ([0.5, 0.5, 0.5, 0.5], '4 replicas would reserve 4 CPUs on a 2-CPU cluster')
    >>> sum(s.cpus for s in fit_cpus([ModelSpec(str(i), ".") for i in range(7)], 2)[0]) <= 2
    True
    """
    import dataclasses

    def replicas(spec):
        return max(spec.autoscaling[0], 1) if spec.autoscaling else spec.replicas

    wanted = sum(replicas(s) * (s.threads if s.cpus is None else s.cpus) for s in specs)
    if wanted <= cluster_cpus or any(s.cpus is not None for s in specs):
        return list(specs), None
    share = cluster_cpus / wanted
    # rounded down: seven replicas at round(2/7, 3) = 0.286 would ask for 2.002 CPUs of 2
    fitted = [
        dataclasses.replace(s, cpus=math.floor(s.threads * share * 1000) / 1000) for s in specs
    ]
    count = sum(replicas(s) for s in specs)
    said = (
        f"{count} replicas would reserve {wanted:g} CPUs on a {cluster_cpus:g}-CPU cluster: "
        f"each reserves {share:.3g} of its {specs[0].threads} instead (they share the cores)"
    )
    return fitted, said


def cluster_cpus() -> float:
    """The Ray cluster's CPUs (this machine's when no cluster is connected)."""
    import ray

    if not ray.is_initialized():
        return float(os.cpu_count() or 1)
    return float(ray.cluster_resources().get("CPU", 1))


def limits_from(values: dict):
    """`ServeLimits` (runtime/request_caps.py) from flag values (None or absent: the default)."""
    from runtime.request_caps import ServeLimits

    fields = ("max_body_bytes", "max_prompt_chars", "max_sequences", "max_downloads")
    return ServeLimits(**{k: int(values[k]) for k in fields if values.get(k) is not None})


def application(args: dict):
    """A Serve application builder, for `serve run` / a Serve config file / a KubeRay
    RayService: `import_path: serve.cli:application` with `args` named like this command's
    flags, e.g. {"models": ["/models"], "replicas": 2, "threads_per_replica": 1,
    "max_body_bytes": 1048576, "api_key": "…", "batching": false}."""
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
        int(args.get("concurrency", SERVE_LIMITS.concurrency)),
        int(args.get("max_ongoing", SERVE_LIMITS.max_ongoing)),
    )
    specs = batching_specs(specs, bool(args.get("batching", True)))
    specs = budget_specs(specs, parse_kv_budget(args.get("kv_budget")))
    specs, said = fit_cpus(specs, cluster_cpus())
    if said:
        print(said)
    return build_app(specs, limits_from(args), args.get("api_key"))


def connect(
    address: str | None = None, num_cpus: int | None = None, api_key: str | None = None
) -> None:
    """Join the Ray cluster at `address`, or start a local one whose workers import this
    checkout's packages (on a cluster, install scriptorium on every node instead). Ray's own
    servers are kept to what serve/ray_guard.py allows (`api_key` on its proxy's routes)."""
    import ray

    from . import ray_guard

    if address:
        guard = ray_guard.environment(api_key, local=False)
        ray.init(address=address, runtime_env={"env_vars": guard} if guard else None)
        return
    _loopback_only()
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env |= ray_guard.environment(api_key, local=True)
    # "local": always a new cluster, never one that another process started on this machine.
    # Ray starts its workers at niceness 15, so on a shared CPU the replicas would give way to
    # any other process; they run at the server's own priority, as a llama-server would. No
    # dashboard: serving needs none of it (deployments run through Serve's controller, /metrics
    # is the gateway's), and its head and ten module processes took 274 of the idle cluster's
    # 1,682 MB PSS (docs/SCALING.md, "Memory"). Ray then runs its head in a minimal mode, without
    # the state API or the dashboard's port.
    ray.init(
        address="local",
        num_cpus=num_cpus,
        include_dashboard=False,
        runtime_env={"env_vars": env},
        _system_config={"worker_niceness": 0},
    )


# Ray's switch for single-machine clusters (what it uses on macOS and Windows): the node's
# address is the loopback one, so its GCS, raylet, workers, agents and metrics ports listen on
# 127.0.0.1 only. `_node_ip_address="127.0.0.1"` cannot do it: Ray swaps a loopback address for
# the machine's own. On Linux, without it, they listen on every interface (measured: 13 ports,
# 3 of them Prometheus metrics without authentication).
LOOPBACK_VARIABLE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def _loopback_only() -> None:
    """Make the local cluster that `ray.init` starts next listen on 127.0.0.1 only: its
    processes read `LOOPBACK_VARIABLE` from the environment when they start, and this process
    read it when it imported Ray, so its copy is set too."""
    from ray._private import ray_constants

    os.environ[LOOPBACK_VARIABLE] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


def deploy(specs, host: str = "127.0.0.1", port: int = 8000, limits=None, api_key=None):
    """Start Serve's HTTP proxy on host:port and run the application; returns its handle."""
    from ray import serve

    from .deployments import build_app

    serve.start(http_options={"host": host, "port": port})
    app = build_app(specs, limits or SERVE_LIMITS, api_key)
    return serve.run(app, name="scriptorium", route_prefix="/")


def batching_specs(specs, batching: bool = True):
    """`specs` with batching decided per model. With `batching` (the default), a replica whose
    model batches (`batches`) runs every request it accepts at once, in its engine's batch
    (runtime/engine.py), instead of `concurrency` loops; other models keep their loops. Without
    it (`--no-batching`), every replica loads its model with `batching=False`."""
    import dataclasses
    import functools

    import runtime

    if not batching:
        loader = functools.partial(runtime.load, batching=False)
        return [dataclasses.replace(s, loader=loader) for s in specs]
    return [
        dataclasses.replace(s, concurrency=s.max_ongoing_requests) if batches(s.path) else s
        for s in specs
    ]


def budget_specs(specs, kv_budget: int | None):
    """`specs` with `kv_budget` (bytes of KV cache per engine batch; None: the engine's
    default, runtime/engine.py's `MAX_CACHE_BYTES`) for every model."""
    import dataclasses

    return [dataclasses.replace(s, kv_budget=kv_budget) for s in specs]


def batches(path) -> bool:
    """Whether `runtime.load(path)` batches: a causal LM whose manifest says `batch_invariant`."""
    from runtime.bundle import read_manifest
    from runtime.engine import uses_engine

    return uses_engine(read_manifest(path, verify=False), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scriptorium serve", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--models",
        action="append",
        default=None,
        help=f"model directory or GGUF (repeatable); {gguf_support()}",
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
        "--concurrency",
        type=int,
        default=SERVE_LIMITS.concurrency,
        help="generations one replica runs at once",
    )
    parser.add_argument(
        "--max-ongoing",
        type=int,
        default=SERVE_LIMITS.max_ongoing,
        help="requests one replica accepts (others queue)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="HTTP address (0.0.0.0: all)")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port")
    parser.add_argument("--address", default=None, help="join this Ray cluster (e.g. auto)")
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local cluster")
    parser.add_argument(
        "--api-key",
        default=os.environ.get("SCRIPTORIUM_API_KEY"),
        help="require `Authorization: Bearer KEY` on /v1 (default: $SCRIPTORIUM_API_KEY; none)",
    )
    parser.add_argument(
        "--max-body-bytes", type=int, default=None, help="largest request body (default 1 MiB)"
    )
    parser.add_argument(
        "--max-prompt-chars", type=int, default=None, help="characters per prompt (default 32768)"
    )
    parser.add_argument(
        "--max-sequences",
        type=int,
        default=None,
        help="prompts × n × num_beams per request (default 64)",
    )
    parser.add_argument(
        "--max-downloads", type=int, default=None, help="file downloads at once (default 4)"
    )
    parser.add_argument(
        "--kv-budget",
        default=None,
        help="KV cache of a replica's batch and prefix cache, bytes or with K, M, G (default 2G)",
    )
    parser.add_argument(
        "--ray",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="serve on Ray Serve (default: only with a flag only Ray honours; else this one "
        "process, one replica per model)",
    )
    parser.add_argument(
        "--no-batching",
        dest="batching",
        action="store_false",
        help="one decode loop per request, even where a replica could batch them step by step",
    )
    args = parser.parse_args(argv)
    limit_flags = ("max_body_bytes", "max_prompt_chars", "max_sequences", "max_downloads")
    for name in ("replicas", "threads_per_replica", "concurrency", "max_ongoing", *limit_flags):
        if getattr(args, name) is None:
            continue
        if getattr(args, name) < 1:
            parser.error(f"`--{name.replace('_', '-')}` must be >= 1, got {getattr(args, name)}")
    try:
        autoscale = parse_autoscale(args.autoscale)
        kv_budget = parse_kv_budget(args.kv_budget)
        if args.ray is False:
            check_without_ray(args)
        args.ray = wants_ray(args)
    except ValueError as error:
        parser.error(str(error))
    try:
        for value in args.models or []:
            check_models_value(value)
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
            raise ValueError(
                "`--models` must name model bundles (folders with a manifest.json, or folders "
                f"of them), got {', '.join(map(str, roots))}, which holds none"
            )
        specs = budget_specs(batching_specs(specs, args.batching), kv_budget)
    except (FetchError, OSError, RuntimeError, ValueError) as error:  # bad input: one line
        print(f"{parser.prog}: error: {_one_line(error)}", file=sys.stderr)
        return 2
    if (warning := exposure_warning(args.host, args.api_key)) is not None:
        print(f"{parser.prog}: warning: {warning}", file=sys.stderr, flush=True)
    if not args.ray:
        serve_without_ray(specs, args)
        return 0
    connect(args.address, args.num_cpus, args.api_key)
    # After ray.init: its core worker installs a handler of its own that aborts the driver.
    # Ours turns SIGTERM into the same clean stop as Ctrl-C, also while deploy() still waits.
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        if args.cpus_per_replica is None:
            specs, said = fit_cpus(specs, cluster_cpus())
            if said:
                print(said, flush=True)
        deploy(specs, args.host, args.port, limits_from(vars(args)), args.api_key)
        where = f"http://{args.host}:{args.port}/v1"
        print(f"serving {', '.join(s.model_id for s in specs)} at {where}", flush=True)
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        shut_down(joined=bool(args.address))
    return 0


RAY_ONLY_FLAGS = ("address", "num_cpus", "cpus_per_replica", "autoscale")


def ray_only_flags(args: argparse.Namespace) -> list[str]:
    """The flags given that only Ray can honour (more than one replica, autoscaling, a cluster,
    Ray's CPU reservations), as written on the command line."""
    given = [name for name in RAY_ONLY_FLAGS if getattr(args, name) is not None]
    if args.replicas != 1:
        given.insert(0, "replicas")
    return [f"`--{name.replace('_', '-')}`" for name in given]


def wants_ray(args: argparse.Namespace) -> bool:
    """Whether to serve on Ray: as `--ray` / `--no-ray` say, else only when a flag only Ray
    honours is given (one process is the better server on one machine: docs/SCALING.md).

    >>> flags = dict(replicas=1, address=None, num_cpus=None, cpus_per_replica=None)
    >>> [wants_ray(argparse.Namespace(ray=ray, autoscale=None, **flags)) for ray in (None, True)]
    [False, True]
    >>> wants_ray(argparse.Namespace(ray=None, autoscale="1:2", **flags))
    True
    """
    return args.ray if args.ray is not None else bool(ray_only_flags(args))


def check_without_ray(args: argparse.Namespace) -> None:
    """ValueError when `--no-ray` comes with a flag only Ray can honour."""
    if flags := ray_only_flags(args):
        raise ValueError(
            f"`--no-ray` serves one replica per model on this machine, got {', '.join(flags)}"
        )


def serve_without_ray(specs, args: argparse.Namespace) -> None:
    """serve/one_process.py's server on --host:--port until SIGINT or SIGTERM."""
    from . import one_process

    where = f"http://{args.host}:{args.port}/v1"
    models = ", ".join(s.model_id for s in specs)
    one_process.run(
        specs,
        args.host,
        args.port,
        limits_from(vars(args)),
        args.api_key,
        ready=lambda: print(f"serving {models} at {where} (one process)", flush=True),
    )


def _interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def shut_down(joined: bool) -> None:
    """Stop serving: delete the application on a joined cluster (its other applications and
    the cluster keep running); stop a local cluster outright, which ends every replica at once
    (Serve's own shutdown drains each replica in turn, ≈ 10–45 s here)."""
    import ray
    from ray import serve

    if joined:
        serve.delete("scriptorium")
    ray.shutdown()
