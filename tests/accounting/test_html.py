"""The HTML page: self-contained, and its plots really drawn, checked by rendering it in
headless Chromium (Debian package `chromium`): the DOM it parsed holds the SVG plots with
their bars, interval bars and points, and a screenshot shows their colours."""

import re
import subprocess
from pathlib import Path

import pytest
from PIL import Image

from accounting import html, report
from accounting.interchange import exposure_from, incident_from
from simulator import reliability_year as ry
from tests.realcomp import require_binary

PLOTS = ("lost-per-week", "mtbf", "ttd", "ttr")


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    year = ry.simulate(5, ry.Setup(lemons=1))
    built = report.build(
        [incident_from(o) for o in year.incidents], [exposure_from(o) for o in year.exposure]
    )
    path = tmp_path_factory.mktemp("html") / "report.html"
    path.write_text(html.render(built))
    return path


def _chromium(*args: str) -> subprocess.CompletedProcess[bytes]:
    binary = require_binary("chromium")
    return subprocess.run(
        [binary, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-dev-shm-usage", *args],
        capture_output=True, timeout=120, check=True,
    )  # fmt: skip


def test_the_page_names_no_external_url_and_runs_no_script(page: Path) -> None:
    text = page.read_text()
    assert not re.search(
        r"(?i)https?://|//[a-z0-9.-]+\.[a-z]{2,}/|<script|<link|@import|src=", text
    )


def test_chromium_parses_every_plot_as_svg_with_its_marks(page: Path) -> None:
    dom = _chromium("--dump-dom", page.as_uri()).stdout.decode()
    for plot in PLOTS:
        match = re.search(rf'<svg id="{plot}".*?</svg>', dom, re.S)
        assert match, plot
        marks = len(
            re.findall(
                r'<(rect class="bar"|line class="interval"|circle class="point")', match.group(0)
            )
        )
        assert marks >= 3, (plot, marks)


def test_a_screenshot_shows_the_plots_colours(page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "shot.png"
    _chromium(f"--screenshot={shot}", "--window-size=1000,2600", "--hide-scrollbars", page.as_uri())
    image = Image.open(shot).convert("RGB")
    colours = image.getcolors(maxcolors=1 << 20) or []
    seen: dict[tuple[int, ...], int] = {tuple(rgb): n for n, rgb in colours}  # type: ignore[arg-type]

    def pixels(rgb: tuple[int, int, int]) -> int:
        near = [
            n for c, n in seen.items() if max(abs(a - b) for a, b in zip(c, rgb, strict=True)) < 8
        ]
        return sum(near)

    assert pixels((0x1B, 0x9E, 0x77)) > 500  # capacity bars
    assert pixels((0x38, 0x6C, 0xB0)) > 500  # the TTD and TTR histograms
    assert pixels((0x1F, 0x78, 0xB4)) > 50  # MTBF points
    assert pixels((0xD9, 0x5F, 0x02)) > 20  # restart bars
