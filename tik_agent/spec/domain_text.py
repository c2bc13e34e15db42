"""The certified domain in words: the lines a certificate carries and ``python -m <package>`` prints."""

from __future__ import annotations

from tik_agent.spec.domain import Domain, Span


def _number(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _span(span: Span) -> str:
    if span.values:
        return " or ".join(_number(v) for v in span.values)
    return _number(span.low) if span.low == span.high else f"{_number(span.low)} to {_number(span.high)}"


def _either(items) -> str:
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def describe(domain: Domain, inputs, layout: str = "rows", device: str | None = None) -> list[str]:
    """One line per axis: dimensions, dtypes, layouts, keywords, integer values, exclusions;
    with ``device``, what an evaluation there judged of the largest sizes."""
    head = ("Certified domain (declared by the seed's spec):" if domain.declared else
            "Certified domain (the seed's spec declares none: this is what its parity grid judges):")
    batch = "M (sequences)" if layout == "sequences" else "M (rows)"
    dims = "; ".join(f"{batch if name == 'M' else name} {_span(s)}" for name, s in domain.dims.items())
    lines = [head, f"  dimensions: {dims}"]
    lines.append(f"  dtypes: {_dtypes(domain)}")
    lines.append(f"  layouts: {_layouts(domain, inputs)}")
    if domain.kwargs:
        lines.append("  keywords: " + "; ".join(f"{k} {_span(s)}" for k, s in domain.kwargs.items()))
    for name, values in domain.values.items():
        below = f"{values.below} - 1" if isinstance(values.below, str) else str(values.below - 1)
        text = f"  values: {name} {values.low} to {below}"
        for s in values.specials:
            text += f"; {s.value}: {s.result}"
        lines.append(text)
    for text in domain.excludes:
        lines.append(f"  not certified: {text}")
    capped = {name: s.judged_high(device) for name, s in domain.dims.items()
              if device and not s.values and s.judged_high(device) < s.high}
    if capped:
        lines.append(f"  judged on {device} up to " + ", ".join(f"{k} {_number(v)}" for k, v in capped.items())
                     + " (the interpreter's cost); larger sizes in the range were judged by no case on this device")
    lines.append("  Calls outside it raise NotCertifiedError.")
    return lines


def _dtypes(domain: Domain) -> str:
    names = " and ".join(domain.float_inputs) or "the float inputs"
    text = f"{names} all {_either(domain.dtypes)}"
    for extra in domain.mixed:
        others = [n for n in domain.float_inputs if n not in extra]
        given = ", ".join(f"{k} {v}" for k, v in extra.items())
        text += f"; or {given} with {' and '.join(others) or 'the rest'} in any of those"
    return text


def _layouts(domain: Domain, inputs) -> str:
    parts = [f"{i.name} {_either(domain.layouts_of(i.name))}" for i in inputs]
    return "; ".join(parts)
