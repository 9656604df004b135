"""The README's screenshot of the report page, and the scoreboard it shows.

`retake(profile)` opens `reports/index.html` in headless Chromium (`browser`) at 1280 px and captures the page
from its top to the end of the scoreboard (the four phenomena and every claim line), then writes into the PNG a
text chunk (`KEY`) holding the SHA-256 of the `claims.json` it shows. `stale(profile)` compares that hash with the
scoreboard on disk, so a test fails when the screenshot is older than the scoreboard, with no browser needed. The
workbook runner retakes it after the page (full profile; README's image); where no Chromium is found it says so.

    python -m gpolib.workbook.index full      # the page and this screenshot, from the committed scoreboard
"""
from __future__ import annotations

import hashlib
import struct
import zlib
from pathlib import Path
from typing import Optional

from .. import paths
from ..folders import write_bytes

NAME = "index_screenshot.png"
"""the screenshot's file name under figures/ (README shows reports/figures/index_screenshot.png)"""
KEY = "gpolib:scoreboard-sha256"
"""PNG tEXt keyword holding the SHA-256 of the claims.json the screenshot shows"""
WIDTH = 1280
"""viewport width in CSS pixels (the page must read at this width without horizontal scrolling)"""
_PNG = b"\x89PNG\r\n\x1a\n"


def _chunks(png: bytes) -> list:
    """[(type, data)] of a PNG's chunks; raises ValueError on anything that is not a PNG."""
    if not png.startswith(_PNG):
        raise ValueError("not a PNG file")
    out, i = [], len(_PNG)
    while i < len(png):
        (n,), kind = struct.unpack(">I", png[i:i + 4]), png[i + 4:i + 8]
        out.append((kind, png[i + 8:i + 8 + n]))
        i += 12 + n
    return out


def _chunk(kind: bytes, data: bytes) -> bytes:
    # length, type, data, CRC-32 over type + data (PNG spec, 5.3)
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def texts(png: bytes) -> dict:
    """{keyword: text} of a PNG's tEXt chunks."""
    pairs = [data.split(b"\0", 1) for kind, data in _chunks(png) if kind == b"tEXt"]
    return {k.decode("latin-1"): v.decode("latin-1") for k, v in pairs}


def with_text(png: bytes, key: str, value: str) -> bytes:
    """The PNG with one tEXt chunk `key` = `value` just before IEND (an older one of that key dropped)."""
    kept = [(k, d) for k, d in _chunks(png) if not (k == b"tEXt" and d.split(b"\0", 1)[0] == key.encode("latin-1"))]
    text = (b"tEXt", key.encode("latin-1") + b"\0" + value.encode("latin-1"))
    return _PNG + b"".join(_chunk(k, d) for k, d in kept[:-1] + [text, kept[-1]])


def scoreboard_hash(profile: str = "full", root: Path | str | None = None) -> str:
    """SHA-256 (hex) of the scoreboard file `claims.json` ('' where there is none)."""
    f = paths.reports_dir(profile, root) / "claims.json"
    return hashlib.sha256(f.read_bytes()).hexdigest() if f.exists() else ""


def path(profile: str = "full", root: Path | str | None = None) -> Path:
    return paths.figures_dir(profile, root) / NAME


def stale(profile: str = "full", root: Path | str | None = None) -> Optional[str]:
    """Why the screenshot does not show the scoreboard on disk (missing, unmarked, other hash); None if current."""
    f = path(profile, root)
    if not f.exists():
        return f"{f.name} is missing"
    shown = texts(f.read_bytes()).get(KEY)
    if shown is None:
        return f"{f.name} does not say which scoreboard it shows (no {KEY} text chunk)"
    now = scoreboard_hash(profile, root)
    return None if shown == now else f"{f.name} shows scoreboard {shown[:12]}, claims.json is {now[:12]}"


def capture(html: Path, out: Path, mark: str) -> bool:
    """Screenshot the page from its top to the scoreboard's end into `out`, marked with `mark`; True if the file's
    bytes changed."""
    from . import browser

    with browser.open_page(width=WIDTH) as page:
        page.goto(html.resolve().as_uri())
        bottom = browser.layout(page)["board_bottom"]
        shot = page.screenshot(out.with_suffix(".tmp.png"), height=round(bottom) + 16)
    png = with_text(shot.read_bytes(), KEY, mark)
    shot.unlink()
    if out.exists() and out.read_bytes() == png:
        return False
    write_bytes(out, png)
    return True


def retake(profile: str = "full", root: Path | str | None = None) -> str:
    """Retake the screenshot of `reports/index.html` (written before); returns the line the runner prints."""
    from . import browser

    try:
        browser.find_chromium()
    except FileNotFoundError as err:
        return f"screenshot: not retaken ({err})"
    out = path(profile, root)
    changed = capture(paths.reports_dir(profile, root) / "index.html", out, scoreboard_hash(profile, root))
    return f"screenshot: {paths.relative(out)} {'retaken' if changed else 'unchanged'}"
