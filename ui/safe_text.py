"""Text from outside the app (a link's parameters, a model card, a file's fields) made safe to
show in a Markdown component: it reads as the text it is, never as markup that the page runs.

`literal(text)` is for messages that echo what a visitor or a file said ("`tab` must be one of
chat, generate; got '<img …>'"): every character shows as itself, only the message's own
`code` spans stay code. `card(markdown)` is for model cards (a bundle's README.md, written by
whoever made the bundle, or by the GGUF importer from a file's metadata): the Markdown stays
(headings, lists, tables, code, links, images inlined from the bundle as `data:` URIs), HTML is
cut down to a small set of tags without attributes (no style, so nothing is fixed or positioned
over the page; no script, iframe, form or style element), and remote images and links that are
not http(s), mailto or in-page become plain text. This module renders nothing itself.
"""

from __future__ import annotations

import html
import re
import string
from html.parser import HTMLParser

# Markdown's escapable characters (CommonMark: any ASCII punctuation may be backslash-escaped).
_PUNCTUATION = set(string.punctuation) - {"`"}
_CODE_SPAN = re.compile(r"`([^`]*)`")


def _escaped(text: str) -> str:
    """`text` with every Markdown punctuation character backslash-escaped and `<`, `&` as
    entities (a backslash before `<` would still leave some renderers an HTML tag)."""
    out = []
    for char in text:
        if char == "<":
            out.append("&lt;")
        elif char == "&":
            out.append("&amp;")
        elif char in _PUNCTUATION:
            out.append("\\" + char)
        else:
            out.append(char)
    return "".join(out)


def literal(text: str) -> str:
    """Markdown that shows `text` as it is, with its `code` spans as code (`<code>` elements).

    A backtick the text did not pair shows as a backtick.

    >>> print(literal("`tab` must be one of chat, got '<b>[x](y)'"))
    <code>tab</code> must be one of chat\\, got \\'&lt;b\\>\\[x\\]\\(y\\)\\'
    """
    parts = []
    end = 0
    for match in _CODE_SPAN.finditer(text):
        parts.append(_escaped(text[end : match.start()]))
        parts.append(f"<code>{_escaped(match[1])}</code>")
        end = match.end()
    parts.append(_escaped(text[end:]).replace("`", "\\`"))
    return "".join(parts)


# ---- model cards -------------------------------------------------------------------------------

# Tags a card may keep, without any attribute (bar a link's href and an inlined image's src).
KEPT_TAGS = {
    "p", "br", "hr", "b", "strong", "i", "em", "u", "s", "del", "code", "pre", "kbd", "sub",
    "sup", "small", "ul", "ol", "li", "dl", "dt", "dd", "blockquote", "table", "thead", "tbody",
    "tfoot", "tr", "th", "td", "h1", "h2", "h3", "h4", "h5", "h6", "div", "span", "details",
    "summary", "a", "img",
}  # fmt: skip
# Tags dropped with everything inside them (their text is code, styling or a foreign document).
DROPPED_WITH_CONTENT = {
    "script", "style", "iframe", "object", "embed", "template", "noscript", "svg", "math",
    "frame", "frameset", "applet", "textarea", "select", "title", "head",
}  # fmt: skip
INLINED_IMAGE = re.compile(r"data:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=]+$")
SAFE_LINK = re.compile(r"(https?://|mailto:|#)[^\s]*$", re.IGNORECASE)
# A fence as CommonMark reads one (a backtick fence's info string has no backtick), to its
# closing fence or the end; a code span whose backtick runs have the same length (a run right
# after a backslash or beside another backtick opens nothing).
_FENCE = re.compile(
    r"^ {0,3}(`{3,}(?=[^`\n]*$)|~{3,})[^\n]*\n.*?(?:^ {0,3}\1[^\n]*$|\Z)", re.M | re.S
)
_INLINE_CODE = re.compile(r"(?<![`\\])(`+)(?!`)[^\n]+?(?<!`)\1(?!`)")
_AUTOLINK = re.compile(r"<((?:https?://|mailto:)[^<>\s]+)>", re.IGNORECASE)
_MD_IMAGE = re.compile(r"!\[([^\]\n]*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_MD_REF_IMAGE = re.compile(r"!\[([^\]\n]*)\]\[[^\]\n]*\]")
_MD_LINK = re.compile(r"(?<!!)\[([^\]\n]*)\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
_HOLE = "\ue000{}\ue001"  # a private-use placeholder for a piece set aside
_HOLES = re.compile("\ue000(\\d+)\ue001")


class _Cleaner(HTMLParser):
    """Re-emits a card's text with only KEPT_TAGS (no attributes but a safe href or an inlined
    src); text is passed on with `<` and `&` escaped, so nothing becomes a tag after this."""

    def __init__(self):
        super().__init__(convert_charrefs=False)
        self.out: list[str] = []
        self.skipping: list[str] = []  # open DROPPED_WITH_CONTENT tags

    def handle_starttag(self, tag, attrs):
        if tag in DROPPED_WITH_CONTENT:
            self.skipping.append(tag)
            return
        if self.skipping or tag not in KEPT_TAGS:
            return
        values = dict(attrs)
        if tag == "img":
            src, alt = values.get("src") or "", values.get("alt") or "image"
            if INLINED_IMAGE.match(src):
                self.out.append(f'<img src="{src}" alt="{html.escape(alt)}">')
            else:
                self.out.append(f"[image not shown: {html.escape(alt)}]")
            return
        if tag == "a":
            href = values.get("href") or ""
            kept = f' href="{html.escape(href)}"' if SAFE_LINK.match(href) else ""
            self.out.append(f"<a{kept}>")
            return
        self.out.append(f"<{tag}>")

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if tag in DROPPED_WITH_CONTENT and self.skipping and self.skipping[-1] == tag:
            self.skipping.pop()

    def handle_endtag(self, tag):
        if tag in DROPPED_WITH_CONTENT:
            if tag in self.skipping:
                del self.skipping[self.skipping.index(tag) :]
            return
        if not self.skipping and tag in KEPT_TAGS and tag != "img":
            self.out.append(f"</{tag}>")

    def handle_data(self, data):
        if not self.skipping:
            self.out.append(data.replace("&", "&amp;").replace("<", "&lt;"))

    def handle_entityref(self, name):
        if not self.skipping:
            self.out.append(f"&{name};")

    def handle_charref(self, name):
        if not self.skipping:
            self.out.append(f"&#{name};")


def _markdown_images_and_links(text: str) -> str:
    """Markdown images other than inlined ones, and links to anything but http(s), mailto or an
    anchor, as plain text."""

    def image(match):
        alt, target = match[1], match[2]
        if INLINED_IMAGE.match(target):
            return match[0]
        return f"\\[image not shown: {_escaped(alt)}\\]"

    def link(match):
        return match[0] if SAFE_LINK.match(match[2]) else match[1]

    text = _MD_IMAGE.sub(image, text)
    text = _MD_REF_IMAGE.sub(lambda m: f"\\[image not shown: {_escaped(m[1])}\\]", text)
    return _MD_LINK.sub(link, text)


def card(markdown: str) -> str:
    """A model card cut down to what cannot take over the page (the module docstring says what
    stays). Fenced and inline code are kept as they are (Markdown shows them as text).

    >>> card('# M\\n<div style="position:fixed;inset:0">hi</div><script>x()</script>')
    '# M\\n<div>hi</div>'
    >>> card("![plot](https://evil.example/p.png) `<b>` [ok](https://e.org) [no](javascript:x)")
    '\\\\[image not shown: plot\\\\] `<b>` [ok](https://e.org) no'
    """
    kept: list[str] = []
    markdown = markdown.replace("\ue000", "").replace("\ue001", "")  # no forged placeholders

    def set_aside(match):
        kept.append(match[0])
        return _HOLE.format(len(kept) - 1)

    text = _FENCE.sub(set_aside, markdown)
    text = _INLINE_CODE.sub(set_aside, text)
    text = _AUTOLINK.sub(lambda m: f"[{m[1]}]({m[1]})", text)
    cleaner = _Cleaner()
    cleaner.feed(text)
    cleaner.close()
    text = _markdown_images_and_links("".join(cleaner.out))
    return _HOLES.sub(lambda m: kept[int(m[1])], text)
