"""The app's look: a Gradio theme and the CSS for token views, stats cards and badges.

Gradio 6 takes both at `launch` (`launch_kwargs`). Probability bands (ui/streaming.py) run from
green (likely) to red (unlikely). This module builds no components.
"""

from __future__ import annotations

CSS = """
/* min-width 0: the page is as wide as the screen, never its widest content's width (a phone at
   390 px drew a 504 px page, with the tab menu and buttons off-screen); wide content scrolls. */
/* width 100%: a tab with narrow content (the Arena before a round) does not narrow the page,
   which pushed two tabs into the "⋯" menu when it opened at 1280 px. */
.gradio-container { max-width: min(1280px, 100%) !important; min-width: 0 !important;
                     width: 100% !important; margin: 0 auto; }
#chat-turns .prose, .tokview { overflow-x: auto; max-width: 100%; }
#title h1 { font-family: Georgia, 'Times New Roman', serif; letter-spacing: 0.02em;
            margin-bottom: 0; }
#title p { margin-top: 0.2em; opacity: 0.8; }
.notice { border-left: 4px solid #d97706; padding: 0.6em 1em; background: rgba(217,119,6,0.08);
          border-radius: 4px; }

.tokview { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: 14px;
           line-height: 1.9; padding-bottom: 130px; }
.tokview .sample { margin-bottom: 0.8em; }
.tokview .sample-head { font-size: 12px; opacity: 0.7; margin-bottom: 0.2em; }
.tokview .tokens { white-space: pre-wrap; word-break: break-word; }
.tok { position: relative; border-radius: 3px; padding: 1px 1px; margin: 0 1px 0 0;
       white-space: pre-wrap; cursor: default; color: #1c1917; }
.tok.p80 { background: #bbf7d0; }
.tok.p50 { background: #d9f99d; }
.tok.p20 { background: #fef08a; }
.tok.p05 { background: #fed7aa; }
.tok.p00 { background: #fecaca; }
.tok.plain { background: #e7e5e4; }
.tok.special { font-style: italic; opacity: 0.8; }
.tok .alts { display: none; position: absolute; left: 0; top: 1.9em; z-index: 50;
             background: #1c1917; color: #fafaf9; padding: 6px 8px; border-radius: 6px;
             font-size: 12px; line-height: 1.4; white-space: nowrap;
             box-shadow: 0 4px 14px rgba(0,0,0,0.25); }
.tok .alts table { border-collapse: collapse; margin-top: 4px; }
.tok .alts td, .tok .alts th { padding: 0 6px; border: none; background: transparent;
                               color: #fafaf9; text-align: left; }
.tok .alts b, .tok .alts th { color: #fde68a !important; font-weight: 700; }
.tok:hover .alts, .tok:focus .alts { display: block; }
.legend { font-size: 12px; margin-bottom: 0.6em; }
.legend .tok { padding: 1px 5px; }

.stats { display: flex; flex-wrap: wrap; gap: 8px; }
.stat { border: 1px solid var(--border-color-primary); border-radius: 8px; padding: 6px 12px;
        min-width: 96px; background: var(--background-fill-secondary); }
.stat-value { font-size: 18px; font-weight: 600; font-variant-numeric: tabular-nums; }
.stat-label { font-size: 11px; text-transform: uppercase; letter-spacing: 0.04em; opacity: 0.7; }
.copied { margin-top: 8px; font-size: 13px; }
.copied mark { background: #fde68a; color: #1f2937; border-radius: 3px; padding: 0 2px; }

.badges { display: flex; flex-wrap: wrap; gap: 6px; margin: 4px 0; }
.badge { border-radius: 999px; padding: 3px 10px; font-size: 13px; font-weight: 600; }
.badge.pass { background: #dcfce7; color: #166534; }
.badge.fail { background: #fee2e2; color: #991b1b; }
.badge.info { background: #e0e7ff; color: #3730a3; }
.subtitle-preview { background: #0c0a09; color: #fafaf9; font-family: Arial, Helvetica, sans-serif;
                    font-size: 18px; text-align: center; padding: 14px 10px; border-radius: 6px;
                    line-height: 1.4; min-height: 3em; }
.subtitle-preview div { color: #fafaf9 !important; }
.subtitle-preview div.over { color: #fca5a5 !important; }
.column-output textarea { font-size: 14px; }
.link-triggers { display: none !important; }
/* Keyboard and contrast (issue 45). Gradio measures its tabs with a 1-px copy of the tab bar;
   hidden from view it still took the first ten Tab presses: `visibility` keeps it measurable
   and out of the focus order. Text below 4.5:1 on white (slider limits, footer, #a8a29e: 2.5:1)
   is drawn in stone-600 (7.6:1), as is a dropdown's dimmed value (`.subdued`: Past chats before
   one is picked); example chips look like the buttons they are. */
.tab-container.visually-hidden { visibility: hidden !important; }
.min_value, .max_value, .info-text, footer, footer a, footer .divider, input.subdued {
  color: #57534e !important; }
#chat-conversation button.example { border: 1px solid #78716c !important; border-radius: 8px;
                                    background: #fafaf9 !important; color: #1c1917 !important; }
#chat-conversation button.example:hover { background: #fef3c7 !important; }
/* Compare's columns beyond the chosen count (ui/compare_tab.py, _column_classes) */
.compare-column.column-off { display: none !important; }
/* A dropdown's text stops before its arrow (Compare's long preset names ran under it), cut
   with an ellipsis; the open list shows the names in full. */
.wrap-inner .secondary-wrap input { padding-right: 28px !important; text-overflow: ellipsis; }
/* The chat's bin (Gradio's top panel) lies over the conversation's top right corner: the
   scrolling messages start below it, so that none runs under it. */
#chat-conversation .wrapper:has(> .top-panel) { padding-top: 30px; box-sizing: border-box; }
/* The phone's tab menu: Gradio draws only "⋯"; it says what it holds, and which of its tabs is
   open (LABEL_MENU names it and writes the open tab's name into data-current). */
.overflow-menu > button::after { content: "More tabs"; font-size: 13px; margin-left: 4px; }
.overflow-menu > button[data-current]::after { content: "More tabs: " attr(data-current);
  font-weight: 600; border-bottom: 2px solid #d97706; }
/* On a phone the message box takes the whole row (Send goes under it), so that its placeholder
   shows on one line rather than cut in two. */
@media (max-width: 480px) { .form:has(> #chat-message) { min-width: 100% !important; } }
.error-box { border-left: 4px solid #dc2626; padding: 0.6em 1em; background: rgba(220,38,38,0.08);
             border-radius: 4px; }
.model-note { font-size: 13px; opacity: 0.85; }
.loop-warning:has(p) { border-left: 4px solid #d97706; padding: 0.4em 1em;
                       background: rgba(217,119,6,0.1); border-radius: 4px; }
/* Tables of numbers (Compare's and the Arena's metrics, Rewrite's sweep) and, on a phone, the
   Chat's turns keep every column in view: tighter cells and a smaller type. */
.numbers th, .numbers td { padding: 0 !important; font-size: 13px !important; }
.numbers .cell-wrap { padding: 4px 6px !important; }
/* a header's sort-and-filter menu button (⋮) lies over the header, shown on hover or focus,
   instead of taking 20 px of every column */
.numbers th { position: relative; }
.numbers th .cell-menu-button { position: absolute; right: 0; top: 0; opacity: 0; }
.numbers th:hover .cell-menu-button, .numbers th .cell-menu-button:focus { opacity: 1; }
@media (max-width: 480px) {
  .chat-turns th, .chat-turns td { padding: 2px 4px !important; font-size: 12px; } }
/* Table headers break between words only ("repetition rate", not "repetiti on rate"). */
.header-content .text.wrap { word-break: normal; overflow-wrap: normal; hyphens: none; }
.limit-note { font-size: 12px; color: #b45309; margin-top: 4px; }
.cosines-wrap, .paraphrases-wrap { overflow-x: auto; max-width: 100%; }
.paraphrases td.candidate, .paraphrases td.source {
  font-family: ui-monospace, SFMono-Regular, Menlo, monospace; white-space: pre-wrap;
  word-break: break-word; }
/* The Rewrite tab's attention heat map of a long source keeps room for its upright token labels
   (about 13 px each) and scrolls sideways on a phone instead of overlapping them
   (ui/alignment_view.py). */
.alignment-scroll { overflow-x: auto; max-width: 100%; }
.alignment-scroll .alignment-wide { min-width: 600px !important; }
"""


# On page load, in the browser: the tab menu's button gets an accessible name (Gradio gives none)
# that says which of its tabs is open, also shown on the button (data-current, CSS above): Gradio
# marks the open tab only inside the closed menu.
LABEL_MENU = """() => {
  const label = () => document.querySelectorAll('.overflow-menu').forEach((menu) => {
    const button = menu.querySelector(':scope > button');
    const open = menu.querySelector('.overflow-dropdown button.selected');
    const name = open ? open.textContent.trim() : '';
    const wanted = name ? `More tabs (open: ${name})` : 'More tabs';
    if (button.getAttribute('aria-label') !== wanted) button.setAttribute('aria-label', wanted);
    if (name && button.dataset.current !== name) button.dataset.current = name;
    if (!name && 'current' in button.dataset) delete button.dataset.current;
  });
  label();
  new MutationObserver(label).observe(document.body,
    {childList: true, subtree: true, attributes: true, attributeFilter: ['class']});
}"""


def theme():
    import gradio as gr

    return gr.themes.Soft(primary_hue="amber", secondary_hue="indigo", neutral_hue="stone").set(
        block_title_background_fill="transparent",
        block_title_text_color="*neutral_700",
        block_title_text_weight="600",
        block_label_background_fill="transparent",
        block_label_text_color="*neutral_600",
        # dark text on amber: white on amber-500 is 2.1:1, stone-950 on it 9.6:1
        button_primary_text_color="*neutral_950",
        button_primary_text_color_hover="*neutral_950",
        checkbox_label_text_color_selected="*neutral_950",  # a chosen radio, on amber too
    )


def launch_kwargs() -> dict:
    """The look, for `Blocks.launch` (Gradio 6 takes theme and CSS there)."""
    return {"theme": theme(), "css": CSS}
