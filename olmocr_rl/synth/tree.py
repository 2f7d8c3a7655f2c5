"""An HTML page as a small tree, with its math found and its page furniture marked (docs/synth.md).

The standard library's ``html.parser`` reads the page into :class:`Node` objects (the browser is not needed to
derive tests or write references). While reading, TeX between ``\\(``/``\\)`` (inline), ``\\[``/``\\]`` or
``$$``/``$$`` (display) in text becomes a ``math`` node; single ``$`` is left alone (it is more often a price than
math). Scripts, styles, templates and the head's contents are kept for serialisation but never read as text;
elements with the ``hidden`` attribute or an inline ``display:none`` are skipped as the browser skips them.

Page furniture (what a transcription leaves out and an ``absent`` test checks) is any ``header``/``footer``
element and any element whose role is ``banner``/``contentinfo`` or whose class or id names a running head,
running foot or page number, **wherever it sits in the tree** (a header nested in wrapper ``div``s counts).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field
from html.parser import HTMLParser

__all__ = ["Node", "parse_html", "serialize", "MATH", "is_furniture", "is_skipped", "text_of", "NotHTMLError",
           "TooDeepError", "MAX_DEPTH"]

MATH = "#math"  # the tag of a math node: attrs {"display": "1"/"0"}, its TeX in ``tex``
# Elements nested deeper than this are refused (TooDeepError): the readers below recurse about twice per level,
# well inside Python's recursion limit, and Chromium's own parser stops nesting at 512 (it flattens deeper ones,
# so such a page would print differently from how it reads). Real pages nest a few dozen levels.
MAX_DEPTH = 200
VOID = frozenset("area base br col embed hr img input link meta source track wbr".split())
RAW_TEXT = frozenset({"script", "style", "textarea", "title", "xmp"})
NEVER_TEXT = frozenset({"script", "style", "template", "head", "title", "meta", "link", "svg", "object", "iframe"})
FURNITURE_TAGS = frozenset({"header", "footer"})
FURNITURE_ROLES = frozenset({"banner", "contentinfo"})
FURNITURE_NAMES = re.compile(
    r"(?:^|[-_\s])(?:page-?header|page-?footer|running-?(?:head|header|foot|footer)|header|footer|"
    r"page-?num(?:ber)?|pagenum|folio)(?:$|[-_\s])", re.IGNORECASE)
_MATH = re.compile(r"\\\((?P<inline>.+?)\\\)|\\\[(?P<display>.+?)\\\]|\$\$(?P<dollars>.+?)\$\$", re.DOTALL)
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
# Implied end tags: opening one of these closes an open element of the same group (p is closed by blocks).
_CLOSES_P = frozenset("address article aside blockquote div dl fieldset figure footer form h1 h2 h3 h4 h5 h6 "
                      "header hr main nav ol p pre section table ul".split())
_SIBLING_CLOSE = {"li": {"li"}, "dt": {"dt", "dd"}, "dd": {"dt", "dd"}, "tr": {"tr", "td", "th"},
                  "td": {"td", "th"}, "th": {"td", "th"}, "option": {"option"}}
_SCOPE = frozenset({"table", "ul", "ol", "dl", "tbody", "thead", "tfoot"})


class NotHTMLError(ValueError):
    """The file is not an HTML page (binary, empty, or without any element)."""


class TooDeepError(ValueError):
    """The page nests elements deeper than MAX_DEPTH."""


@dataclass(eq=False)
class Node:
    """An element (``tag``, ``attrs``, ``children``), a math node (``tag == MATH``, ``tex``), or text (``text``)."""

    tag: str
    attrs: dict[str, str] = field(default_factory=dict)
    children: list["Node"] = field(default_factory=list)
    text: str = ""
    tex: str = ""
    parent: "Node | None" = field(default=None, repr=False, compare=False)

    @property
    def is_text(self) -> bool:
        return self.tag == "#text"

    def walk(self):
        """This node and every node below it, in document order (no recursion: any depth)."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(reversed(node.children))

    def ancestors(self):
        node = self.parent
        while node is not None:
            yield node
            node = node.parent


def _split_math(text: str) -> list[Node]:
    """Text nodes and math nodes for a run of text, in order."""
    out, start = [], 0
    for match in _MATH.finditer(text):
        if match.start() > start:
            out.append(Node("#text", text=text[start:match.start()]))
        display = match.group("inline") is None
        tex = (match.group("inline") or match.group("display") or match.group("dollars")).strip()
        out.append(Node(MATH, {"display": "1" if display else "0"}, tex=tex))
        start = match.end()
    if start < len(text):
        out.append(Node("#text", text=text[start:]))
    return out


class _TreeBuilder(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.root = Node("#document")
        self.stack = [self.root]
        self.pending = ""  # text gathered until the next tag (math may span entity-split pieces)

    def _flush(self) -> None:
        if not self.pending:
            return
        top = self.stack[-1]
        raw = top.tag in RAW_TEXT or any(n.tag in RAW_TEXT for n in top.ancestors())
        for node in [Node("#text", text=self.pending)] if raw else _split_math(self.pending):
            node.parent = top
            top.children.append(node)
        self.pending = ""

    def _close_implied(self, tag: str) -> None:
        closers = _SIBLING_CLOSE.get(tag, set())
        for i in range(len(self.stack) - 1, 0, -1):
            name = self.stack[i].tag
            if name in closers or (name == "p" and tag in _CLOSES_P):
                del self.stack[i:]
                return
            if name in _SCOPE or name in ("div", "body"):
                return

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self._flush()
        self._close_implied(tag)
        node = Node(tag, {k.lower(): (v or "") for k, v in attrs}, parent=self.stack[-1])
        self.stack[-1].children.append(node)
        if tag not in VOID:
            self.stack.append(node)
            if len(self.stack) > MAX_DEPTH:
                raise TooDeepError(f"elements nest more than {MAX_DEPTH} deep (at <{tag}>, line {self.getpos()[0]}); "
                                   "flatten the page")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in VOID and self.stack[-1].tag == tag:
            self.stack.pop()

    def handle_endtag(self, tag: str) -> None:
        self._flush()
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data: str) -> None:
        self.pending += data

    def close(self) -> None:
        super().close()
        self._flush()


def parse_html(source: str) -> Node:
    """The page's tree; raises NotHTMLError for text that holds no element or looks binary."""
    if not source.strip():
        raise NotHTMLError("the file is empty; give an HTML page")
    if "\x00" in source[:4096]:
        raise NotHTMLError("the file is binary, not an HTML page")
    builder = _TreeBuilder()
    builder.feed(source)
    builder.close()
    root = builder.root
    if not any(not n.is_text and n.tag != MATH for n in root.walk() if n is not root):
        raise NotHTMLError("no HTML element in the file (is it plain text?); give an HTML page")
    return root


def is_skipped(node: Node) -> bool:
    """Not drawn as text: scripts, styles, the head; ``hidden`` or inline ``display:none`` elements."""
    return node.tag in NEVER_TEXT or "hidden" in node.attrs or bool(_HIDDEN_STYLE.search(node.attrs.get("style", "")))


def is_furniture(node: Node) -> bool:
    """A running header or footer, or a page number (by tag, role, class or id), wherever it sits."""
    if node.is_text or node.tag == MATH:
        return False
    if node.tag in FURNITURE_TAGS or node.attrs.get("role", "").lower() in FURNITURE_ROLES:
        return True
    names = f"{node.attrs.get('class', '')} {node.attrs.get('id', '')}"
    return bool(FURNITURE_NAMES.search(names))


def text_of(node: Node, math: bool = False) -> str:
    """The visible text below ``node``, whitespace collapsed (math as ``\\(tex\\)`` when ``math``)."""
    parts: list[str] = []

    def visit(n: Node) -> None:
        if n.is_text:
            parts.append(n.text)
        elif n.tag == MATH:
            parts.append(f" \\({n.tex}\\) " if math else " ")
        elif n.tag == "br":
            parts.append(" ")
        elif not is_skipped(n):
            for child in n.children:
                visit(child)

    visit(node)
    return " ".join("".join(parts).split())


def serialize(node: Node, math_html: dict[int, str] | None = None, drop_scripts: bool = True) -> str:
    """HTML for the tree again; math nodes become ``math_html[id(node)]`` (KaTeX's HTML) or their TeX."""
    out: list[str] = []

    def visit(n: Node, raw: bool) -> None:
        if n.is_text:
            out.append(n.text if raw else html.escape(n.text, quote=False))
            return
        if n.tag == MATH:
            out.append((math_html or {}).get(id(n)) or html.escape(n.tex, quote=False))
            return
        if n.tag == "#document":
            for child in n.children:
                visit(child, False)
            return
        if drop_scripts and n.tag == "script":
            return
        attrs = "".join(f' {k}="{html.escape(v)}"' for k, v in n.attrs.items()
                        if not (drop_scripts and k.startswith("on")))
        out.append(f"<{n.tag}{attrs}>")
        if n.tag in VOID:
            return
        for child in n.children:
            visit(child, n.tag in RAW_TEXT)
        out.append(f"</{n.tag}>")

    visit(node, False)
    return "".join(out)
