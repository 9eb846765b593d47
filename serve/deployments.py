"""The Serve application: `build_app(specs)` deploys one `ModelServer` per model bundle and the
`Gateway` that fronts them.

Each `ModelSpec` becomes a deployment (named by `deployment_name`) whose replicas each load the
bundle once (serve/replica.py), Ray reserving `cpus` per replica, with a fixed replica count or
autoscaling on the requests each replica has in flight; one `Gateway` ingress (serve/gateway.py)
receives every HTTP request and routes it by its `model` to that model's deployment handle,
under the client limits it was given (`ServeLimits`) and, when given, an API key. What a
request may ask is serve/protocol.py's and runtime/request_caps.py's; how a replica answers it,
serve/replica.py's. docs/SCALING.md covers running it on one or several machines.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

from ray import serve

import runtime
from runtime.request_caps import SERVE_LIMITS, ServeLimits
from runtime.text_generator import ServedGenerator

from .gateway import GatewayIngress
from .replica import ModelServer


@dataclass(frozen=True)
class ModelSpec:
    model_id: str  # the id clients name in `model` (e.g. "bible-lm/int8")
    path: str  # bundle directory; on a multi-node cluster it must exist on every node
    replicas: int = 1  # replicas when not autoscaling
    threads: int = 1  # onnxruntime intra-op threads per replica
    cpus: float | None = None  # CPUs Ray reserves per replica; None = `threads`
    autoscaling: tuple[int, int] | None = None  # (min, max) replicas; None = fixed `replicas`
    # generations one replica runs at once (without an engine that batches)
    concurrency: int = SERVE_LIMITS.concurrency
    # requests a replica accepts; those beyond `concurrency` queue
    max_ongoing_requests: int = SERVE_LIMITS.max_ongoing
    loader: Callable[..., ServedGenerator] = field(default=runtime.load)  # (path, threads=)
    kv_budget: int | None = None  # bytes of KV cache per engine batch; None: the engine's default


def deployment_name(model_id: str) -> str:
    """A Ray deployment name for a model id ("bible-lm/int8" -> "model:bible-lm_int8").

    >>> deployment_name("bible-lm/int8")
    'model:bible-lm_int8'
    """
    return "model:" + re.sub(r"[^A-Za-z0-9._-]", "_", model_id)


def build_app(
    specs: list[ModelSpec], limits: ServeLimits = SERVE_LIMITS, api_key: str | None = None
) -> serve.Application:
    """The Serve application: a `ModelServer` deployment per spec behind one `Gateway`, which
    enforces `limits` and, when given, `api_key`."""
    if not specs:
        raise ValueError("`models` must name at least one model bundle, got none")
    handles = {}
    for spec in specs:
        options = {
            "name": deployment_name(spec.model_id),
            "ray_actor_options": {"num_cpus": spec.threads if spec.cpus is None else spec.cpus},
            "max_ongoing_requests": spec.max_ongoing_requests,
        }
        if spec.autoscaling:
            low, high = spec.autoscaling
            options["num_replicas"] = "auto"
            options["autoscaling_config"] = {
                "min_replicas": low,
                "max_replicas": high,
                "target_ongoing_requests": spec.concurrency,
            }
        else:
            options["num_replicas"] = spec.replicas
        deployment = serve.deployment(ModelServer).options(**options)
        handles[spec.model_id] = deployment.bind(
            spec.path, spec.threads, spec.concurrency, spec.loader, spec.kv_budget
        )
    gateway = serve.deployment(GatewayIngress).options(
        name="gateway", ray_actor_options={"num_cpus": 0}, max_ongoing_requests=1000
    )
    paths = {spec.model_id: spec.path for spec in specs}
    return gateway.bind(handles, paths, limits, api_key)
