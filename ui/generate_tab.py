"""The Generate tab: prompt, decoding settings, streamed output."""

from __future__ import annotations

import gradio as gr

import runtime


def generate(registry, model_name, prompt, max_new_tokens, do_sample, temperature, top_k, top_p,
             seed):
    """Stream the generated text for one prompt."""
    gen = registry.get(model_name)
    config = runtime.GenerationConfig(
        max_new_tokens=int(max_new_tokens),
        do_sample=bool(do_sample),
        temperature=float(temperature),
        top_k=int(top_k),
        top_p=float(top_p),
        seed=int(seed),
    )
    text = ""
    try:
        for event in gen.stream(prompt, config):
            text += event.text
            yield text
    except ValueError as error:
        raise gr.Error(str(error)) from error


def build(registry) -> None:
    with gr.Tab("Generate"):
        model = gr.Dropdown(registry.names, value=(registry.names or [None])[0], label="Model")
        prompt = gr.Textbox(label="Prompt", value="In the beginning")
        with gr.Row():
            max_new_tokens = gr.Slider(1, 256, value=64, step=1, label="Max new tokens")
            do_sample = gr.Checkbox(value=True, label="Sample")
            temperature = gr.Slider(0.05, 2.0, value=0.8, label="Temperature")
            top_k = gr.Slider(0, 1000, value=50, step=1, label="Top-k (0 = off)")
            top_p = gr.Slider(0.05, 1.0, value=0.95, label="Top-p")
            seed = gr.Number(value=0, precision=0, label="Seed")
        output = gr.Textbox(label="Output", lines=8)
        button = gr.Button("Generate", variant="primary")
        button.click(
            lambda *args: (yield from generate(registry, *args)),
            [model, prompt, max_new_tokens, do_sample, temperature, top_k, top_p, seed],
            output,
            api_name="generate",
        )
