"""Nodes → boxes of positioned glyphs, by TeX's rules (TeXbook appendix G, as KaTeX implements them).

Style and size changes (display → text → script → scriptscript), script shifts (``sup1``/``sub1``/…,
the character-box exception), fraction and limit placement, matrix/array rows and columns and
inter-atom spacing use TeX's font parameters and the approximate glyph metrics of :mod:`metrics`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .errors import MAX_DEPTH, LatexError
from .metrics import (
    BIG_OP_SPACING,
    CENTER,
    FRAC_STYLE,
    METRIC_SET,
    METRICS,
    SIZE,
    SPACING,
    SUP_STYLE,
    VLIST_END,
    base_style,
    char_height_depth,
    char_width,
    cramped,
    keep_cramp,
)
from .nodes import (
    Accent,
    Array,
    Frac,
    Glyph,
    Group,
    LeftRight,
    Node,
    Op,
    Scripts,
    Space,
    Sqrt,
    Stack,
    StyleSwitch,
    Sym,
    Tag,
    Text,
    TextChunk,
)
from .symbols import BIN, CLOSE, INNER, INTEGRALS, OP, OPEN, ORD, PUNCT, REL, STACK_ALWAYS, STACK_LARGE

__all__ = ["Box", "Typesetter", "drawn_delimiter"]


@dataclass
class Box:
    """Laid-out material: extent (em, relative to its own size 1 at display) and glyphs as
    (character, centre x, centre y) relative to the box's left end on its baseline (y up)."""

    width: float = 0.0
    height: float = 0.0
    depth: float = 0.0
    glyphs: list[Glyph] = field(default_factory=list)
    is_char: bool = False
    cls: str = ORD

    def shifted(self, dx: float, dy: float) -> list[Glyph]:
        """The glyphs moved by ``(dx, dy)``."""
        return [(char, x + dx, y + dy) for char, x, y in self.glyphs]


def drawn_delimiter(char: str, body: Box, size: float) -> str:
    """The character KaTeX's \\left/\\right delimiter shows around ``body`` ("" when it is an SVG)."""
    if not char:
        return char
    axis = 0.25 * size
    reach = max(body.height - axis, body.depth + axis)
    needed = max(2 * reach * 0.901, 2 * reach - 0.5 * size)  # TeX's delimiterfactor/-shortfall
    if char in STACK_ALWAYS and needed > 1.0 * size:
        return ""
    if char in STACK_LARGE and needed > 3.0 * size:
        return ""
    return char


#: Node type -> the Typesetter method ``(node, style) -> Box`` that lays it out.
_LAYOUT_METHODS: dict[type, str] = {
    Scripts: "scripts", Frac: "frac", Sqrt: "sqrt", Accent: "accent", LeftRight: "left_right",
    Op: "op", Array: "array", Stack: "stack",
}

class Typesetter:
    """Lays out nodes in a style (D, T, S, SS; a trailing ' marks the cramped variant)."""

    def __init__(self) -> None:
        self.depth = 0

    def row(self, nodes: list[Node], style: str) -> Box:
        """A horizontal list: atoms side by side with TeX's spacing; style switches apply onwards."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise LatexError("nesting too deep")
        boxes: list[Box] = []
        for node in nodes:
            if isinstance(node, StyleSwitch):
                style = node.style
                continue
            boxes.append(self.node(node, style))
        # TeX's rule: a binary operator with nothing to bind becomes an ordinary symbol.
        classes = [box.cls for box in boxes]
        for index, cls in enumerate(classes):
            if cls != BIN:
                continue
            previous = next((classes[j] for j in range(index - 1, -1, -1) if boxes[j].glyphs or boxes[j].width), None)
            following = classes[index + 1] if index + 1 < len(classes) else None
            if previous in (None, BIN, OP, REL, OPEN, PUNCT) or following in (REL, CLOSE, PUNCT):
                classes[index] = ORD
        size = SIZE[base_style(style)]
        scripted = base_style(style) in ("S", "SS")
        result = Box()
        x = 0.0
        previous_cls = None
        for box, cls in zip(boxes, classes):
            if box.cls == "space":
                x += box.width
                continue
            if previous_cls is not None:
                space, in_script = SPACING.get((previous_cls, cls), (0.0, False))
                if space and (in_script or not scripted):
                    x += space * size
            result.glyphs.extend(box.shifted(x, 0.0))
            x += box.width
            result.height = max(result.height, box.height)
            result.depth = max(result.depth, box.depth)
            previous_cls = cls
        result.width = x
        if len(boxes) == 1 and boxes[0].cls != "space":
            result.is_char = boxes[0].is_char
            result.cls = classes[0]
        self.depth -= 1
        return result

    def node(self, node: Node, style: str) -> Box:
        """One node's box."""
        size = SIZE[base_style(style)]
        if isinstance(node, Sym):
            return self.char(node.char, node.cls, size)
        if isinstance(node, Space):
            return Box(width=node.width * size, cls="space")
        if isinstance(node, Group):
            box = self.row(node.children, style)
            box.is_char = False if len(node.children) != 1 else box.is_char
            if node.cls is not None:
                box.cls = node.cls
            return box
        if isinstance(node, Text):
            return self.text(node.chunks, style)
        method = _LAYOUT_METHODS.get(type(node))  # the node types laid out by a method of the same shape
        if method is not None:
            return getattr(self, method)(node, style)
        if isinstance(node, Tag):
            box = self.text(node.chunks, "T")
            shifted = Box(width=box.width + 1.0, height=box.height, depth=box.depth, glyphs=box.shifted(1.0, 0.0))
            return shifted
        raise LatexError(f"cannot lay out {type(node).__name__}")

    def char(self, char: str, cls: str, size: float) -> Box:
        """A symbol's glyphs (one, or a short run such as primes) at ``size``."""
        width = sum(char_width(c) for c in char) * size
        height, depth = char_height_depth(char[0]) if char else (0.0, 0.0)
        glyphs = []
        x = 0.0
        for c in char:
            w = char_width(c) * size
            if not c.isspace():
                glyphs.append((c, x + w / 2, CENTER * size))
            x += w
        return Box(width=width, height=height * size, depth=depth * size, glyphs=glyphs, is_char=len(char) == 1, cls=cls)

    def opening(self, char: str, size: float) -> tuple[list[Glyph], float]:
        """A fresh glyph list starting with the opening delimiter ``char`` ("": none), and its width."""
        if not char:
            return [], 0.0
        box = self.char(char, OPEN, size)
        return box.glyphs, box.width

    def closing(self, char: str, x: float, size: float, glyphs: list[Glyph]) -> float:
        """Append the closing delimiter ``char`` ("": none) at ``x`` to ``glyphs``; returns its width."""
        if not char:
            return 0.0
        box = self.char(char, CLOSE, size)
        glyphs.extend(box.shifted(x, 0.0))
        return box.width

    def text(self, chunks: list[TextChunk], style: str) -> Box:
        """Text-mode material: upright glyphs, spaces a quarter em."""
        size = SIZE[base_style(style)]
        result = Box()
        x = 0.0
        for chunk in chunks:
            if isinstance(chunk, str):
                for c in chunk:
                    w = char_width(c, upright=True) * size if not c.isspace() else 0.25 * size
                    if not c.isspace():
                        result.glyphs.append((c, x + w / 2, CENTER * size))
                    x += w
                result.height = max(result.height, 0.694 * size)
            else:
                box = self.node(chunk, style)
                result.glyphs.extend(box.shifted(x, 0.0))
                x += box.width
        result.width = x
        return result

    def scripts(self, node: Scripts, style: str) -> Box:
        """A base with scripts beside it (or limits, or a brace's labels)."""
        base_node = node.base
        if isinstance(base_node, Op) and (node.limits if node.limits is not None else (base_node.limits and base_style(style) == "D")):
            return self.limits(base_node, node.sub, node.sup, style)
        if isinstance(base_node, Stack) and base_node.brace:
            return self.stack(base_node, style, extra=node)
        base = self.node(base_node, style)
        size = SIZE[base_style(style)]
        metrics = METRICS[METRIC_SET[base_style(style)]]
        script_style = keep_cramp(style, SUP_STYLE[base_style(style)])
        script_size = SIZE[base_style(script_style)]
        script_metrics = METRICS[METRIC_SET[base_style(script_style)]]
        sup = self.node(node.sup, script_style) if node.sup is not None else None
        sub = self.node(node.sub, cramped(script_style)) if node.sub is not None else None
        sup_shift = sub_shift = 0.0
        if not base.is_char:
            sup_shift = base.height - script_metrics["supDrop"] * script_size
            sub_shift = base.depth + script_metrics["subDrop"] * script_size
        min_sup = metrics["sup1"] if style == "D" else metrics["sup3"] if style.endswith("'") else metrics["sup2"]
        x_height = metrics["xHeight"] * size
        if sup is not None and sub is not None:
            sup_shift = max(sup_shift, min_sup * size, sup.depth + 0.25 * x_height)
            sub_shift = max(sub_shift, metrics["sub2"] * size)
            gap = 4 * metrics["rule"] * size
            if (sup_shift - sup.depth) - (sub.height - sub_shift) < gap:
                sub_shift = gap - (sup_shift - sup.depth) + sub.height
                psi = 0.8 * x_height - (sup_shift - sup.depth)
                if psi > 0:
                    sup_shift += psi
                    sub_shift -= psi
        elif sub is not None:
            sub_shift = max(sub_shift, metrics["sub1"] * size, sub.height - 0.8 * x_height)
        else:
            sup_shift = max(sup_shift, min_sup * size, sup.depth + 0.25 * x_height)  # type: ignore[union-attr]
        result = Box(glyphs=list(base.glyphs), cls=base.cls)
        x = base.width
        width = base.width
        height, depth = base.height, base.depth
        # KaTeX lists the subscript before the superscript (bottom to top).
        if sub is not None:
            result.glyphs.extend(sub.shifted(x, -sub_shift))
            width = max(width, x + sub.width)
            depth = max(depth, sub.depth + sub_shift)
        if sup is not None:
            # An integral's superscript sits right of its subscript by the sign's italic correction.
            italic = 0.0
            if isinstance(base_node, Op) and base_node.symbol and base_node.text in INTEGRALS:
                italic = (0.444 if base_style(style) == "D" else 0.194) * size
            result.glyphs.extend(sup.shifted(x + italic, sup_shift))
            width = max(width, x + italic + sup.width)
            height = max(height, sup.height + sup_shift)
        # TeX's scriptspace, plus the 2 px column KaTeX's vlists end with on its render page.
        result.width = width + 0.05 * size + VLIST_END
        result.height, result.depth = height, depth
        return result

    def op(self, node: Op, style: str) -> Box:
        """A big or named operator."""
        size = SIZE[base_style(style)]
        if node.symbol:
            # Display style uses KaTeX's larger operator font for the vertical metrics, but the
            # render page's fallback font draws the glyph at one width.
            box = self.char(node.text, OP, size)
            box.height, box.depth = (1.0 * size, 0.5 * size) if base_style(style) == "D" else (0.75 * size, 0.25 * size)
        else:
            box = self.text([node.text], style)
            box.height, box.depth = 0.694 * size, 0.0
        box.cls = OP
        box.is_char = False
        return box

    def limits(self, node: Op, sub_node: Node | None, sup_node: Node | None, style: str) -> Box:
        """An operator with its limits centred below and above it."""
        base = self.op(node, style)
        script_style = keep_cramp(style, SUP_STYLE[base_style(style)])
        size = SIZE[base_style(style)]
        sup = self.node(sup_node, script_style) if sup_node is not None else None
        sub = self.node(sub_node, cramped(script_style)) if sub_node is not None else None
        width = max(base.width, sup.width if sup else 0.0, sub.width if sub else 0.0)
        result = Box(width=width, height=base.height, depth=base.depth, cls=OP)
        # KaTeX lists limits bottom to top: lower limit, operator, upper limit.
        if sub is not None:
            kern = max(BIG_OP_SPACING[1] * size, BIG_OP_SPACING[3] * size - sub.height)
            shift = base.depth + kern + sub.height
            result.glyphs.extend(sub.shifted((width - sub.width) / 2, -shift))
            result.depth = shift + sub.depth + BIG_OP_SPACING[4] * size
        result.glyphs.extend(base.shifted((width - base.width) / 2, 0.0))
        if sup is not None:
            kern = max(BIG_OP_SPACING[0] * size, BIG_OP_SPACING[2] * size - sup.depth)
            shift = base.height + kern + sup.depth
            result.glyphs.extend(sup.shifted((width - sup.width) / 2, shift))
            result.height = shift + sup.height + BIG_OP_SPACING[4] * size
        return result

    def frac(self, node: Frac, style: str) -> Box:
        """A fraction or binomial, numerator and denominator centred."""
        outer = base_style(node.style or style)  # a fraction inside a root or a denominator is cramped: D' etc.
        size = SIZE[outer]
        metrics = METRICS[METRIC_SET[outer]]
        inner_style = FRAC_STYLE[outer]
        num = self.node(node.num, inner_style)
        den = self.node(node.den, inner_style)
        rule = metrics["rule"] * size if node.bar else 0.0
        axis = metrics["axis"] * size
        if base_style(outer) == "D":
            num_shift, den_shift = metrics["num1"] * size, metrics["denom1"] * size
            clearance = 3 * rule if node.bar else 7 * metrics["rule"] * size
        else:
            num_shift = (metrics["num2"] if node.bar else metrics["num3"]) * size
            den_shift = metrics["denom2"] * size
            clearance = rule if node.bar else 3 * metrics["rule"] * size
        if node.bar:
            if (num_shift - num.depth) - (axis + rule / 2) < clearance:
                num_shift += clearance - ((num_shift - num.depth) - (axis + rule / 2))
            if (axis - rule / 2) - (den.height - den_shift) < clearance:
                den_shift += clearance - ((axis - rule / 2) - (den.height - den_shift))
        else:
            gap = (num_shift - num.depth) - (den.height - den_shift)
            if gap < clearance:
                num_shift += (clearance - gap) / 2
                den_shift += (clearance - gap) / 2
        width = max(num.width, den.width)
        glyphs, x = self.opening(node.left, size)
        glyphs.extend(den.shifted(x + (width - den.width) / 2, -den_shift))
        glyphs.extend(num.shifted(x + (width - num.width) / 2, num_shift))
        x += width
        x += self.closing(node.right, x, size, glyphs)
        return Box(width=x + 0.12 * size, height=num_shift + num.height, depth=den_shift + den.depth, glyphs=glyphs, cls=INNER if node.left else ORD)

    def sqrt(self, node: Sqrt, style: str) -> Box:
        """A radical: the sign draws no glyph; the index sits up left."""
        size = SIZE[base_style(style)]
        body = self.node(node.body, cramped(style))
        glyphs: list[Glyph] = []
        offset = 0.85 * size
        if node.index is not None:
            index = self.node(node.index, "SS")
            glyphs.extend(index.shifted(0.15 * size, 0.45 * size))
            offset = max(offset, 0.15 * size + index.width + 0.3 * size)
        glyphs.extend(body.shifted(offset, 0.0))
        return Box(width=offset + body.width, height=body.height + 0.2 * size, depth=body.depth, glyphs=glyphs)

    def accent(self, node: Accent, style: str) -> Box:
        """An accented body."""
        size = SIZE[base_style(style)]
        body = self.node(node.body, cramped(style))
        glyphs = list(body.glyphs)
        if node.char is not None and not node.under:
            # The accent box sits over the base, a hair higher (0.4 px in KaTeX), so the base's up
            # neighbour is its accent. KaTeX's skew puts most accents a pixel or so right of the
            # base's centre (so the accent is also the base's right neighbour); a bar is drawn
            # from the base's left edge.
            dx = -0.05 if node.char == "ˉ" else 0.03
            glyphs.append((node.char, body.width / 2 + dx * size, (CENTER + max(node.dy, 0.015)) * size))
        return Box(width=body.width, height=body.height + 0.2 * size, depth=body.depth, glyphs=glyphs, is_char=body.is_char, cls=body.cls)

    def left_right(self, node: LeftRight, style: str) -> Box:
        """A body between its drawn delimiters."""
        size = SIZE[base_style(style)]
        body = self.row(node.body, style)
        node = LeftRight(drawn_delimiter(node.left, body, size), node.body, drawn_delimiter(node.right, body, size))
        glyphs, x = self.opening(node.left, size)
        glyphs.extend(body.shifted(x, 0.0))
        x += body.width
        x += self.closing(node.right, x, size, glyphs)
        height = max(body.height, 0.75 * size)
        depth = max(body.depth, 0.25 * size)
        return Box(width=x, height=height, depth=depth, glyphs=glyphs, cls=INNER)

    def stack(self, node: Stack, style: str, extra: Scripts | None = None) -> Box:
        """A body with material over and under it (``extra``: a brace's scripts)."""
        size = SIZE[base_style(style)]
        body = self.node(node.body, style)
        over_node, under_node = node.over, node.under
        if extra is not None:
            over_node = extra.sup if extra.sup is not None else over_node
            under_node = extra.sub if extra.sub is not None else under_node
        script_style = keep_cramp(style, SUP_STYLE[base_style(style)])
        over = self.node(over_node, script_style) if over_node is not None else None
        under = self.node(under_node, cramped(script_style)) if under_node is not None else None
        width = max(body.width, over.width if over else 0.0, under.width if under else 0.0)
        glyphs: list[Glyph] = []
        extra_gap = 0.3 * size if node.brace else 0.1 * size
        depth, height = body.depth, body.height
        if under is not None:
            shift = body.depth + extra_gap + under.height
            glyphs.extend(under.shifted((width - under.width) / 2, -shift))
            depth = shift + under.depth
        glyphs.extend(body.shifted((width - body.width) / 2, 0.0))
        if over is not None:
            shift = body.height + extra_gap + over.depth
            glyphs.extend(over.shifted((width - over.width) / 2, shift))
            height = shift + over.height
        return Box(width=width, height=height, depth=depth, glyphs=glyphs, cls=REL if node.over is not None and not node.brace else ORD)

    def array(self, node: Array, style: str) -> Box:
        """Rows and columns, centred on the axis, between the environment's delimiters."""
        size = SIZE[base_style(style)]
        cell_style = "D" if node.display else ("T" if base_style(style) in ("D", "T") else base_style(style))
        grid = [[self.row(cell, cell_style) for cell in row] for row in node.rows]
        if not grid:
            grid = [[Box()]]
        columns = max(len(row) for row in grid)
        widths = [0.0] * columns
        for row in grid:
            for index, box in enumerate(row):
                widths[index] = max(widths[index], box.width)
        heights = [max([0.7 * size] + [box.height for box in row]) for row in grid]
        depths = [max([0.3 * size] + [box.depth for box in row]) for row in grid]
        # Baselines: consecutive rows at least row_step apart; the block is centred on the axis.
        baselines = [0.0]
        for index in range(1, len(grid)):
            step = max(node.row_step * size, depths[index - 1] + heights[index] + 0.1 * size)
            baselines.append(baselines[-1] - step)
        total_height = heights[0] - baselines[-1] + depths[-1]
        offset = heights[0] - total_height / 2 - 0.25 * size  # centre on the axis
        block = Box(height=heights[0] - offset, depth=-(baselines[-1] - offset) + depths[-1])
        node = Array(node.rows, drawn_delimiter(node.left, block, size), drawn_delimiter(node.right, block, size), node.col_gap, node.row_step, node.display, node.align_pairs)
        glyphs, x_left = self.opening(node.left, size)
        if node.left:
            x_left += 0.1 * size
        gap = node.col_gap * size
        column_x = []
        x = x_left + (gap / 2 if node.col_gap else 0.0)
        for width in widths:
            column_x.append(x)
            x += width + gap
        if node.col_gap:
            x -= gap / 2
        for row_index, row in enumerate(grid):
            y = baselines[row_index] - offset
            for index, box in enumerate(row):
                if node.align_pairs:
                    # align: odd columns flush right, even flush left (the relation starts the cell).
                    dx = widths[index] - box.width if index % 2 == 0 else 0.0
                elif node.left == "{" or node.right == "}":
                    dx = 0.0  # cases: left-aligned cells
                else:
                    dx = (widths[index] - box.width) / 2
                glyphs.extend(box.shifted(column_x[index] + dx, y))
        if node.right:
            x += 0.1 * size + self.closing(node.right, x + 0.1 * size, size, glyphs)
        top = heights[0] - offset
        bottom = -(baselines[-1] - offset) + depths[-1]
        return Box(width=x, height=max(top, 0.75 * size), depth=max(bottom, 0.25 * size), glyphs=glyphs, cls=INNER if node.left or node.right else ORD)


# =================================================================================================
# Layouts, neighbours and matching
# =================================================================================================
