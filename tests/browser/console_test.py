#!/usr/bin/env python3
"""The operator console in a real browser.

Starts the real gateway and the mock upstream on free ports, drives traffic at a slow interface,
opens the console in headless Chromium (Debian's chromium and chromium-driver, through
python3-selenium) and checks what an operator would:
  - the busy interface shows requests held and its refusals rising, and stands out as saturated;
  - a switch change with a wrong token is refused with a visible message, and nothing changes;
  - a switch change with the right token (confirmed on the page) takes effect in the gateway,
    as the API says, and the page shows the pending revert;
  - the search box lists the matching buckets alone, asked of the server;
  - the page loads with its security headers and no script or style errors (a CSP violation is one).
Saves a screenshot (--screenshot). Exits 77 (ctest: skipped) when no browser is installed, unless
TOLLGATE_REQUIRE_BROWSER=1 (scripts/test.sh sets it), when that is a failure.
"""
import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

SKIP = 77


def fail(msg):
    print("console_test: FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def skip_or_fail(msg):
    if os.environ.get("TOLLGATE_REQUIRE_BROWSER") == "1":
        fail(msg + " (TOLLGATE_REQUIRE_BROWSER=1)")
    print("console_test: SKIPPED: " + msg)
    sys.exit(SKIP)


try:
    from selenium import webdriver
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select
except ImportError:
    skip_or_fail("python3-selenium is not installed (scripts/deps.sh test installs it)")


class Process:
    """A child whose stdout is read line by line on a thread; lines are kept for waits and logs."""

    def __init__(self, argv, env=None):
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        self.lines = []
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.cv:
                self.lines.append(line.rstrip("\n"))
                self.cv.notify_all()

    def wait_for(self, pattern, timeout=30):
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                for line in self.lines:
                    m = rx.search(line)
                    if m:
                        return m
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    fail(f"no line matching {pattern!r}; output:\n" + "\n".join(self.lines[-40:]))
                self.cv.wait(min(left, 0.2))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def http(method, url, body=None, headers=None):
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as res:
            return res.status, dict(res.headers), res.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def wait_until(what, predicate, timeout=30, interval=0.25):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    fail(f"timed out waiting for {what} (last: {last!r})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gateway", required=True)
    ap.add_argument("--mock", required=True)
    ap.add_argument("--screenshot", required=True)
    args = ap.parse_args()

    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    driver_bin = shutil.which("chromedriver") or "/usr/bin/chromedriver"
    if not (os.path.exists(chromium) and os.path.exists(driver_bin)):
        skip_or_fail("chromium and chromium-driver are not installed (scripts/deps.sh test installs them)")

    work = tempfile.mkdtemp(prefix="tollgate-browser-")
    procs = []
    stop_traffic = threading.Event()
    driver = None
    try:
        # /supplier throttles its callers itself at 3/s: its adaptive rule follows.
        mock = Process([args.mock, "--host", "127.0.0.1", "--port", "0", "--latency-ms", "5", "--limit", "/supplier=3"])
        procs.append(mock)
        mock_port = int(mock.wait_for(r"listening on [^:]+:(\d+)").group(1))

        token = secrets.token_hex(16)
        config = {
            "listen": "127.0.0.1:0",
            "threads": 2,
            "access_log": "off",
            "admin": {"listen": "127.0.0.1:0", "token_env": "TOLLGATE_TEST_CONSOLE_TOKEN"},
            "upstreams": {"api": {"url": f"http://127.0.0.1:{mock_port}"}},
            "routes": [{"prefix": "/", "upstream": "api"}],
            "limits": {
                "source": "file", "store": "local", "switch": True,
                "rules": [
                    # 2/s with a 1 s wait window: six callers keep it held and refusing.
                    # Its callers are the default class of two (GET is not POST): 30% is kept back.
                    {"configId": 1, "channelType": "DEMO", "interfaceNo": "B1", "interfaceUrl": "/busy",
                     "rateLimit": 2, "cache": 1.0, "status": 1,
                     "priority": {"by": "method", "classes": ["POST", "GET"], "default": "GET", "reserve": {"POST": 0.3}}},
                    # A meter: 2 green a second, then yellow from the excess bucket, then red.
                    {"configId": 4, "channelType": "DEMO", "interfaceNo": "M1", "interfaceUrl": "/metered",
                     "status": 1, "algorithm": "srtcm", "cir": 2, "cbs": 2, "ebs": 3},
                    {"configId": 2, "channelType": "DEMO", "interfaceNo": "C1", "interfaceUrl": "/calm",
                     "rateLimit": 100, "cache": 0.5, "status": 1},
                    {"configId": 3, "channelType": "DEMO", "interfaceNo": "S1", "interfaceUrl": "/supplier",
                     "rateLimit": 20, "cache": 0.5, "status": 1, "adaptive": "on"},
                ],
            },
        }
        conf_path = os.path.join(work, "gateway.json")
        with open(conf_path, "w") as f:
            json.dump(config, f)
        env = dict(os.environ, TOLLGATE_TEST_CONSOLE_TOKEN=token)
        gw = Process([args.gateway, "--config", conf_path], env=env)
        procs.append(gw)
        proxy_port = int(gw.wait_for(r"proxy listening on [^:]+:(\d+)").group(1))
        admin_port = int(gw.wait_for(r"admin listening on [^:]+:(\d+)").group(1))
        console_url = gw.wait_for(r"console at (http://\S+)").group(1)
        gw.wait_for(r"tollgate: ready")
        admin = f"http://127.0.0.1:{admin_port}"
        if console_url != admin + "/":
            fail(f"the printed console address {console_url} is not the admin listener {admin}/")

        # The security headers, on the page, its script and the JSON it reads.
        for path in ("/", "/ui/console.js", "/admin/overview"):
            status, headers, body = http("GET", admin + path)
            if status != 200 or (path == "/" and b"/ui/console.js" not in body):
                fail(f"GET {path} answered {status}")
            csp = headers.get("Content-Security-Policy", "")
            for directive in ("default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"):
                if directive not in csp:
                    fail(f"{path}: Content-Security-Policy lacks {directive!r}: {csp!r}")
            if headers.get("X-Frame-Options") != "DENY":
                fail(f"{path}: X-Frame-Options is {headers.get('X-Frame-Options')!r}")

        # Traffic: six callers on /busy (about 300 requests a second), one on /calm now and then.
        def caller(path, pause):
            while not stop_traffic.is_set():
                try:
                    http("GET", f"http://127.0.0.1:{proxy_port}/api{path}")
                except Exception:
                    pass
                if pause:
                    stop_traffic.wait(pause)
        threads = [threading.Thread(target=caller, args=("/busy", 0.02), daemon=True) for _ in range(6)]
        threads.append(threading.Thread(target=caller, args=("/calm", 0.2), daemon=True))
        threads += [threading.Thread(target=caller, args=("/supplier", 0.1), daemon=True) for _ in range(2)]
        threads.append(threading.Thread(target=caller, args=("/metered", 0.1), daemon=True))
        for t in threads:
            t.start()

        opts = Options()
        opts.binary_location = chromium
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--window-size=1400,1200", f"--user-data-dir={os.path.join(work, 'chromium')}",
                  "--no-first-run", "--disable-extensions"):
            opts.add_argument(a)
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        try:
            driver = webdriver.Chrome(service=Service(driver_bin), options=opts)
        except WebDriverException as e:
            fail(f"Chromium did not start: {e.msg}")
        driver.set_page_load_timeout(30)
        driver.get(console_url)

        def cell(bucket, col):
            # One script call: the table is redrawn every second, so an element found in one call
            # may be gone by the next.
            text = driver.execute_script(
                "const c = document.querySelector(`tr[data-bucket='${arguments[0]}'] td[data-col='${arguments[1]}']`);"
                "return c ? c.textContent : null;", bucket, col)
            try:
                return float(text.strip()) if text is not None else None
            except ValueError:
                return None

        def row_class(bucket):
            return driver.execute_script(
                "const r = document.querySelector(`tr[data-bucket='${arguments[0]}']`); return r ? r.className : null;", bucket)

        def refusals_total():
            m = re.match(r"(\d+) since start", driver.execute_script("return document.getElementById('refusals-total').textContent;"))
            return int(m.group(1)) if m else 0

        def text_of(element_id):
            return driver.execute_script("const e = document.getElementById(arguments[0]); return e ? e.textContent : '';", element_id)

        # Held and refused on the busy interface, the refusals rising from one look to the next.
        max_held = wait_until("held requests on /busy", lambda: (cell("/busy", "held") or 0) > 0 and cell("/busy", "held"))
        minute = wait_until("refusals in the last minute on /busy", lambda: (cell("/busy", "rejected_minute") or 0) > 0
                            and cell("/busy", "rejected_minute"))
        first = wait_until("refusals counted", lambda: refusals_total())
        later = wait_until("more refusals", lambda: refusals_total() > first and refusals_total())
        wait_until("/busy marked saturated", lambda: "saturated" in (row_class("/busy") or ""))
        calm = row_class("/calm")
        if calm is None or "saturated" in calm:
            fail(f"/calm is missing or marked saturated (class {calm!r})")
        wait_until("a refusal listed", lambda: "/api/busy" in text_of("refusals"))
        # The chart draws the refusals: the red line of /busy has points above its baseline.
        wait_until("the /busy chart", lambda: driver.execute_script(
            "const p = document.querySelector(`tr[data-bucket='/busy'] svg polyline.rej`);"
            "return p && p.getAttribute('points').split(' ').some(xy => parseFloat(xy.split(',')[1]) < 26.5);"))
        # The adaptive rule: its rate column shows the rate it decides at, below its rule's, and says why.
        def rate_cell(bucket):
            return driver.execute_script(
                "const c = document.querySelector(`tr[data-bucket='${arguments[0]}'] td[data-col='rate']`);"
                "return c ? [c.textContent, c.title] : ['', ''];", bucket)
        adapted = wait_until("the adapted rate shown on /supplier", lambda: "→" in rate_cell("/supplier")[0] and rate_cell("/supplier"))
        if "adaptive on" not in adapted[1] or "429" not in adapted[1]:
            fail(f"/supplier's rate cell does not say why: {adapted!r}")
        if "→" in rate_cell("/calm")[0]:
            fail("/calm (not adaptive) shows an adapted rate")
        # What shares a bucket: /busy's classes (highest first, its callers refused as the default class)
        # and /metered's meter with its colours so far.
        def note(bucket, attr):
            return driver.execute_script(
                "const s = document.querySelector(`tr[data-bucket='${arguments[0]}'] span[${arguments[1]}]`);"
                "return s ? [s.textContent, s.title] : ['', ''];", bucket, attr)
        classes = wait_until("/busy's classes", lambda: "refused" in note("/busy", "data-priority")[1]
                             and not note("/busy", "data-priority")[1].endswith(" 0 refused") and note("/busy", "data-priority"))
        if classes[0].strip() != "classes POST › GET" or "POST (reserves 30%)" not in classes[1]:
            fail(f"/busy's classes are not shown as configured: {classes!r}")
        metered = wait_until("/metered's colours", lambda: " 0 yellow" not in note("/metered", "data-meter")[1]
                             and "yellow" in note("/metered", "data-meter")[1] and note("/metered", "data-meter"))
        if metered[0].strip() != "srtcm" or "green" not in metered[1]:
            fail(f"/metered's meter is not shown: {metered!r}")
        print(f"console_test: /busy {classes[1]}; /metered {metered[1]}")
        # The Upstreams panel lists the upstream's endpoint, in use, with the requests on it.
        endpoint = f"127.0.0.1:{mock_port}"
        shown = wait_until("the upstream's endpoint listed", lambda: driver.execute_script(
            "const c = document.querySelector(`tr[data-upstream='api'] td.endpoints`); return c ? c.textContent : '';")
            .startswith(endpoint) and driver.execute_script(
            "return document.querySelector(`tr[data-upstream='api'] td.endpoints`).textContent;"))
        if "ejected" in shown:
            fail(f"the endpoint shows as ejected: {shown!r}")
        print(f"console_test: /supplier's rate column: {adapted[0]!r} ({adapted[1]})")
        print(f"console_test: /busy held {max_held:.0f}, refused {minute:.0f} in the last minute; "
              f"refusals since start {first} -> {later}")

        # The history endpoint the page follows: one sample a second, and only new ones after `since`.
        h = json.loads(http("GET", admin + "/admin/history")[2])
        busy = [b for b in h["buckets"] if b["bucket"] == "/busy"]
        if not busy or sum(v or 0 for v in busy[0]["rejected"]) <= 0:
            fail(f"/admin/history shows no refusals on /busy: {busy}")
        seq = h["seq"]
        wait_until("a new history sample", lambda: json.loads(http("GET", admin + "/admin/history")[2])["seq"] > seq, 10)
        newer = json.loads(http("GET", f"{admin}/admin/history?since={seq - 1}")[2])
        if newer["from_seq"] != seq or len(newer["at_ms"]) != newer["seq"] - seq or not newer["at_ms"]:
            fail(f"?since={seq - 1} did not give exactly the samples after it: {newer['from_seq']}..{newer['seq']}")

        # The search box: the table then shows the matching buckets alone (asked of the server, not
        # filtered from the rows already shown), says how many matched, and charts them; the page
        # asks for the history of the buckets it shows and of no others.
        search = driver.find_element(By.ID, "bucket-search")
        search.send_keys("CALM")

        def shown_buckets():
            return driver.execute_script(
                "return [...document.querySelectorAll('#buckets tbody tr')].map(r => r.dataset.bucket);")
        wait_until("only /calm listed", lambda: shown_buckets() == ["/calm"])
        wait_until("the match count", lambda: '1 of 1 matching "CALM"' in text_of("buckets-shown") and text_of("buckets-shown"))
        wait_until("the /calm chart", lambda: driver.execute_script(
            "return !!document.querySelector(`tr[data-bucket='/calm'] svg polyline.fwd`);"))
        asked = driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name);")
        if not any("/admin/overview?top=50&q=CALM" in u for u in asked):
            fail("the search was not asked of the server: " + ", ".join(u for u in asked if "/admin/overview" in u))
        unbounded = [u for u in asked if "/admin/history" in u and "bucket=" not in u]
        if unbounded:
            fail("the page asked for the history of every bucket: " + ", ".join(unbounded))
        search.clear()
        search.send_keys(" ")  # an input event; blank is no search
        wait_until("every bucket listed again", lambda: sorted(shown_buckets()) == ["/busy", "/calm", "/metered", "/supplier"])
        if "4 of 4 shown" not in text_of("buckets-shown"):
            fail(f"the shown count without a search: {text_of('buckets-shown')!r}")

        def api_switch():
            return json.loads(http("GET", admin + "/admin/switch")[2])

        def change_switch(with_token, mode, revert_after=""):
            field = driver.find_element(By.ID, "token")
            field.clear()
            field.send_keys(with_token)
            Select(driver.find_element(By.ID, "switch-mode")).select_by_value(mode)
            after = driver.find_element(By.ID, "switch-revert-after")
            after.clear()
            if revert_after:
                after.send_keys(revert_after)
            driver.find_element(By.ID, "switch-apply").click()
            wait_until("the confirmation", lambda: driver.find_element(By.ID, "switch-confirm").is_displayed())
            driver.find_element(By.ID, "switch-confirm-yes").click()

        # A wrong token: refused, said on the page, nothing changed.
        change_switch("not-" + token, "off")
        msg = wait_until("the refusal message", lambda: "Refused" in text_of("switch-message") and text_of("switch-message"))
        if "401" not in msg:
            fail(f"the refusal message does not say 401: {msg!r}")
        if api_switch()["state"] != "enforce":
            fail("a wrong token changed the switch")

        # The right token: shadow, reverting after ten minutes; the gateway follows.
        change_switch(token, "shadow", "600")
        wait_until("the gateway in shadow mode", lambda: api_switch()["state"] == "shadow")
        sw = api_switch()
        if sw.get("revert_to") != "enforce" or not sw.get("revert_at_ms"):
            fail(f"the revert was not scheduled: {sw}")
        wait_until("the page showing shadow", lambda: text_of("switch-state") == "shadow")
        wait_until("the countdown", lambda: re.search(r"reverts to enforce in \d+ s", text_of("switch-revert")))
        wait_until("the confirmation message", lambda: 'now "shadow"' in text_of("switch-message"))

        # The token never left the page but in the Authorization header: not in the URL, no cookie.
        if token in driver.current_url or driver.get_cookies():
            fail("the token is in the URL or a cookie was set")
        errors = [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
        # The wrong-token PUT is the one expected failure in the network log (Chromium: ".../admin/switch
        # - Failed to load resource: the server responded with a status of 401"); nothing else may fail,
        # not even another refusal of the switch.
        def expected_401(e):
            m = e.get("message", "")
            return "/admin/switch" in m and "status of 401" in m
        unexpected = [e for e in errors if not expected_401(e)]
        if unexpected:
            fail("browser errors: " + "; ".join(e["message"] for e in unexpected))
        if sum(1 for e in errors if expected_401(e)) > 1:
            fail("more than the one wrong-token 401: " + "; ".join(e["message"] for e in errors))

        # Back to enforce (through the API) for the screenshot, with the traffic still running.
        http("PUT", admin + "/admin/switch", json.dumps({"state": "enforce"}).encode(),
             {"Authorization": "Bearer " + token})
        time.sleep(3)
        os.makedirs(os.path.dirname(os.path.abspath(args.screenshot)), exist_ok=True)
        driver.save_screenshot(args.screenshot)
        print(f"console_test: passed; screenshot {args.screenshot}")
    finally:
        stop_traffic.set()
        if driver is not None:
            try:
                driver.quit()
            except Exception:
                pass
        for p in reversed(procs):
            p.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
