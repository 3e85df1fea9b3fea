"""The dashboard in a real headless browser (Debian's chromium, driven by selenium +
chromium-driver): sign in with the token, watch a job run, click cancel, then retry.

Outside CI the test skips when chromium/chromedriver/selenium are missing (install with
`apt-get install chromium chromium-driver`, `pip install selenium`); with CI=true it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from support.service_server import TOKEN, Server, assert_exactly_once

CHROMIUM = shutil.which("chromium")
DRIVER = shutil.which("chromedriver")


def _need_browser():
    missing = [name for name, path in (("chromium", CHROMIUM), ("chromedriver (chromium-driver)", DRIVER)) if not path]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip)")
    if missing:
        reason = f"headless browser test needs {', '.join(missing)}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)


@pytest.fixture
def browser(tmp_path):
    _need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        f"--user-data-dir={tmp_path / 'chromium-profile'}",
        "--window-size=1280,800",
    ):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(30)
    try:
        yield driver
    finally:
        driver.quit()


def _wait(predicate, timeout: float, what: str, driver):
    deadline = time.monotonic() + timeout
    last_error = None
    while time.monotonic() < deadline:
        try:
            value = predicate()
            if value:
                return value
        except Exception as exc:  # the table is redrawn every second: an element may go stale
            last_error = exc
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what} ({last_error!r})\n{driver.page_source[-3000:]}")


def _cell(driver, job_id: str, css: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.CSS_SELECTOR, f"#job-{job_id} {css}").text


def _click(driver, job_id: str, what: str) -> None:
    from selenium.webdriver.common.by import By

    driver.find_element(By.CSS_SELECTOR, f"#job-{job_id} button.{what}").click()


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_dashboard_signs_in_shows_progress_and_cancels_and_retries(tmp_path, browser):
    from selenium.webdriver.common.by import By

    srv = Server(tmp_path).start()
    n, out = 50, tmp_path / "out"
    # inputs 4 on wait for the first gate, 20 on for the second too: the progress is read before
    # and after the first opens, and the job is still running when it is canceled, at any load
    gates = [tmp_path / "gate1", tmp_path / "gate2"]
    try:
        with srv.client() as c:
            bad = srv.submit(
                c,
                pipeline="square",
                inputs=list(range(10)),
                output_dir=str(tmp_path / "bad"),
                config={"fail_on": 4},
                options={"chunk_size": 2, "num_workers": 1},
            )
        # no token yet: the sign-in form, and no job data anywhere in the page
        browser.get(srv.url + "/")
        form = browser.find_element(By.ID, "login")
        assert form.is_displayed() and not browser.find_element(By.ID, "main").is_displayed()
        assert bad["id"] not in browser.page_source
        # a wrong token is refused and the form comes back
        browser.find_element(By.ID, "token").send_keys("wrong-token-0123456789")
        browser.find_element(By.ID, "login-button").click()
        _wait(lambda: browser.find_element(By.ID, "login-message").text == "wrong token", 10, "the refusal", browser)
        token_box = browser.find_element(By.ID, "token")
        token_box.clear()
        token_box.send_keys(TOKEN)
        browser.find_element(By.ID, "login-button").click()

        _wait(lambda: _cell(browser, bad["id"], ".state") == "FAILED", 30, "the failed job", browser)
        error = _cell(browser, bad["id"], ".error")
        assert error.startswith("user error: FnError on input 4: ") and "input 4 is bad" in error
        # submitted once the browser is up (its start-up can take seconds on a loaded machine)
        with srv.client() as c:
            job = srv.submit(
                c,
                pipeline="square",
                inputs=list(range(n)),
                output_dir=str(out),
                config={"sleep": 0.15, "holds": {4: str(gates[0]), 20: str(gates[1])}},
                options={"chunk_size": 2, "num_workers": 1},
            )
        _wait(lambda: _cell(browser, job["id"], ".state") == "RUNNING", 30, "RUNNING", browser)
        # the progress bar and text move while it runs
        first = _cell(browser, job["id"], ".progress-text")
        gates[0].write_text("")
        _wait(
            lambda: (
                _cell(browser, job["id"], ".progress-text") != first
                and int(_cell(browser, job["id"], ".progress-text").split(" / ")[0]) >= 8
            ),
            20,
            "progress",
            browser,
        )
        width = browser.find_element(By.CSS_SELECTOR, f"#job-{job['id']} .bar > div").get_attribute("style")
        assert "width" in width and "width: 0%" not in width

        _click(browser, job["id"], "cancel")  # the held worker is stopped after the engine's stop grace
        _wait(lambda: _cell(browser, job["id"], ".state") == "CANCELED", 30, "CANCELED", browser)
        assert _cell(browser, job["id"], ".attempts") == "1"
        with srv.client() as c:
            assert srv.job(c, job["id"])["state"] == "CANCELED"
        gates[1].write_text("")  # for the retry
        _click(browser, job["id"], "retry")
        _wait(lambda: _cell(browser, job["id"], ".state") == "SUCCEEDED", 60, "SUCCEEDED", browser)
        assert _cell(browser, job["id"], ".progress-text") == f"{n} / {n} inputs, {n} items"
        assert _cell(browser, job["id"], ".attempts") == "2"
        assert not browser.find_elements(By.CSS_SELECTOR, f"#job-{job['id']} button")
        # the token lives in sessionStorage only, never in the address or a cookie
        assert browser.execute_script("return sessionStorage.getItem('shardwright-token')") == TOKEN
        assert TOKEN not in browser.current_url and not browser.get_cookies()
        assert_exactly_once(out, n)
    finally:
        srv.stop()


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_dashboard_dump_dom_with_the_token_in_the_fragment(tmp_path):
    """The plain `chromium --headless --dump-dom` route: /#token=... signs in (the fragment never
    reaches the server) and the jobs table is rendered by the page's script."""
    _need_browser()
    import subprocess

    srv = Server(tmp_path).start()
    try:
        with srv.client() as c:
            job = srv.submit(c, pipeline="echo", inputs=[1, 2, 3], output_dir=str(tmp_path / "out"))
            srv.wait_state(c, job["id"], "SUCCEEDED")
        r = subprocess.run(
            [
                CHROMIUM,
                "--headless",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-quic",
                "--no-first-run",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                f"--user-data-dir={tmp_path / 'profile'}",
                "--virtual-time-budget=5000",
                "--dump-dom",
                f"{srv.url}/#token={TOKEN}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert f'id="job-{job["id"]}"' in r.stdout, r.stdout[-2000:] + r.stderr[-2000:]
        assert "3 / 3 inputs, 3 items" in r.stdout and "SUCCEEDED" in r.stdout
        assert TOKEN not in srv.log.read_text()
    finally:
        srv.stop()


def _text(driver, element_id: str) -> str:
    from selenium.webdriver.common.by import By

    return driver.find_element(By.ID, element_id).text


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_dashboard_submit_form_job_page_and_state_filter(tmp_path, browser):
    """An operator's day: submit from the form generated from the pipeline's JSON Schema (a
    mistake is caught in the page, before anything is sent), follow the job on its page (speed,
    ETA, attempts, log, output), and filter the list by state. Credentials typed into the form
    are sent once and kept nowhere in the browser."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    secret = "FORMSECRET-0123456789"
    srv = Server(tmp_path).start()
    n, out = 40, tmp_path / "from-form"
    try:
        with srv.client() as c:
            failed = srv.submit(
                c, pipeline="square", inputs=[1, 2], output_dir=str(tmp_path / "bad"), config={"fail_on": 2}
            )
            srv.wait_state(c, failed["id"], "FAILED")
        browser.get(f"{srv.url}/#token={TOKEN}")
        _wait(lambda: _cell(browser, failed["id"], ".state") == "FAILED", 30, "the job list", browser)

        browser.find_element(By.ID, "new-job").click()
        _wait(lambda: browser.find_elements(By.NAME, "options.chunk_size"), 20, "the options' fields", browser)
        assert not browser.find_elements(By.NAME, "config.factor")  # echo (the first) takes no config
        Select(browser.find_element(By.ID, "form-pipeline")).select_by_value("square")
        _wait(lambda: browser.find_elements(By.NAME, "config.factor"), 10, "square's config fields", browser)
        # generated from the schemas: the pipeline's config and the engine's options
        factor = browser.find_element(By.NAME, "config.factor")
        assert factor.get_attribute("type") == "number"
        assert {"options.chunk_size", "options.num_workers", "options.compression", "options.mode"} <= {
            e.get_attribute("name") for e in browser.find_elements(By.CSS_SELECTOR, "#form-options [data-field]")
        }
        browser.find_element(By.ID, "form-output-dir").send_keys(str(out))
        browser.find_element(By.ID, "form-inputs").send_keys(json_list(n))
        factor.send_keys("0")  # below the schema's minimum: refused in the page
        browser.find_element(By.ID, "form-submit").click()
        _wait(lambda: "config.factor: must be at least 1" in _text(browser, "form-errors"), 10, "the refusal", browser)
        with srv.client() as c:
            assert len(c.get("/jobs").json()["jobs"]) == 1  # nothing was sent
        factor.clear()
        factor.send_keys("2")
        browser.find_element(By.NAME, "config.sleep").send_keys("0.15")
        browser.find_element(By.NAME, "options.chunk_size").send_keys("2")
        browser.find_element(By.NAME, "options.num_workers").send_keys("1")
        browser.find_element(By.ID, "form-storage-options").send_keys(json.dumps({"aws_secret_access_key": secret}))
        browser.find_element(By.ID, "form-submit").click()

        # the job's page: speed and ETA while it runs, then its attempt, log and output
        _wait(lambda: _text(browser, "job-state") == "RUNNING", 30, "the job page", browser)
        job_id = _text(browser, "job-id")
        assert browser.find_element(By.ID, "form-storage-options").get_attribute("value") == ""
        _wait(
            lambda: _text(browser, "job-speed").endswith("items/s") and _text(browser, "job-eta"),
            30,
            "speed and ETA",
            browser,
        )
        _wait(lambda: _text(browser, "job-state") == "SUCCEEDED", 90, "SUCCEEDED", browser)
        assert _text(browser, "job-output") == str(out)
        assert _text(browser, "job-progress") == f"{n} / {n} inputs, {n} items"
        rows = browser.find_elements(By.CSS_SELECTOR, "#job-attempts tr.attempt")
        assert len(rows) == 1 and rows[0].find_element(By.CSS_SELECTOR, ".outcome").text == "succeeded"
        _wait(lambda: "dataset published" in _text(browser, "job-log"), 10, "the log", browser)
        # the output's own history: the one optimize() call, complete, all inputs done
        _wait(
            lambda: (
                [
                    r.find_element(By.CSS_SELECTOR, ".ended").text
                    for r in browser.find_elements(By.CSS_SELECTOR, "#job-history tr.run")
                ]
                == ["published"]
            ),
            15,
            "the output's history",
            browser,
        )
        assert f"0 -> {n} of {n}" in browser.find_element(By.CSS_SELECTOR, "#job-history tr.run").text
        with srv.client() as c:
            job = srv.job(c, job_id)
        assert job["config"]["factor"] == 2 and job["options"]["chunk_size"] == 2
        assert job["storage_options"] == {"aws_secret_access_key": "***"}
        storage = browser.execute_script("return JSON.stringify(sessionStorage) + JSON.stringify(localStorage)")
        assert secret not in storage and secret not in browser.page_source and not browser.get_cookies()
        assert_exactly_once(out, n, factor=2)

        # a failed job's page names its error on the attempt; the list filtered by state
        browser.find_element(By.ID, "show-jobs").click()
        Select(browser.find_element(By.ID, "state-filter")).select_by_value("FAILED")
        _wait(
            lambda: (
                [r.get_attribute("id") for r in browser.find_elements(By.CSS_SELECTOR, "#jobs tr")]
                == [f"job-{failed['id']}"]
            ),
            10,
            "only the failed job",
            browser,
        )
        browser.find_element(By.CSS_SELECTOR, f"#job-{failed['id']} a.job-link").click()
        _wait(lambda: "FnError on input 1: " in _text(browser, "job-error"), 10, "the failed job's page", browser)
        assert "FnError" in browser.find_element(By.CSS_SELECTOR, "#job-attempts tr.attempt .error").text
    finally:
        srv.stop()


def json_list(n: int) -> str:
    return "[" + ", ".join(str(i) for i in range(n)) + "]"
