"""The view in a real browser (headless Debian Chromium): verification, findings, tampering."""

from __future__ import annotations

from pathlib import Path

from tests.caisson.view.conftest import shoot
from tests.caisson.view.runs import LEAK_SEQ, leaky_run, tamper


def test_server_binds_localhost_and_says_so(tmp_path: Path, keys, serve):
    run = leaky_run(tmp_path / "run-a", keys[0], keys[1])
    server = serve([run])
    assert server.url.startswith("http://127.0.0.1:")
    assert "localhost only" in server.banner and "read-only" in server.banner


def test_run_page_verified_and_finding_links_to_its_event(tmp_path: Path, keys, serve, browser):
    run = leaky_run(tmp_path / "run-a", keys[0], keys[1], filler=400)
    server = serve([run])
    page = browser
    page.goto(f"{server.url}/run/0")
    verify = page.locator("#verify")
    assert verify.get_attribute("data-status") == "ok"
    assert verify.inner_text().startswith("VERIFIED")
    # verification is the first thing on the page
    assert page.locator("body > div").first.get_attribute("id") == "verify"
    assert page.locator("#findings-unverified").count() == 0
    leak = page.locator(".finding", has_text="leak")
    assert "answers/key.md" in leak.inner_text()
    shoot(page, "view-run")
    leak.locator("a.evidence").first.click()
    page.wait_for_url(f"**#seq-{LEAK_SEQ}")
    row = page.locator(f"#seq-{LEAK_SEQ}")
    assert row.is_visible()
    assert "excluded" in (row.get_attribute("class") or "")
    assert "/work/sandbox/answers/key.md" in row.inner_text() and "EXCLUDED PATH" in row.inner_text()
    assert page.evaluate("document.querySelector(':target').id") == f"seq-{LEAK_SEQ}"
    shoot(page, "view-run-evidence")
    # the timeline pages: 200 records, then a link to the next page
    assert page.locator("#timeline tr[id^=seq-]").count() == 200
    page.locator("#next").click()
    assert page.locator("#timeline tr[id^=seq-]").first.get_attribute("id") == f"seq-{LEAK_SEQ - 5 + 200}"


def test_tampered_ledger_shows_as_tampered(tmp_path: Path, keys, serve, browser):
    run = leaky_run(tmp_path / "run-t", keys[0], keys[1], filler=50)
    tamper(run)
    server = serve([run])
    page = browser
    page.goto(f"{server.url}/run/0")
    verify = page.locator("#verify")
    assert verify.get_attribute("data-status") == "tampered"
    assert "TAMPERED" in verify.inner_text() and "unverified" in verify.inner_text()
    assert "first bad record" in verify.inner_text()
    assert page.locator("#findings-unverified").is_visible()  # findings.json was written before the tampering
    table = page.locator("#timeline")
    assert "unverified" in (table.get_attribute("class") or "")
    shoot(page, "view-run-tampered")


def test_untrusted_key_is_not_verified(tmp_path: Path, keys, serve, browser):
    """A ledger signed by another key is not shown as verified, however intact."""
    from ledger import generate_keypair, load_verify_key

    other = generate_keypair(tmp_path / "other", tmp_path / "other.pub")
    run = leaky_run(tmp_path / "run-o", other, load_verify_key(tmp_path / "other.pub"))
    page = browser
    page.goto(f"{serve([run]).url}/run/0")
    assert page.locator("#verify").get_attribute("data-status") == "tampered"
    assert "key not trusted" in page.locator("#verify").inner_text()
