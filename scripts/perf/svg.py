"""svg.py - the plots of docs/PERFORMANCE.md, written as SVG text by hand
(no plotting library): a line chart (log or linear axes) and a grouped bar
chart.  Every number drawn comes from the caller; None values are left out
(a gap, never a zero).  Output is a complete standalone SVG document.
"""
import math
from xml.sax.saxutils import escape

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
          "#7f7f7f", "#bcbd22", "#17becf")
W, H = 820, 400
L, R, T, B = 70, 290, 40, 60  # margins: the legend sits on the right


def _fmt(v):
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 10000 or a < 0.01:
        return f"{v:.0e}".replace("e+0", "e").replace("e-0", "e-")
    if a >= 100:
        return f"{v:.0f}"
    if a >= 1:
        return f"{v:.3g}"
    return f"{v:.2g}"


class Axis:
    """Maps data values to pixels along [p0, p1]; log or linear."""

    def __init__(self, lo, hi, p0, p1, log):
        if log:
            lo, hi = math.log10(lo), math.log10(hi)
        if hi <= lo:
            lo, hi = lo - 0.5, hi + 0.5
        self.lo, self.hi, self.p0, self.p1, self.log = lo, hi, p0, p1, log

    def px(self, v):
        x = math.log10(v) if self.log else v
        return self.p0 + (x - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)

    def ticks(self):
        if self.log:
            return [10 ** e for e in range(math.floor(self.lo), math.ceil(self.hi) + 1)
                    if self.lo - 1e-9 <= e <= self.hi + 1e-9]
        step = 10 ** math.floor(math.log10((self.hi - self.lo) / 4 or 1))
        for m in (1, 2, 5, 10):
            if (self.hi - self.lo) / (step * m) <= 6:
                step *= m
                break
        first = math.ceil(self.lo / step) * step
        return [first + i * step for i in range(int((self.hi - first) / step) + 1)]


def _bounds(vals, log, zero):
    vals = [v for v in vals if v is not None and (v > 0 or not log)]
    if not vals:
        return (1, 10) if log else (0, 1)
    lo, hi = min(vals), max(vals)
    if log:
        return 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi * 1.0001))
    lo = min(lo, 0) if zero else lo - (hi - lo) * 0.1
    return lo, hi + (hi - lo) * 0.1 or 1


def _frame(title, xlabel, ylabel, xa, ya, xticks):
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2:.0f}" y="22" text-anchor="middle" font-size="15">{escape(title)}</text>']
    for v in ya.ticks():
        y = ya.px(v)
        out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W - R}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">{_fmt(v)}</text>')
    for x, label in xticks:
        out.append(f'<text x="{x:.1f}" y="{H - B + 18}" text-anchor="middle">{escape(label)}</text>')
    out.append(f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{(L + W - R) / 2:.0f}" y="{H - 14}" text-anchor="middle">{escape(xlabel)}</text>')
    out.append(f'<text x="16" y="{(T + H - B) / 2:.0f}" text-anchor="middle" '
               f'transform="rotate(-90 16 {(T + H - B) / 2:.0f})">{escape(ylabel)}</text>')
    return out


def _legend(names):
    out = []
    for i, n in enumerate(names):
        y = T + 10 + i * 20
        out.append(f'<rect x="{W - R + 12}" y="{y - 9}" width="12" height="12" fill="{COLORS[i % len(COLORS)]}"/>')
        out.append(f'<text x="{W - R + 30}" y="{y + 2}">{escape(n)}</text>')
    return out


def line_chart(title, xlabel, ylabel, series, xlog=True, ylog=False):
    """series: [(name, [(x, y or None), ...])] -> SVG text."""
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    xa = Axis(*_bounds(xs, xlog, False), L + 20, W - R - 20, xlog)
    ya = Axis(*_bounds(ys, ylog, True), H - B, T, ylog)
    xt = sorted(set(xs))
    out = _frame(title, xlabel, ylabel, xa, ya, [(xa.px(x), _fmt(x)) for x in xt])
    for i, (_, pts) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        good = [(xa.px(x), ya.px(y)) for x, y in pts if y is not None and (y > 0 or not ylog)]
        if len(good) > 1:
            out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2" points="'
                       + " ".join(f"{x:.1f},{y:.1f}" for x, y in good) + '"/>')
        out += [f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{c}"/>' for x, y in good]
    out += _legend([n for n, _ in series])
    out.append("</svg>")
    return "\n".join(out) + "\n"


def bar_chart(title, ylabel, groups, series, ylog=False, ref=None):
    """groups: [label]; series: [(name, [value or None per group])]; ref: a
    horizontal reference line (e.g. 1.0 for ratios) -> SVG text."""
    vals = [v for _, vs in series for v in vs] + ([ref] if ref is not None else [])
    ya = Axis(*_bounds(vals, ylog, True), H - B, T, ylog)
    gw = (W - L - R) / max(len(groups), 1)
    bw = gw * 0.8 / max(len(series), 1)
    out = _frame(title, "", ylabel, None, ya, [(L + gw * (g + 0.5), lab) for g, lab in enumerate(groups)])
    base = H - B if ylog else ya.px(max(0.0, ya.lo))
    for i, (_, vs) in enumerate(series):
        c = COLORS[i % len(COLORS)]
        for g, v in enumerate(vs):
            if v is None or (ylog and v <= 0):
                continue
            x = L + gw * g + gw * 0.1 + bw * i
            y = ya.px(v)
            top, h = min(y, base), abs(base - y)
            out.append(f'<rect x="{x:.1f}" y="{top:.1f}" width="{bw * 0.92:.1f}" height="{h:.1f}" fill="{c}">'
                       f'<title>{escape(series[i][0])}, {escape(groups[g])}: {_fmt(v)}</title></rect>')
    if ref is not None:
        y = ya.px(ref)
        out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W - R}" y2="{y:.1f}" stroke="#000" stroke-dasharray="5,4"/>')
    out += _legend([n for n, _ in series])
    out.append("</svg>")
    return "\n".join(out) + "\n"
