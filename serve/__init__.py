"""Scriptorium on Ray Serve: model bundles as deployments behind an OpenAI-compatible `/v1` API.

By job: `serve.protocol` declares both routes' request and response bodies (pydantic, the
OpenAPI schema's); `serve.api` (completions) and `serve.chat` (chat) map requests onto
`runtime.GenerationConfig`, do a replica's work on a generator and build the responses (no Ray
needed); `serve.routes` is what differs between the two routes, so that both run through one
template in `serve.gateway` (the FastAPI ingress: auth, bodies, routing, streaming) and
`serve.replica` (`ModelServer`, one loaded bundle); `serve.deployments` builds the Serve
application; `serve.http_app`, `serve.errors` and `serve.downloads` are the FastAPI app and its
schema, error responses, and model-file downloads; `serve.scoring` is `echo` and token-id
prompts; `serve.cli` is `scriptorium serve`, and `serve.ray_guard` keeps Ray's own servers to
loopback and behind the API key. The caps on a request are runtime/request_caps.py's.
docs/SCALING.md covers running it on one or several machines.

Layer: serve/ may import runtime, ray[serve] and fastapi; nothing imports serve/ but the
`scriptorium` command and bench/ (docs/DESIGN.md, "Layers").
"""
