"""The page in a real browser: Debian's headless Chromium driven by selenium.

No browser is downloaded: the test uses /usr/bin/chromium and /usr/bin/chromedriver
(``apt-get install chromium chromium-driver``; ``.ci/run`` installs them when missing) and
skips, saying why, only when they cannot be had. ``CLUSTERSIM_SCREENSHOT=PATH`` also saves
the page as PNG (docs/img/serve.png is made that way).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

pytest.importorskip("starlette", reason="clustersim serve needs the web extra")
webdriver = pytest.importorskip("selenium.webdriver", reason="the [test] extra has selenium")

from selenium.webdriver.chrome.options import Options  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from test_web_server import ROOT, cli, start_server  # noqa: E402  (tests/ is on sys.path)

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"
if not (Path(CHROMIUM).exists() and Path(DRIVER).exists()):
    pytest.skip("no headless browser: apt-get install chromium chromium-driver (.ci/run does)",
                allow_module_level=True)


@pytest.fixture(scope="module")
def browser():
    proc, url = start_server()
    opts = Options()
    opts.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1440,1020", "--no-first-run", "--disable-extensions"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    try:
        driver = webdriver.Chrome(options=opts, service=Service(DRIVER))
    except Exception as exc:  # a browser that cannot start here: say so, do not fail
        proc.terminate()
        pytest.skip(f"chromium does not start: {str(exc).splitlines()[0]}")
    driver.set_page_load_timeout(60)
    yield driver, url
    driver.quit()
    proc.terminate()
    proc.wait(10)


def open_page(driver, url: str) -> float:
    """A fresh load of ``url`` (not a same-page fragment change); its first step time."""
    driver.get("about:blank")
    driver.get(url)
    return settle(driver)


def step_seconds(driver) -> float | None:
    value = driver.find_element(By.ID, "step-time").get_attribute("data-seconds")
    return float(value) if value else None


def settle(driver, previous: float | None = None, timeout: float = 60) -> float:
    """The step time once the page shows a new one (not ``previous``) and is idle."""
    def ready(d):
        s = step_seconds(d)
        idle = d.find_element(By.ID, "status").text == "ready"
        return s if idle and s is not None and s != previous else False
    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(ready)


def test_editing_a_field_matches_clustersim_run(browser):
    driver, url = browser
    first = open_page(driver, url + "/#w=llama3-70b&t=dgx-h100")
    field = driver.find_element(By.ID, "f-gbs")
    assert field.get_attribute("value") == "128"  # the workload's own value
    field.clear()
    field.send_keys("64")
    shown = settle(driver, first)
    out = cli("run", "llama3-70b", "-t", "dgx-h100", "--set", "training.global_batch_size=64",
              "--format", "json")
    expected = json.loads(out.stdout)["step_time_s"]
    assert shown == expected
    text = driver.find_element(By.ID, "step-time").text  # what a person reads
    assert text == f"{expected:.3f} s"
    assert "global_batch_size" in driver.current_url  # the link carries the edit
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
    shot = os.environ.get("CLUSTERSIM_SCREENSHOT")
    if shot:
        driver.save_screenshot(shot)


def test_invalid_field_shows_the_cli_message_beside_it(browser):
    driver, url = browser
    open_page(driver, url + "/#w=llama3-70b&t=dgx-h100")
    tp = driver.find_element(By.ID, "f-tp")
    tp.clear()
    tp.send_keys("3")
    slot = tp.find_element(By.XPATH, "following-sibling::div[@class='err']")
    WebDriverWait(driver, 60, poll_frequency=0.1).until(lambda d: slot.text)
    out = cli("run", "llama3-70b", "-t", "dgx-h100", "--set", "parallelism.tensor=3")
    assert slot.text == out.stderr.strip().removeprefix("clustersim: error: ")
    assert "invalid" in tp.get_attribute("class")
    tp.clear()
    tp.send_keys("8")
    WebDriverWait(driver, 60, poll_frequency=0.1).until(lambda d: not slot.text)


def test_a_link_reproduces_the_configuration_and_pins_compare(browser):
    driver, url = browser
    ov = json.dumps({"parallelism.tensor": 4, "training.micro_batch_size": 2})
    shown = open_page(driver, f"{url}/#w=llama3-70b&t=dgx-h100&o={ov}")
    out = cli("run", "llama3-70b", "-t", "dgx-h100", "--set", "parallelism.tensor=4",
              "--set", "training.micro_batch_size=2", "--format", "json")
    assert shown == json.loads(out.stdout)["step_time_s"]
    assert driver.find_element(By.ID, "f-tp").get_attribute("value") == "4"
    driver.find_element(By.ID, "pin").click()
    driver.find_element(By.CSS_SELECTOR, "[data-tab=compare]").click()
    assert driver.find_element(By.ID, "pin-count").text == "1"
    driver.find_element(By.XPATH, "//button[text()='command']").click()
    command = driver.find_element(By.ID, "export-text").get_attribute("value")
    assert command.strip() == ("clustersim run llama3-70b -t dgx-h100 --set parallelism.tensor=4"
                               " --set training.micro_batch_size=2 --format json")


def test_an_uploaded_yaml_is_simulated_as_the_cli_reads_the_file(browser, tmp_path):
    driver, url = browser
    doc = tmp_path / "mine.yaml"
    text = (ROOT / "workloads" / "tiny.yaml").read_text()
    doc.write_text(text.replace("global_batch_size: 8", "global_batch_size: 16"))
    assert doc.read_text() != text
    first = open_page(driver, url + "/#w=llama3-70b&t=dgx-h100")
    driver.find_element(By.ID, "upload-workload").send_keys(str(doc))
    shown = settle(driver, first)
    out = cli("run", str(doc), "-t", "dgx-h100", "--format", "json")
    assert shown == json.loads(out.stdout)["step_time_s"]
    assert "mine.yaml" in driver.find_element(By.ID, "workload").text
    assert driver.find_element(By.ID, "f-gbs").get_attribute("value") == "16"


def test_search_from_the_page_sorts_and_loads_a_row(browser):
    driver, url = browser
    open_page(driver, url + "/#w=tiny&t=dgx-h100")
    driver.find_element(By.CSS_SELECTOR, "[data-tab=search]").click()
    for box, value in (("s-gpus", "8"), ("s-top", "5"), ("s-max", "20")):
        field = driver.find_element(By.ID, box)
        field.clear()
        field.send_keys(value)
    driver.find_element(By.ID, "s-start").click()
    wait = WebDriverWait(driver, 120, poll_frequency=0.2)
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#s-table tr td"))
    assert driver.find_element(By.ID, "s-bar").get_attribute("style") == "width: 100%;"
    header = driver.find_element(By.XPATH, "//div[@id='s-table']//th[text()='rank']")
    header.click()
    header = driver.find_element(By.XPATH, "//div[@id='s-table']//th[text()='rank']")
    header.click()  # descending: the last-ranked plan first
    ranks = [int(td.text) for td in driver.find_elements(
        By.CSS_SELECTOR, "#s-table tr td:first-child")]
    assert ranks == sorted(ranks, reverse=True) and len(ranks) > 1
    plan = driver.find_element(By.CSS_SELECTOR, "#s-table tr:nth-child(2) td:nth-child(2)").text
    driver.find_element(By.CSS_SELECTOR, "#s-table tr:nth-child(2) button").click()
    wait.until(lambda d: "parallelism.tensor" in d.current_url
               and d.find_element(By.ID, "status").text == "ready")
    tp = driver.find_element(By.ID, "f-tp").get_attribute("value")
    assert f"TP{tp} " in f"{plan} " or (tp == "1" and "TP" not in plan)
    assert driver.find_element(By.ID, "tab-editor").is_displayed()


def test_an_fsdp_step_shows_what_its_dp_time_is_made_of(browser):
    from urllib.parse import urlencode

    driver, url = browser
    driver.get_log("browser")  # drain what earlier tests left (an invalid field's 400)
    over = {"training.use_megatron_fsdp": True, "training.stack": "torchtitan",
            "training.data_parallel_sharding_strategy": "optim_grads_params"}
    open_page(driver, url + "/#" + urlencode({"w": "llama3-8b", "t": "dgx-h100",
                                               "o": json.dumps(over)}))
    text = driver.find_element(By.ID, "fsdp-split").text
    assert text.startswith("FSDP, of the exposed DP time:")
    for label in ("collectives exposed", "copy kernels", "overlap slowdown"):
        assert label in text
    errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    assert not errors, errors
