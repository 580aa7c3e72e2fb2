"""The web inspector at ``/``: served safely, and driven in real headless Chromium with real clicks.

The browser tests need Debian's ``chromium`` and ``chromium-driver`` packages
and the ``selenium`` Python package; ``make test`` installs them. When they are
missing the tests fail (never skip) and say so.
"""

from __future__ import annotations

import json
import re
import struct
import tempfile
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

import memlane
from live import LiveServer
from memlane.core.access import Access
from memlane.server import create_app

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
TOKEN_KEY = "memlane.inspector.token"
XSS = '<img src=x onerror="window.__pwned=1">'


# -- the data: two agents, a shared room, a private room, items with history ----


class Site:
    """A live service over a seeded memory, and alice's token.

    The memory's clock runs ``offset`` behind the real one while seeding, so the writes, facts and recalls
    spread over the last three days, as a timeline would show them; then it is the real clock.
    """

    def __init__(self, db: Path) -> None:
        self.offset = timedelta(days=-3)
        self.mem = memlane.open(str(db), embedder="fake", clock=lambda: datetime.now(UTC) + self.offset)
        access = Access(self.mem)
        _, self.token = access.create_agent("alice")
        access.create_agent("bob")
        access.create_room("team")
        access.add_member("team", "alice")
        access.add_member("team", "bob")
        access.create_room("secret")
        access.add_member("secret", "bob")
        alice = access.view(access.agent("alice"))
        bob = access.view(access.agent("bob"))
        for theme in ("light", "sepia", "dark"):  # version 3, two earlier versions in history
            alice.put(("agent", "alice"), "preferences.ui.theme", theme, metadata={"source": "settings page"})
        alice.put(("agent", "alice"), "preferences.editor.font", {"family": "Fira Code", "size": 13})
        for i in range(30):  # one log entry every two hours, a recall now and then
            self.offset += timedelta(hours=2)
            alice.put(("agent", "alice"), f"log.{i:03d}", f"entry {i}")
            if i % 4 == 0:
                alice.search("entry log", namespace_prefix="agent/alice")
        self.offset = timedelta(0)
        self._seed_facts(alice, bob)
        alice.put(("room", "team"), "decisions.db", "Use SQLite <b>not</b> Postgres for the dark theme store")
        alice.put(("room", "team"), "notes.html", XSS)
        bob.put(("room", "secret"), "plan", "bob's dark secret")
        self.server = LiveServer(create_app(self.mem))
        self.url = self.server.url + "/"

    def _seed_facts(self, alice: Any, bob: Any) -> None:
        mine = ("agent", "alice")
        self.ravi = alice.add_entity(mine, "Ravi", kind="person", aliases=["RK"], profile="billing engineer")
        self.billing = alice.add_entity(mine, "Billing migration", kind="project")
        self.kim = alice.add_entity(mine, "Kim", kind="person", profile=XSS, aliases=[XSS])
        self.team = alice.add_entity(("room", "team"), "Team Acme", kind="team")
        alice.assert_fact(mine, self.ravi.id, "works on", self.billing.id, source="note:17")
        alice.assert_fact(mine, self.ravi.id, "works on", self.billing.id, source="note:18")  # evidence, not a copy
        alice.assert_fact(mine, self.ravi.id, "based in", "Berlin", valid_from="2025-06-01T00:00:00Z")
        alice.assert_fact(mine, self.kim.id, "leads", self.billing.id)
        alice.assert_fact(("room", "team"), self.ravi.id, "member of", self.team.id)
        march = alice.assert_fact(mine, self.billing.id, "cutover date", "2026-03-01", source="plan-v1")
        alice.assert_fact(mine, self.billing.id, "cutover date", "2026-04-15", source="plan-v2", supersedes=march.id)
        doc = alice.add_document(
            mine, "Standup 3 March", ["Ravi: the cutover moves to mid April.", "Kim: fine by me."], source="meeting:42"
        )
        alice.add_claim(mine, "The cutover moves to mid April", speaker="Ravi", chunk=doc.chunk_ids[0],
                        about=[self.ravi.id, self.billing.id])  # fmt: skip
        # bob's secret room links a secret entity to the team: alice must not see it, on any page
        secret = bob.add_entity(("room", "secret"), "Secret plan", kind="project")
        bob.assert_fact(("room", "secret"), secret.id, "involves", self.team.id)

    def close(self) -> None:
        self.server.stop()
        self.mem.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    s = Site(tmp_path_factory.mktemp("inspector") / "memory.db")
    yield s
    s.close()


# -- served safely (no browser needed) -------------------------------------------


def test_page_and_assets_are_served_locally_under_a_strict_policy(tmp_path: Path) -> None:
    mem = memlane.open(str(tmp_path / "m.db"), embedder=None)
    client = TestClient(create_app(mem))
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "connect-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["referrer-policy"] == "no-referrer"
    # only local assets: nothing from a CDN, no inline script
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page.text)
    assert re.findall(r"<script[^>]*>", page.text) == ['<script src="inspector/app.js" defer>']
    js = client.get("/inspector/app.js")
    assert js.status_code == 200 and js.headers["content-type"].startswith("text/javascript")
    assert "innerHTML" not in js.text.replace("never innerHTML", "")
    css = client.get("/inspector/style.css")
    assert css.status_code == 200 and css.headers["content-type"].startswith("text/css")
    missing = client.get("/inspector/index.py")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found"
    assert client.get("/inspector/..%2Finspector.py").status_code == 404
    assert client.head("/").status_code == 200
    # the API is untouched
    assert client.get("/v1/me").json()["error"]["type"] == "unauthorized"
    mem.close()


# -- the browser -----------------------------------------------------------------


def _require_browser() -> None:
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    if missing:
        pytest.fail(
            f"headless Chromium is not installed ({', '.join(missing)} missing): run `make test`, which installs "
            "Debian's chromium and chromium-driver packages (or: apt-get install -y chromium chromium-driver)",
            pytrace=False,
        )
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.fail("the selenium package is not installed: run `make test`, which installs the dev extras")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    _require_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.TemporaryDirectory(prefix="memlane-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1440,1000",
        f"--user-data-dir={profile.name}",
    ):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(15)
    yield driver
    driver.quit()
    profile.cleanup()


def _wait(driver: Any, condition: Callable[[Any], Any], timeout: float = 10) -> Any:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # the page re-renders parts of itself: an element seen a moment ago may be gone, so look again
    ignored = (NoSuchElementException, StaleElementReferenceException)
    return WebDriverWait(driver, timeout, poll_frequency=0.05, ignored_exceptions=ignored).until(condition)


def _css(driver: Any, selector: str) -> Any:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, selector)


def _all(driver: Any, selector: str) -> list[Any]:
    from selenium.webdriver.common.by import By

    return list(driver.find_elements(By.CSS_SELECTOR, selector))


def _visible(selector: str) -> Callable[[Any], Any]:
    def check(driver: Any) -> Any:
        found = [e for e in _all(driver, selector) if e.is_displayed()]
        return found[0] if found else False

    return check


def _text_in(selector: str, text: str) -> Callable[[Any], bool]:
    def check(driver: Any) -> bool:
        return any(text in e.text for e in _all(driver, selector) if e.is_displayed())

    return check


def _fresh(driver: Any, site: Site) -> None:
    """A clean tab on the inspector, signed out.

    The page settles first (signed out, or signed in with the token a test before left): cleared sooner, the
    saved token could be stored again by the page's sign-in with it, still in flight.
    """
    driver.get(site.url)
    _wait(driver, lambda d: _visible("#signin")(d) or _visible("#app")(d))
    driver.execute_script("sessionStorage.clear()")
    driver.get(site.url)
    _wait(driver, _visible("#token"))


def _sign_in(driver: Any, token: str) -> None:
    field = _css(driver, "#token")
    field.clear()
    field.send_keys(token)
    _css(driver, "#signin-form button[type=submit]").click()


def _screenshot(driver: Any, path: Path, record: Callable[[str, object], None]) -> Path:
    """Save a PNG of the page under the test's tmp_path; print its path and record it in the report."""
    assert driver.save_screenshot(str(path))
    assert path.exists() and path.stat().st_size > 20_000, f"screenshot {path} looks empty"
    print(f"inspector screenshot: {path}")
    record(path.stem, str(path))
    return path


def _console_problems(driver: Any) -> list[str]:
    """Script errors and policy violations in the browser console (expected 4xx answers aside)."""
    entries = driver.get_log("browser")
    return [
        e["message"]
        for e in entries
        if e.get("level") == "SEVERE" and not re.search(r"status of 40[13]", e.get("message", ""))
    ]


def test_wrong_token_shows_an_error_and_stays_signed_out(site: Site, browser: Any) -> None:
    _fresh(browser, site)
    _sign_in(browser, "ml_not-a-real-token")
    _wait(browser, _text_in("#signin-error", "401 unauthorized"))
    assert "a valid token is required" in _css(browser, "#signin-error").text
    assert not _css(browser, "#app").is_displayed()
    assert browser.execute_script(f"return sessionStorage.getItem('{TOKEN_KEY}')") is None
    assert "ml_not-a-real-token" not in browser.current_url


def test_browse_open_an_item_and_search_in_chromium(
    site: Site, browser: Any, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    _fresh(browser, site)
    _sign_in(browser, site.token)

    # who am I, and the token kept out of the URL and the page
    _wait(browser, _text_in("#who", "alice"))
    assert site.token not in browser.current_url and browser.current_url == site.url
    assert site.token not in browser.page_source
    assert site.token not in browser.execute_script("return document.body.innerText")
    assert browser.execute_script(f"return sessionStorage.getItem('{TOKEN_KEY}')") == site.token
    scope = _css(browser, "#scope").text
    assert "agent/alice" in scope and "team" in scope and "room/secret" not in scope

    # the namespaces alice may see, and nothing else
    _wait(browser, _visible("#ns-list button[data-ns='room/team']"))
    namespaces = [b.text for b in _all(browser, "#ns-list button.ns")]
    assert namespaces == ["All namespaces", "agent/alice", "room/team"]

    # the taxonomy at the top: one group per namespace, branches with counts
    _wait(browser, _visible("#tree .tree-group[data-ns='agent/alice']"))
    prefs = _css(browser, "#tree button.path.branch[data-ns='agent/alice'][data-path='preferences']")
    assert prefs.find_element("xpath", "..").text.endswith("2")
    assert _css(browser, "#tree button.path.branch[data-ns='agent/alice'][data-path='log']")

    # paging through every item: 25, then the rest with "Load more"
    _wait(browser, lambda d: len(_all(d, "#items tbody tr")) == 25)
    _css(browser, "#more").click()
    _wait(browser, lambda d: len(_all(d, "#items tbody tr")) == 34)
    assert not _css(browser, "#more").is_displayed()

    # drill: preferences -> preferences.ui -> the key preferences.ui.theme
    prefs.click()
    _wait(browser, _visible("#tree button.path.branch[data-path='preferences.ui']")).click()
    _wait(browser, _text_in("#crumbs", "ui"))
    crumbs = _css(browser, "#crumbs").text
    assert "agent" in crumbs and "alice" in crumbs and "preferences" in crumbs
    _wait(browser, lambda d: len(_all(d, "#items tbody tr")) == 1)
    _wait(browser, _visible("#tree button.path.leaf[data-path='preferences.ui.theme']")).click()

    # the item: value, type, metadata, version, author, and two earlier versions
    _wait(browser, _text_in("#item-key", "preferences.ui.theme"))
    detail = _css(browser, "#item").text
    assert json.loads(_css(browser, "#item-value").text) == "dark"
    assert json.loads(_css(browser, "#item-metadata").text) == {"source": "settings page"}
    for fact in ("Type\nstring", "Version\n3", "Author\nalice", "Created", "Updated"):
        assert fact in detail, fact
    rows = _all(browser, "#history tbody tr")
    assert [r.find_elements("css selector", "td")[0].text for r in rows] == ["2", "1"]
    assert all("replace" in r.text for r in rows) and '"sepia"' in rows[0].text
    _screenshot(browser, tmp_path / "inspector-browse.png", record_property)

    # stored text that looks like HTML stays text
    _css(browser, "#crumbs button.crumb").click()  # back to All
    _wait(browser, _visible("#tree button.path.branch[data-ns='room/team'][data-path='notes']")).click()
    _wait(browser, _visible("#tree button.path.leaf[data-path='notes.html']")).click()
    _wait(browser, _text_in("#item-key", "notes.html"))
    assert json.loads(_css(browser, "#item-value").text) == XSS
    assert _all(browser, "#item img") == [] and browser.execute_script("return window.__pwned") is None

    # search: fused score, each channel's rank, the envelope's counts and the RRF note
    _css(browser, "#tab-search").click()
    _wait(browser, _visible("#q")).send_keys("dark theme")
    _css(browser, "#search-form button[type=submit]").click()
    _wait(browser, _visible("#hits tbody tr"))
    hits = _all(browser, "#hits tbody tr")
    assert len(hits) >= 2
    first = hits[0].find_elements("css selector", "td")
    assert first[1].text == "agent/alice" and first[2].text == "preferences.ui.theme\ndark"  # key and text snippet
    assert float(first[3].text) > 0
    ranks = [r.text for r in hits[0].find_elements("css selector", ".rank")]
    assert ranks == ["lexical #1", "vector #1"]
    keys = [h.find_element("css selector", "button.item-link").text for h in hits]
    assert "decisions.db" in keys and "plan" not in keys  # bob's secret room stays out
    decision = hits[keys.index("decisions.db")]
    assert "Use SQLite <b>not</b> Postgres" in decision.text and decision.find_elements("css selector", "b") == []
    summary = _css(browser, "#search-summary").text
    assert re.search(r"lexical: \d+ nominated", summary) and re.search(r"vector: \d+ nominated", summary)
    assert "dropped by hydration: 0" in summary
    note = _css(browser, "#rrf-note")
    assert note.is_displayed() and "not a calibrated relevance" in note.text
    # a hit opens its item
    decision.find_element("css selector", "button.item-link").click()
    _wait(browser, _text_in("#item-key", "decisions.db"))
    assert "<b>not</b>" in _css(browser, "#item-value").text
    _screenshot(browser, tmp_path / "inspector-search.png", record_property)

    assert browser.execute_script("return window.__pwned") is None  # the <img onerror> hit never ran

    # a reload keeps the session; the URL never carries the token
    browser.refresh()
    _wait(browser, _text_in("#who", "alice"))
    assert site.token not in browser.current_url
    assert _console_problems(browser) == []


def test_api_errors_are_readable_and_sign_out_forgets_the_token(site: Site, browser: Any) -> None:
    _fresh(browser, site)
    _sign_in(browser, site.token)
    _wait(browser, _text_in("#who", "alice"))

    _css(browser, "#tab-search").click()
    _wait(browser, _visible("#q")).send_keys("dark")
    _css(browser, "#search-form button[type=submit]").click()
    _wait(browser, _visible("#hits tbody tr"))
    # a namespace alice may not read: the API's 403 as a readable message, and no stale hits
    _css(browser, "#search-ns").send_keys("room/secret")
    _css(browser, "#search-form button[type=submit]").click()
    banner = _wait(browser, _visible("#error"))
    assert "403 forbidden" in banner.text and "'room/secret' is outside what this agent may read" in banner.text
    assert _all(browser, "#hits tbody tr") == [] and not _css(browser, "#search-summary").is_displayed()
    _css(browser, "#error-close").click()
    assert not _css(browser, "#error").is_displayed()

    _css(browser, "#signout").click()
    _wait(browser, _visible("#token"))
    assert browser.execute_script(f"return sessionStorage.getItem('{TOKEN_KEY}')") is None
    assert not _css(browser, "#app").is_displayed() and not _css(browser, "#error").is_displayed()
    assert "alice" not in _css(browser, "body").text
    browser.refresh()
    _wait(browser, _visible("#token"))  # still signed out after a reload


# -- the API docs at /docs ----------------------------------------------------------


def test_api_docs_render_offline_and_try_it_out_sends_the_bearer_token(site: Site, browser: Any) -> None:
    """The docs UI loads from the service itself (this browser has no network) and can authenticate."""
    from selenium.webdriver.common.by import By

    browser.get(site.server.url + "/docs")
    _wait(browser, lambda d: len(_all(d, ".opblock")) > 20, timeout=20)
    sources = [s.get_attribute("src") or "" for s in _all(browser, "script")]
    assert all(src == "" or src.startswith(site.server.url) for src in sources), sources
    _css(browser, ".btn.authorize").click()
    field = _wait(browser, _visible(".modal-ux input"))
    field.send_keys(site.token)
    _css(browser, ".modal-ux .btn.authorize").click()
    _css(browser, ".modal-ux .btn-done").click()
    # Try it out on GET /v1/export: it needs a token, so a 200 means the token went with the request
    block = _wait(browser, _visible("[id$='export_v1_export_get']"))
    block.find_element(By.CSS_SELECTOR, ".opblock-summary").click()
    _wait(browser, _visible(".try-out__btn")).click()
    _wait(browser, _visible(".execute")).click()
    answer = _wait(browser, _visible(".responses-table .response .response-col_status"), timeout=20)
    assert answer.text.strip().startswith("200"), answer.text
    # The documented answers list memlane's error codes, never FastAPI's 422 (ids in the body may contain "422")
    documented = [
        cell.text.strip() for cell in block.find_elements(By.CSS_SELECTOR, "tr.response .response-col_status")
    ]
    assert "400" in documented and "422" not in documented, documented


def test_switching_namespace_closes_the_item_panel_of_the_one_left(site: Site, browser: Any) -> None:
    _fresh(browser, site)
    _sign_in(browser, site.token)
    _wait(browser, _visible("#ns-list button[data-ns='agent/alice']")).click()
    _wait(browser, _visible("#tree button.path.branch[data-ns='agent/alice'][data-path='preferences']")).click()
    _wait(browser, _visible("#tree button.path.branch[data-path='preferences.ui']")).click()
    _wait(browser, _visible("#tree button.path.leaf[data-path='preferences.ui.theme']")).click()
    _wait(browser, _text_in("#item-key", "preferences.ui.theme"))
    # drilling inside the same namespace keeps the item open
    _css(browser, "#ns-list button[data-ns='agent/alice']").click()
    _wait(browser, lambda d: len(_all(d, "#items tbody tr")) == 25)
    assert _css(browser, "#item").is_displayed()
    # another namespace: the panel goes
    _css(browser, "#ns-list button[data-ns='room/team']").click()
    _wait(browser, lambda d: not _css(d, "#item").is_displayed())
    _wait(browser, lambda d: all("room/team" in r.text for r in _all(d, "#items tbody tr")))


# -- the facts layer and the timeline ------------------------------------------------


def _png_pixels(png: bytes) -> tuple[int, int, list[tuple[int, ...]]]:
    """``(width, height, RGB pixels)`` of an 8-bit, non-interlaced RGB or RGBA PNG (what Chromium writes)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks, header = 8, [], b""
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, data = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            header = data
        elif kind == b"IDAT":
            chunks.append(data)
        pos += 12 + length
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert depth == 8 and color in (2, 6) and interlace == 0, (depth, color, interlace)
    bpp = 3 if color == 2 else 4
    raw, stride = zlib.decompress(b"".join(chunks)), width * bpp
    rows: list[bytearray] = []
    prev = bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, corner = prev[i], prev[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + up) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 0xFF
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 0xFF
        rows.append(line)
        prev = line
    pixels = [tuple(row[i : i + 3]) for row in rows for i in range(0, stride, bpp)]
    return width, height, pixels


def _near(pixel: tuple[int, ...], rgb: tuple[int, int, int], tolerance: int = 8) -> bool:
    return all(abs(a - b) <= tolerance for a, b in zip(pixel, rgb, strict=True))


def _node_names(driver: Any) -> dict[str, str]:
    nodes = _all(driver, "#graph g.node")
    return {g.get_attribute("data-id"): g.find_element("css selector", "text").text for g in nodes}


def test_entity_page_shows_facts_graph_and_claims_with_sources_in_chromium(
    site: Site, browser: Any, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    _fresh(browser, site)
    _sign_in(browser, site.token)
    _wait(browser, _text_in("#who", "alice"))
    _css(browser, "#tab-entities").click()
    _wait(browser, _visible("#entities tbody tr"))
    names = [b.text for b in _all(browser, "#entities button.entity-link")]
    assert names == ["Billing migration", "Kim", "Ravi", "Team Acme"]  # bob's secret entity stays out

    _css(browser, f"#entities button.entity-link[data-id='{site.ravi.id}']").click()
    _wait(browser, _text_in("#entity-name", "Ravi"))
    page = _css(browser, "#entity").text
    assert "RK" in page and "billing engineer" in page and "agent/alice" in page
    # the facts, with both clocks and their sources
    heads = [th.text for th in _all(browser, "#entity-fact-table thead th")]
    assert heads[:8] == ["Subject", "Predicate", "Object", "Valid from", "Valid to", "Recorded", "Retracted",
                         "Evidence (sources)"]  # fmt: skip
    facts = {r.find_elements("css selector", "td")[1].text: r for r in _all(browser, "#entity-fact-table tbody tr")}
    assert set(facts) == {"works_on", "based_in", "member_of"}
    works = facts["works_on"].find_elements("css selector", "td")
    assert works[2].text == "Billing migration"
    assert [c.text for c in facts["works_on"].find_elements("css selector", ".source")] == ["note:17", "note:18"]
    assert works[7].text.startswith("2 ") and works[8].text == "current"
    based = facts["based_in"].find_elements("css selector", "td")
    assert based[2].text == '"Berlin"' and based[3].text == "2025-06-01 00:00:00 UTC" and based[5].text.endswith("UTC")
    # the neighbourhood: Ravi in the middle, what his current facts link him to around him
    _wait(browser, _visible("#graph g.node.centre"))
    around = {site.ravi.id: "Ravi", site.billing.id: "Billing migration", site.team.id: "Team Acme"}
    assert _node_names(browser) == around
    assert len(_all(browser, "#graph line.edge")) == 2
    assert sorted(t.text for t in _all(browser, "#graph text.edge-label")) == ["member_of", "works_on"]
    # two hops: Kim leads the billing migration
    from selenium.webdriver.support.ui import Select

    Select(_css(browser, "#graph-hops")).select_by_value("2")
    _wait(browser, lambda d: site.kim.id in _node_names(d))
    assert _css(browser, f"#graph g.node[data-id='{site.kim.id}']").get_attribute("data-hop") == "2"
    # the claims, each with its source: document, where it came from, the passage
    claim = _css(browser, "#entity-claim-table tbody tr")
    assert "The cutover moves to mid April" in claim.text and "Ravi" in claim.text
    source = claim.find_element("css selector", ".claim-source").text
    assert "Standup 3 March" in source and "meeting:42" in source and "the cutover moves to mid April." in source
    _screenshot(browser, tmp_path / "inspector-entity.png", record_property)
    browser.execute_script("arguments[0].scrollIntoView()", _css(browser, "#entity-fact-table"))
    _screenshot(browser, tmp_path / "inspector-entity-facts.png", record_property)

    # a neighbour opens its own page: the date that moved, on both clocks
    _css(browser, f"#graph g.node[data-id='{site.billing.id}']").click()
    _wait(browser, _text_in("#entity-name", "Billing migration"))
    rows = [r for r in _all(browser, "#entity-fact-table tbody tr") if "cutover_date" in r.text]
    assert [(r.get_attribute("data-state"), r.find_elements("css selector", "td")[2].text) for r in rows] == [
        ("retracted", '"2026-03-01"'),
        ("current", '"2026-04-15"'),
    ]
    assert rows[0].find_elements("css selector", "td")[6].text.endswith("UTC")  # its belief ended
    assert [c.text for c in rows[0].find_elements("css selector", ".source")] == ["plan-v1"]
    # a name in a fact opens that entity; a profile that looks like HTML stays text
    _css(browser, f"#entity-fact-table button.entity-link[data-id='{site.kim.id}']").click()
    _wait(browser, _text_in("#entity-name", "Kim"))
    assert _css(browser, "#entity").text.count(XSS) == 2  # alias and profile
    assert _all(browser, "#entity img") == [] and browser.execute_script("return window.__pwned") is None
    # the team's page shows no trace of bob's secret room
    _css(browser, "#entity-back").click()
    _wait(browser, _visible(f"#entities button.entity-link[data-id='{site.team.id}']")).click()
    _wait(browser, _text_in("#entity-name", "Team Acme"))
    _wait(browser, _visible("#graph g.node.centre"))
    assert set(_node_names(browser).values()) == {"Team Acme", "Ravi", "Billing migration"}  # still two hops
    Select(_css(browser, "#graph-hops")).select_by_value("1")
    _wait(browser, lambda d: set(_node_names(d).values()) == {"Team Acme", "Ravi"})
    assert "Secret" not in _css(browser, "#entity").text
    assert _console_problems(browser) == []


def test_timeline_plots_writes_and_recalls_per_namespace_in_chromium(
    site: Site, browser: Any, tmp_path: Path, record_property: Callable[[str, object], None]
) -> None:
    _fresh(browser, site)
    _sign_in(browser, site.token)
    _wait(browser, _text_in("#who", "alice"))
    _css(browser, "#tab-timeline").click()
    plot = _wait(browser, _visible("#timeline-svg"))
    lanes = [g.get_attribute("data-ns") for g in _all(browser, "#timeline-svg g.lane")]
    assert lanes == ["agent/alice", "room/team"]  # bob's secret room is not alice's to see
    totals = {
        r.find_element("css selector", "code").text: [int(td.text) for td in r.find_elements("css selector", "td.num")]
        for r in _all(browser, "#timeline-totals tbody tr")
    }
    # writes, deletes, facts, recalls: 3 theme versions, the font and 30 log entries; 4 entities and 5 facts
    # versions, a document and a claim... and the searches made while seeding (one more if a test searched)
    assert totals["agent/alice"][:3] == [34, 0, 3 + 5 + 1 + 1]
    assert totals["agent/alice"][3] >= 8
    assert totals["room/team"][:3] == [2, 0, 2]
    # the bars spread over the three days the writes took
    writes = {b.get_attribute("x") for b in _all(browser, "#timeline-svg g.lane[data-ns='agent/alice'] rect.writes")}
    assert len(writes) >= 25
    assert _all(browser, "#timeline-svg rect.recalls")

    # the screenshot shows the plot: bars in the writes and recalls colours on the plot's background
    shot = tmp_path / "inspector-timeline.png"
    shot.write_bytes(plot.screenshot_as_png)
    print(f"inspector screenshot: {shot}")
    record_property(shot.stem, str(shot))
    width, height, pixels = _png_pixels(shot.read_bytes())
    assert width >= 600 and height >= 150
    background = max(set(pixels), key=pixels.count)
    assert sum(p != background for p in pixels) > 0.01 * len(pixels)
    assert sum(_near(p, (0x25, 0x63, 0xEB)) for p in pixels) > 200  # writes
    assert sum(_near(p, (0xEA, 0x58, 0x0C)) for p in pixels) > 50  # recalls
    assert sum(_near(p, (0x16, 0xA3, 0x4A)) for p in pixels) > 20  # facts
    _screenshot(browser, tmp_path / "inspector-timeline-page.png", record_property)

    # by day: one bar per namespace and day
    from selenium.webdriver.support.ui import Select

    Select(_css(browser, "#tl-bucket")).select_by_value("day")
    _wait(browser, lambda d: 3 <= len(_all(d, "#timeline-svg g.lane[data-ns='agent/alice'] rect.writes")) <= 5)
    assert _console_problems(browser) == []
