"""Every colour pair the console draws text in meets WCAG AA (4.5:1), in the light scheme and
in the dark one: computed from the custom properties of ``console.css`` itself."""

from __future__ import annotations

import re
from importlib.resources import files

import pytest

CSS = (files("flask_ratchet.static") / "ratchet" / "console.css").read_text()
AA = 4.5
STATUSES = ("pending", "running", "succeeded", "failed", "paused", "canceled", "waiting")
#: (text, background): badges, then text on the page, a panel, a notice, the header.
PAIRS = (
    *(("on-status", s) for s in STATUSES),
    ("fg", "bg"),
    ("fg", "panel"),
    ("muted", "bg"),
    ("muted", "panel"),
    ("accent", "panel"),
    ("accent", "bg"),
    ("on-accent", "accent"),
    ("failed", "panel"),  # an error's text
    ("running", "panel"),  # an overdue fire time
    ("succeeded", "panel"),
    ("tag-fg", "tag-bg"),
    ("alarm-fg", "alarm-bg"),
    ("alarm-link", "alarm-bg"),
    ("ok-fg", "ok-bg"),
    ("warn-fg", "warn-bg"),
    ("accent", "info-bg"),
    ("bar-fg", "bar-bg"),
    ("bar-muted", "bar-bg"),
    ("bar-strong", "bar-bg"),
)


def variables(block: str) -> dict[str, str]:
    return dict(re.findall(r"--([a-z-]+):\s*(#[0-9a-fA-F]{3,6})", block))


def schemes() -> dict[str, dict[str, str]]:
    light = re.search(r"^:root \{(.*?)\}", CSS, re.M | re.S)
    dark = re.search(
        r"@media \(prefers-color-scheme: dark\) \{\s*:root \{(.*?)\}", CSS, re.M | re.S
    )
    assert light is not None and dark is not None
    light_vars = variables(light.group(1))
    return {"light": light_vars, "dark": light_vars | variables(dark.group(1))}


def luminance(colour: str) -> float:
    text = colour.lstrip("#")
    if len(text) == 3:
        text = "".join(c * 2 for c in text)
    channels = [int(text[i : i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    high, low = sorted((luminance(a), luminance(b)), reverse=True)
    return (high + 0.05) / (low + 0.05)


def test_the_contrast_formula() -> None:
    assert contrast("#000", "#fff") == pytest.approx(21)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)  # just under AA


def test_the_dark_scheme_overrides_every_colour() -> None:
    found = schemes()
    light = variables(re.search(r"^:root \{(.*?)\}", CSS, re.M | re.S).group(1))  # type: ignore[union-attr]
    dark_only = found["dark"].keys() - light.keys()
    assert not dark_only
    assert all(found["dark"][k] != light[k] for k in ("fg", "bg", "panel", "on-status"))


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize(("text", "background"), PAIRS)
def test_text_meets_wcag_aa(scheme: str, text: str, background: str) -> None:
    colours = schemes()[scheme]
    ratio = contrast(colours[text], colours[background])
    assert ratio >= AA, f"{scheme}: --{text} on --{background} is {ratio:.2f}:1"


def test_every_badge_draws_its_text_in_the_on_status_colour() -> None:
    pill = re.search(r"^\.pill \{([^}]*)\}", CSS, re.M)
    assert pill is not None and "color:var(--on-status)" in pill.group(1)
    # Every badge background is one of the status colours checked above.
    for rule in re.findall(r"\.pill[.\w-]* \{ background:([^;]+);", CSS):
        assert rule.strip() in {f"var(--{s})" for s in STATUSES}, rule
