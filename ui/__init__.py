"""The app's tabs, one small module each, and what they share: the model registry, input limits
and validation (`ui.checks`), widgets, plots, links, streaming, and the pure metrics the tabs show.

Layer: ui/ may import runtime, study and gradio; only app.py and spaces/ import ui/ (library code
that others need lives in runtime/ or study/; docs/DESIGN.md, "Layers").
"""
