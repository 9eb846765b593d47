"""Components several tabs share: a model picker with its card, decoding settings, and control
pickers built from the models' manifests.

Control pickers: one dropdown per control name that any offered model has (`section`,
`length`, …), listing that control's values plus "(none)"; when the model changes, pickers of
controls it lacks hide and the others list its values. The picked values are gathered into one
`controls` JSON value (a hidden component), which is what the endpoints take, e.g.
`{"section": "gospels"}`. No control name or value is written in code.

Error boxes: `error_box` and `show_errors` keep an event's error readable next to its outputs
until the next run (Gradio's own pop-up closes after 10 s), and empty the outputs the failed run
would have replaced, so no stale result sits under the message. This module does not run models.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import gradio as gr

import runtime
from runtime.parameters import PENALTY_ROW

from . import checks, expectations, safe_text

NONE = "(none)"


def setting_slider(*args, **kwargs) -> gr.Slider:
    """A `gr.Slider` whose range binds only the page: the event function validates the value.

    Gradio's Slider rejects out-of-range values before the event runs, which would (a) reject
    settings the chosen mode ignores (`num_beams=1` in sampling mode), (b) answer API callers
    with a message that does not name the setting, and (c) crash on a string. Every slider and
    number field of the app is made here, and its event checks the value with `ui.checks`, by
    name. (An instance attribute, not a subclass: Gradio writes a .pyi file for subclasses.)
    """
    slider = gr.Slider(*args, **kwargs)
    slider.preprocess = _as_sent
    return slider


def setting_number(*args, **kwargs) -> gr.Number:
    """A `gr.Number` validated by the event function, like `setting_slider`."""
    number = gr.Number(*args, **kwargs)
    number.preprocess = _as_sent
    return number


def _as_sent(payload):
    return payload


# The page's number fields (a slider's box too) silently snap a typed value to their range; this
# note, installed once on page load, says so next to the field: "100000 is above the limit 256;
# set to 256". A value still out of range (a seed field, which does not snap) is refused by the
# event with the limit named.
LIMIT_NOTES = """() => {
  document.addEventListener("change", (event) => {
    const input = event.target;
    if (!(input instanceof HTMLInputElement) || input.type !== "number") return;
    const block = input.closest(".block") || input.parentElement;
    let note = block.querySelector(":scope .limit-note");
    const typed = Number(input.value);
    const low = input.min === "" ? -Infinity : Number(input.min);
    const high = input.max === "" ? Infinity : Number(input.max);
    const snaps = Boolean(block.querySelector("input[type=range]"));
    let text = "";
    if (input.value !== "" && (typed > high || typed < low)) {
      const limit = typed > high ? input.max : input.min;
      text = `${input.value} is ${typed > high ? "above" : "below"} the limit ${limit}`;
      text += snaps ? `; set to ${limit}` : "";
    }
    if (!text) { if (note) note.remove(); return; }
    if (!note) {
      note = document.createElement("div");
      note.className = "limit-note";
      block.appendChild(note);
    }
    note.textContent = text;
  }, true);
}"""


def error_box(elem_id: str) -> gr.Markdown:
    """The message box of a tab's (or section's) errors, hidden until a run fails."""
    return gr.Markdown(visible=False, elem_id=elem_id, elem_classes="error-box")


def show_errors(box: gr.Markdown, event, triggers: list, stale: dict | None = None) -> None:
    """When `event` fails with an error `checks.shown_to_user` raised, show its message in
    `box` and give each `stale` output (component -> its empty value) that value (a stopped
    run changes nothing); each of `triggers` (the event's `button.click`, …) hides
    `box` again when the next run starts."""
    stale = stale or {}

    def failed(request: gr.Request):
        message = checks.last_error(request.session_hash)
        if not message:  # Stop (Gradio runs failure handlers on a cancel too): keep the output
            return [gr.skip()] * (1 + len(stale))
        shown = safe_text.literal(message)  # it may echo what a visitor or a link sent
        return [gr.Markdown(f"**Error:** {shown}", visible=True), *stale.values()]

    event.failure(failed, None, [box, *stale], queue=False, api_visibility="private")
    for trigger in triggers:
        trigger(hidden, None, box, queue=False, api_visibility="private")


def model_note(registry, picker: gr.Dropdown, elem_id: str) -> gr.Markdown:
    """One line on what `picker`'s model is and what to expect of it, kept in step with it."""

    def note(name):
        return expectations.summary(name, registry.manifest(name)) if name else ""

    box = gr.Markdown(note(picker.value), elem_id=elem_id, elem_classes="model-note")
    picker.change(note, picker, box, queue=False, api_visibility="private")
    return box


def loop_warning(elem_id: str) -> gr.Markdown:
    """The box that labels an output as a repetition loop, empty while there is none."""
    return gr.Markdown("", elem_id=elem_id, elem_classes="loop-warning")


def label_loops(box: gr.Markdown, output, texts, what="sample") -> None:
    """Whenever `output` changes, say in `box` which of `texts(output's value)` are repetition
    loops (ui/expectations.py), or empty `box` when none is. (A `.then` after the run would be
    tidier, but Gradio 6.17 does not show what it returns to a Markdown.)"""

    def label(value):
        return expectations.loop_notice(texts(value or ""), what)

    output.change(label, output, box, queue=False, api_visibility="private")


def hidden():
    """An update that hides a component."""
    return gr.update(visible=False)


def model_picker(
    names: list[str],
    label: str = "Model",
    value: str | None = None,
    registry=None,
    elem_id: str | None = None,
) -> gr.Dropdown:
    """A model dropdown with `value` selected, by default the first choice (the best match for
    the tab). With `registry`, seed reproductions are listed as such (expectations.choice_label);
    the value is still the model's name."""
    choices = names
    if registry is not None:
        choices = [(expectations.choice_label(n, registry.manifest(n)), n) for n in names]
    return gr.Dropdown(
        choices,
        value=value or (names[0] if names else None),
        elem_id=elem_id,
        label=label,
        info=None if names else "no suitable model installed",
        interactive=bool(names),
    )


def model_card(registry, picker: gr.Dropdown) -> None:
    """A closed accordion under `picker` with the chosen model's card. The card is sent when the
    accordion opens (and again when the model changes while it is open), not with the page: a
    card with its inlined plots weighs up to 190 KB, and the page's first load carried them all."""
    opened = gr.State(False)
    with gr.Accordion("Model card", open=False) as box:
        card = gr.Markdown("")

    def shown(name: str | None, is_open: bool) -> str:
        return registry.card(name) if name and is_open else ""

    private = {"queue": False, "api_visibility": "private"}
    box.expand(lambda name: (shown(name, True), True), picker, [card, opened], **private)
    box.collapse(lambda: False, None, opened, **private)
    picker.change(shown, [picker, opened], card, **private)


def setting(name: str, **shown) -> gr.Slider | gr.Number:
    """The slider (or number field) of the decoding parameter the endpoints call `name`, as
    runtime/parameters.py declares it (the app's range, step, label and first value); `shown`
    overrides any of Gradio's arguments (`value`, `label`, `visible`, `scale`, …)."""
    parameter = checks.offered(name)
    app, limits = parameter.app, parameter.limits
    value = parameter.default if app.value is None else app.value
    if app.step is None:
        precision = 0 if parameter.type is int else None
        arguments = dict(value=value, precision=precision, minimum=limits.low)
        return setting_number(**arguments | dict(maximum=limits.high, label=app.label) | shown)
    low = limits.low + app.step if limits.low_open else limits.low  # an open end is not offered
    arguments = dict(value=value, step=app.step, label=app.label) | shown
    return setting_slider(low, limits.high, **arguments)


@dataclass
class DecodingInputs:
    mode: gr.Radio
    settings: dict  # the decoding components by the endpoints' names, in `checks.decoding`'s order

    def by_name(self) -> dict:
        """The components by the API parameter names the endpoints give them, in the order of
        `checks.decoding`'s parameters ("mode" first)."""
        return {"mode": self.mode} | self.settings

    def __getitem__(self, name: str):
        return self.by_name()[name]

    def components(self) -> list:
        """The components of `by_name`, in its order."""
        return list(self.by_name().values())

    def follow(self, picker: gr.Dropdown, registry) -> None:
        """When the visitor picks a model in `picker`, set the settings its manifest's
        `generation_defaults` name (the mode and each setting runtime/parameters.py lets a model
        set, `from_model`); the others keep their values. Only on the visitor's own pick
        (`.input`): a link or an example that sets the model keeps its own settings."""
        names = ["mode"] + [checks.app_name(p) for p in checks.OFFERED if p.app.from_model]
        names = [name for name in names if name in self.by_name()]
        outputs = [self[name] for name in names]

        def defaults(model):
            given = registry.manifest(model).generation_defaults.given() if model else {}
            found = model_defaults(given)
            return [gr.update(value=found[n]) if n in found else gr.skip() for n in names]

        picker.input(defaults, picker, outputs, queue=False, api_visibility="private")


def model_defaults(generation_defaults: Mapping) -> dict:
    """The decoding settings (by the endpoints' names) a manifest's `generation_defaults` give:
    the mode, and each setting a model may set, within the app's range (a larger one is cut
    to the app's largest).

    >>> model_defaults({"do_sample": True, "top_k": 40, "max_new_tokens": 500, "stop": ["[e:]"]})
    {'mode': 'sampling', 'max_new_tokens': 256, 'top_k': 40}
    """
    given = dict(generation_defaults)
    found = {}
    if "do_sample" in given or "num_beams" in given:
        mode = runtime.GenerationConfig.from_dict(given).mode
        found["mode"] = APP_MODES.get(mode, "sampling")  # sampling wins over beams (beam_sample)
    for parameter in checks.OFFERED:
        if parameter.app.from_model and parameter.name in given:
            value, high = given[parameter.name], parameter.limits.high
            found[checks.app_name(parameter)] = parameter.type(high) if value > high else value
    return found


APP_MODES = {mode: app for app, mode in checks.RUNTIME_MODES.items()}  # runtime mode -> app's


def decoding_inputs(with_samples: bool = True, modes=checks.MODES, **values) -> DecodingInputs:
    """The decoding settings runtime/parameters.py declares for the app, under a mode radio of
    `modes` (greedy / sampling / beam search); settings the chosen mode does not read hide, and
    settings no mode of `modes` reads are left out. `values` are first values by the endpoints'
    names ("mode" too; default: sampling, or the first of `modes`). Without `with_samples`
    there is no samples slider (for a tab that returns one sequence)."""
    names = checks.decoding_names(modes, with_samples)
    mode = values.pop("mode", "sampling" if "sampling" in modes else modes[0])
    unknown = set(values) - set(names)
    if unknown:
        raise ValueError(f"`values` must name settings of {names}, got {sorted(unknown)}")
    read = checks.RUNTIME_MODES[mode]
    offered_modes = {checks.RUNTIME_MODES[m] for m in modes}
    parameters = [checks.offered(name) for name in names[1:]]
    settings = {}
    with gr.Group():
        for row in sorted({0} | {p.app.row for p in parameters if p.app.row < PENALTY_ROW}):
            with gr.Row():
                if row == 0:
                    mode_radio = gr.Radio(list(modes), value=mode, label="Decoding", scale=3)
                for parameter in (p for p in parameters if p.app.row == row):
                    settings[checks.app_name(parameter)] = _decoding_setting(
                        parameter, values, read
                    )
    penalties = [p for p in parameters if p.app.row >= PENALTY_ROW]
    opened = any(
        p.app.opens and values.get(checks.app_name(p), p.default) != p.default for p in penalties
    )
    with gr.Accordion("Penalties", open=opened):
        with gr.Row():
            for parameter in penalties:
                settings[checks.app_name(parameter)] = _decoding_setting(parameter, values, read)
    settings = {name: settings[name] for name in names[1:]}  # the endpoints' order
    # The settings that show in some of the offered modes only, shown or hidden with the mode.
    toggled = {name: checks.offered(name) for name in settings}
    toggled = {n: p for n, p in toggled.items() if offered_modes - _shown_in(p)}

    def show(chosen):
        read = checks.RUNTIME_MODES[chosen]
        updates = []
        for parameter in toggled.values():
            if read in _shown_in(parameter):
                updates.append(gr.update(visible=True))
            elif read in parameter.modes:  # read but not offered: its default (one sequence)
                updates.append(gr.update(visible=False, value=parameter.default))
            else:
                updates.append(gr.update(visible=False))
        return updates

    shown = [settings[name] for name in toggled]
    mode_radio.change(show, mode_radio, shown, queue=False, api_visibility="private")
    return DecodingInputs(mode_radio, settings)


def _shown_in(parameter) -> set[str]:
    """The runtime modes of the app's modes in which a parameter's setting shows."""
    return set(parameter.app.shown_in or parameter.modes) & set(checks.RUNTIME_MODES.values())


def _decoding_setting(parameter, values: dict, read: str):
    name = checks.app_name(parameter)
    shown = {"visible": read in _shown_in(parameter)}
    if name in values:
        shown["value"] = values[name]
    if parameter.app.row == 0:
        shown["scale"] = 2  # beside the mode radio (scale 3)
    if parameter.app.step is None:
        shown["min_width"] = 100
    return setting(name, **shown)


class ControlPickers:
    """Dropdowns for the controls of `names`' models, gathered into a hidden JSON `controls`.

    With a model `picker`, only the chosen model's controls show and count. Without one (the
    Compare tab, whose columns have different models) every control shows, and each column
    uses the chosen controls its model has.
    """

    def __init__(self, registry, picker: gr.Dropdown | None, names: list[str]):
        self.registry = registry
        self.picker = picker
        self.specs: dict[str, dict] = {}  # control name -> {value: token}, union over models
        self.kinds: dict[str, str] = {}
        descriptions: dict[str, str] = {}
        for name in names:
            for control, spec in registry.controls_of(name).items():
                self.specs.setdefault(control, {}).update(spec.values)
                self.kinds.setdefault(control, spec.kind)
                descriptions.setdefault(control, spec.description or "")
        self.names = list(self.specs)
        self.dropdowns = []
        default_info = (
            "control token prefixed to the text"
            if picker
            else "applies to the columns whose model has this control"
        )
        with gr.Row(visible=bool(self.names)):
            for control in self.names:
                self.dropdowns.append(
                    gr.Dropdown(
                        [NONE, *self.specs[control]],
                        value=NONE,
                        label=control.replace("_", " ").capitalize(),
                        info=descriptions[control] or default_info,
                        allow_custom_value=True,
                        visible=shown(picker is None or self._has(picker.value, control)),
                    )
                )
        self.controls = gr.JSON({}, visible=False, label="controls")
        sources = [picker, *self.dropdowns] if picker else self.dropdowns
        if picker:
            picker.change(
                self.for_model,
                picker,
                self.dropdowns,
                queue=False,
                trigger_mode="always_last",  # quick switches: the last model's pickers win
                api_visibility="private",
            )
        for dropdown in self.dropdowns:
            dropdown.change(
                self.gather, sources, self.controls, queue=False, api_visibility="private"
            )

    def _has(self, model, control) -> bool:
        return bool(model) and control in self.registry.controls_of(model)

    def for_model(self, model):
        """Show the pickers of `model`'s controls with its values, reset to (none)."""
        updates = []
        for control in self.names:
            spec = self.registry.controls_of(model).get(control)
            values = list(spec.values) if spec else []
            updates.append(gr.update(visible=shown(values), choices=[NONE, *values], value=NONE))
        return updates if len(updates) != 1 else updates[0]

    def visible_for(self, count, models) -> list[bool]:
        """Whether each picker shows on the Compare tab: its control is one that a model of the
        first `count` columns (`models`) has."""
        used = [model for model in models[: int(count)] if model]
        return [any(self._has(model, control) for model in used) for control in self.names]

    def for_columns(self, count, *models):
        """Updates showing only the pickers `visible_for` the columns."""
        updates = [gr.update(visible=shown(used)) for used in self.visible_for(count, models)]
        return updates if len(updates) != 1 else updates[0]

    def gather(self, *values) -> dict:
        """{control: value} for the pickers that are not (none) (and that the model has)."""
        model, picked = (values[0], values[1:]) if self.picker else (None, values)
        chosen = {}
        for control, value in zip(self.names, picked):
            if value in (None, NONE) or (self.picker and not self._has(model, control)):
                continue
            chosen[control] = float(value) if self.kinds[control] == "numeric" else value
        return chosen


def shown(condition) -> bool | str:
    """A `visible` value that hides a component but keeps it in the page ("hidden").

    Gradio 6.17 may ignore the first update that shows a component created with `visible=False`
    (never drawn) when the same update hides another: switching Generate from smollm2-treasury
    to smollm2-bible showed Section without Translation and Book. A "hidden" component is drawn
    and only not displayed, so every update lands.
    """
    return True if condition else "hidden"


def controls_value(controls) -> dict:
    """The `controls` endpoint argument as a dict (None or "" mean none)."""
    if controls in (None, ""):
        return {}
    if not isinstance(controls, dict):
        raise ValueError(f'`controls` must be an object like {{"section": "…"}}, got {controls!r}')
    return controls
