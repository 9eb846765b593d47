"""Shareable links: a URL whose query string holds a tab's endpoint arguments, restored on open.

A tab opts in with one call inside its `gr.Tab`, naming its endpoint and its input components by
the endpoint's API parameter names:

    links.shareable("generate", "generate", {"model": model, "prompt": prompt, ...})

That adds a **Link** button and a box showing a URL such as
`?tab=generate&model=bible-lm+(int8)&prompt=In+the+beginning&seed=3&run=1`. A tab with several
sections, each with its own button (Masked LM, Embeddings), makes one call per section, adding
`section=<name>` to its links; the event a link runs may be a section's private view (the one its
button runs, e.g. every masked LM side by side), whose parameters are the API's names too.

The URL is relative (only a query string), so the browser resolves it against the page it is on,
which keeps any path prefix (a reverse proxy, a Space). On page load `attach`'s handlers read
the page's query string, select the tab, set every named input (converted to its component's type
and checked against its range or choices) and, with `run=1`, call the endpoint with those
arguments (and the components' defaults for the others), so the output equals the original's.
Unknown or invalid parameters are named in a message on top of the page; the valid ones are still
restored, and nothing runs. This module holds no model logic.
"""

from __future__ import annotations

import inspect
import json
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlencode

import gradio as gr
from gradio.context import Context

from .safe_text import literal

RESERVED = ("tab", "section", "run")
# In the browser, turn the relative link the server made into the page's full URL.
ABSOLUTE_URL = "(query) => query ? new URL(query, window.location.href).href : ''"
# On page load: nothing without a query string; else click the link target's restore button.
ROUTE = """() => {
  const params = new URLSearchParams(window.location.search);
  if ([...params.keys()].length === 0) return;
  const tab = params.get("tab"), section = params.get("section");
  const key = section === null ? tab : `${tab}-${section}`;
  const target = key === null ? null : document.getElementById(`link-restore-${key}`);
  (target || document.getElementById("link-restore")).click();
}"""


@dataclass
class Share:
    """One link target: its tab's id, its section (None for a one-section tab), the event it
    runs (by api_name) and that event's inputs by parameter name."""

    tab: str
    api_name: str
    inputs: dict[str, gr.components.Component]
    section: str | None = None
    box: gr.Textbox | None = None

    @property
    def key(self) -> str:
        return self.tab if self.section is None else f"{self.tab}-{self.section}"


@dataclass
class _PageLinks:
    shares: dict[str, Share] = field(default_factory=dict)
    notice: gr.Markdown | None = None


_PAGES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _page() -> _PageLinks:
    root = Context.root_block
    if root is None:
        raise RuntimeError("links.shareable and links.notice must be called inside gr.Blocks")
    return _PAGES.setdefault(root, _PageLinks())


def shareable(
    tab: str,
    api_name: str,
    inputs: dict[str, gr.components.Component],
    section: str | None = None,
) -> Share:
    """Give the current tab (`gr.Tab(..., id=tab)`), or one `section` of it, a Link button that
    reruns the event named `api_name` (a public endpoint or a private view).

    `inputs` maps each of the event function's parameter names to the component that feeds it;
    `attach` checks that they are exactly its parameters. A tab registers either once without a
    section or once per section.
    """
    page = _page()
    share = Share(tab, api_name, dict(inputs), section)
    same_tab = [s for s in page.shares.values() if s.tab == tab]
    if any(s.section == section or s.section is None or section is None for s in same_tab):
        where = f"section {section!r} of " if section else ""
        raise ValueError(f"`tab` must be registered once per section, got {where}{tab!r} twice")
    with gr.Row():
        button = gr.Button(
            "Link", size="sm", scale=0, min_width=80, elem_id=f"{share.key}-link-button"
        )
        share.box = gr.Textbox(
            label="Link to these settings (opens and runs them; drop &run=1 to only fill them in)",
            buttons=["copy"],
            interactive=False,
            scale=5,
            elem_id=f"{share.key}-link",
        )
    names = list(share.inputs)

    def link(*values):
        return build_query(share, dict(zip(names, values)))

    button.click(
        link, list(share.inputs.values()), share.box, queue=False, api_visibility="private"
    ).then(None, share.box, share.box, js=ABSOLUTE_URL, queue=False, api_visibility="private")
    page.shares[share.key] = share
    return share


def notice() -> gr.Markdown:
    """The (hidden until needed) message that names a link's unknown or invalid parameters."""
    page = _page()
    page.notice = gr.Markdown(visible=False, elem_id="link-notice", elem_classes="notice")
    return page.notice


def kind(component) -> str:
    """How a query value converts for `component`: int, float, bool, json, choice or text."""
    if isinstance(component, gr.Slider):
        integral = float(component.step).is_integer() and float(component.minimum).is_integer()
        return "int" if integral else "float"
    if isinstance(component, gr.Number):
        return "int" if component.precision == 0 else "float"
    if isinstance(component, gr.Checkbox):
        return "bool"
    if isinstance(component, gr.JSON):
        return "json"
    if isinstance(component, (gr.Radio, gr.Dropdown)):
        return "choice"
    return "text"


def _choices(component) -> list:
    return [choice[1] if isinstance(choice, tuple) else choice for choice in component.choices]


def _format(component, value) -> str:
    if kind(component) == "json":
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    if kind(component) == "int" and isinstance(value, float) and value.is_integer():
        return str(int(value))
    if kind(component) == "bool":
        return "true" if value else "false"
    return "" if value is None else str(value)


def build_query(share: Share, values: Mapping, run: bool = True) -> str:
    """The relative URL (a query string) that reopens `share`'s tab with `values`.

    Values that are None (an unused column) are left out; `run=1` asks to run on open.
    """
    items = [("tab", share.tab)]
    if share.section is not None:
        items.append(("section", share.section))
    for name, component in share.inputs.items():
        if name in values and values[name] is not None:
            items.append((name, _format(component, values[name])))
    if run:
        items.append(("run", "1"))
    return "?" + urlencode(items, safe="()")


def convert(name: str, component, text: str):
    """`text` from the query string as `component`'s value; ValueError names what is wrong."""
    how = kind(component)
    if how in ("int", "float"):
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"`{name}` must be a number, got {text!r}") from None
        if how == "int":
            if not number.is_integer():
                raise ValueError(f"`{name}` must be an integer, got {text!r}")
            number = int(number)
        low, high = component.minimum, component.maximum
        if (low is not None and number < low) or (high is not None and number > high):
            raise ValueError(f"`{name}` must be in [{low:g}, {high:g}], got {text}")
        return number
    if how == "bool":
        if text.lower() not in ("true", "false", "1", "0"):
            raise ValueError(f"`{name}` must be true or false, got {text!r}")
        return text.lower() in ("true", "1")
    if how == "json":
        try:
            return json.loads(text)
        except json.JSONDecodeError:
            raise ValueError(f"`{name}` must be JSON, got {text!r}") from None
    if how == "choice":
        choices = _choices(component)
        for choice in choices:
            if str(choice) == text:
                return choice
        if getattr(component, "allow_custom_value", False):
            return text
        raise ValueError(f"`{name}` must be one of {', '.join(map(str, choices))}; got {text!r}")
    max_length = getattr(component, "max_length", None)
    if max_length and len(text) > max_length:
        raise ValueError(f"`{name}` must be at most {max_length} characters, got {len(text)}")
    return text


@dataclass
class ParsedLink:
    """A parsed link: its target (None when unusable), the restored values, whether to run,
    and what was wrong."""

    share: Share | None
    values: dict
    run: bool
    problems: list[str]


def _target(params: Mapping[str, str], shares: Mapping[str, Share]) -> Share | str:
    """The share a link's `tab` and `section` name, or the problem that prevents it."""
    tab, section = params.get("tab"), params.get("section")
    if tab is None:
        others = [name for name in params if name not in RESERVED]
        return f"`tab` is missing, so {', '.join(others)} were not used" if others else ""
    tabs = list(dict.fromkeys(s.tab for s in shares.values()))
    if tab not in tabs:
        return f"`tab` must be one of {', '.join(tabs)}; got {tab!r}"
    sections = {s.section: s for s in shares.values() if s.tab == tab}
    if None in sections:
        if section is not None:
            return f"the {tab} tab has no sections, got `section` {section!r}"
        return sections[None]
    if section not in sections:
        return f"`section` must be one of {', '.join(sections)} for the {tab} tab; got {section!r}"
    return sections[section]


def parse_query(params: Mapping[str, str], shares: Mapping[str, Share]) -> ParsedLink:
    """Read a link's query parameters against the registered link targets.

    Every parameter that is not `tab`, `section`, `run` or an input of the chosen target is a
    problem, as is a value its component cannot take; `run` only stands when there is no problem.
    """
    share = _target(params, shares)
    if isinstance(share, str):
        return ParsedLink(None, {}, False, [share] if share else [])
    problems = []
    where = f"the {share.tab} tab" + (f"'s {share.section} section" if share.section else "")
    values = {}
    for name, text in params.items():
        if name in RESERVED:
            continue
        if name not in share.inputs:
            problems.append(f"unknown parameter `{name}` for {where}")
            continue
        try:
            values[name] = convert(name, share.inputs[name], text)
        except ValueError as error:
            problems.append(str(error))
    run = params.get("run", "0")
    if run not in ("0", "1"):
        problems.append(f"`run` must be 0 or 1, got {run!r}")
    return ParsedLink(share, values, run == "1" and not problems, problems)


def _endpoint(demo, api_name: str):
    for block_fn in demo.fns.values():
        if block_fn.api_name == api_name:
            return block_fn
    raise ValueError(f"`api_name` must name an endpoint of the app, got {api_name!r}")


def _parameters(block_fn) -> list[str]:
    return list(inspect.signature(block_fn.fn).parameters)


def attach(demo: gr.Blocks, tabs: gr.Tabs) -> None:
    """Restore (and with run=1 run) a link's settings when the page loads; call after the tabs.

    A page load runs only a line of JavaScript: without a query string nothing else happens; with
    one, it clicks the hidden restore button of the link's target (or, when the link names no
    registered target, the one that only shows the notice), so only that tab's events run and
    no other tab's components are touched (Gradio 6.17 left every output of an event pending,
    spinner and timer running, when its tab had not been rendered yet).
    """
    page = _PAGES.get(demo, _PageLinks())
    if not page.shares:
        return
    notice_box = page.notice or notice()
    endpoints = {}
    for key, share in page.shares.items():
        block_fn = _endpoint(demo, share.api_name)
        params = _parameters(block_fn)
        if set(params) != set(share.inputs):
            raise ValueError(
                f"the {key} link's inputs must be /{share.api_name}'s parameters "
                f"{params}, got {list(share.inputs)}"
            )
        endpoints[key] = block_fn
    with gr.Row(elem_classes="link-triggers"):  # hidden by CSS, so still clicked by the script
        query = gr.Textbox(show_label=False, container=False)
        fallback = gr.Button("restore link", elem_id="link-restore")
        buttons = {
            key: gr.Button(f"restore {key}", elem_id=f"link-restore-{key}") for key in page.shares
        }

    def parsed_from(text: str) -> tuple[dict, ParsedLink]:
        params = dict(parse_qsl(text.lstrip("?"), keep_blank_values=True))
        return params, parse_query(params, page.shares)

    def message(params: dict, parsed: ParsedLink):
        if not parsed.problems:
            return gr.skip()
        # the problems echo the link's own text: shown as text, never as markup
        text = "**This link could not be used in full:** " + literal("; ".join(parsed.problems))
        text += ". Nothing was run." if params.get("run") == "1" else ""
        return gr.Markdown(text, visible=True)

    def only_notice(text: str):
        return message(*parsed_from(text))

    read_query = "() => window.location.search"
    fallback.click(
        only_notice, query, notice_box, js=read_query, queue=False, api_visibility="private"
    )
    for key, share in page.shares.items():
        inputs = list(share.inputs.values())
        pending = gr.State(None)

        def select(text: str, share=share):
            params, parsed = parsed_from(text)
            return message(params, parsed), gr.Tabs(selected=share.tab)

        def restore(text: str, share=share):
            _, parsed = parsed_from(text)
            values = [parsed.values.get(name, gr.skip()) for name in share.inputs]
            return [*values, parsed.values if parsed.run else None]

        # The tab is selected first, so its components are rendered before their values arrive.
        buttons[key].click(
            select,
            query,
            [notice_box, tabs],
            js=read_query,
            queue=False,
            api_visibility="private",
        ).then(
            restore,
            query,
            [*inputs, pending],
            js=read_query,
            queue=False,
            api_visibility="private",
        ).then(
            _runner(share, endpoints[key]),
            pending,
            endpoints[key].outputs,
            concurrency_id=endpoints[key].concurrency_id,
            api_visibility="private",
        )
    demo.load(None, None, None, js=ROUTE, api_visibility="private")


def _runner(share: Share, block_fn):
    """A generator that runs `share`'s event with a link's values (the inputs it leaves out
    keep their defaults), or does nothing when the link did not ask to run."""
    params = _parameters(block_fn)
    skip = [gr.skip()] * len(block_fn.outputs)

    def run_link(values):
        if values is None:
            yield skip[0] if len(skip) == 1 else skip
            return
        args = [values.get(name, share.inputs[name].value) for name in params]
        result = block_fn.fn(*args)
        if inspect.isgenerator(result):
            yield from result
        else:
            yield result

    return run_link
