"""Scriptorium on Ray Serve: model bundles as deployments behind an OpenAI-compatible `/v1` API.

`serve.api` maps OpenAI completion requests onto `runtime.GenerationConfig` and builds the
responses (no Ray needed); `serve.deployments` holds the Ray Serve deployments; `serve.cli` is
`scriptorium serve`. docs/SCALING.md covers running it on one or several machines.

Layer: serve/ may import runtime, ray[serve] and fastapi; nothing imports serve/ but the
`scriptorium` command and bench/ (docs/DESIGN.md, "Layers").
"""
