"""rdzvd's HTTP status page in a real browser: Debian's headless Chromium
loads http://127.0.0.1:PORT/ while a job runs, the page's script fetches
/api/ and renders jobs, members and events; the test reads the rendered
DOM and checks a screenshot (not blank, the running job's green state
text drawn)."""
import os
import re
import shutil
import subprocess

import rdzvtest as rt
from rendezvous import Agent

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def chromium(args, timeout=60):
    tmp = rt.mktemp("chromium-")
    argv = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-dev-shm-usage", "--no-first-run",
            "--user-data-dir=" + os.path.join(tmp, "profile"),
            "--virtual-time-budget=4000"] + args
    p = subprocess.run(argv, capture_output=True, timeout=timeout,
                       start_new_session=True, cwd=tmp)
    return p


def job(d):
    # Leases outlast the browser: the job must stay running meanwhile.
    a = Agent(d, "mnist-demo", lws=2, lease_ms=60000)
    b = Agent(d, "mnist-demo", lws=2, lease_ms=60000)
    a.join(), b.join()
    p = a.push()
    b.push()
    a.failure(p["round"], "worker exited with code 3", code=3, rank=1)
    for x in (a, b):
        x.push(), x.push()
    return a, b


def test_page_renders_the_job():
    if CHROMIUM is None:
        rt.skip("chromium is not installed (scripts/deps.sh installs it)")
    d = rt.Rdzvd()
    agents = job(d)
    url = "http://127.0.0.1:%d/" % d.http_port
    p = chromium(["--dump-dom", url])
    dom = p.stdout.decode(errors="replace")
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-2000:]
    # Rendered by the page's script from /api/, not in the static HTML.
    assert "mnist-demo" in dom, dom[-3000:]
    assert '<span class="running">running</span>' in dom, dom[-3000:]
    assert "1 / 3" in dom, dom[-3000:]      # restarts of max restarts
    assert "mnist-demo: members" in dom, dom[-3000:]
    # Rendered cells (the script's own text has the phrase once too).
    assert len(re.findall(r"<td>\d+ ms of lease left</td>", dom)) == 2, \
        dom[-3000:]
    # No worker reported progress: a dash per member (tests/integ/
    # progress_view.py renders reports).
    assert "<th>progress</th>" in dom, dom[-3000:]
    assert dom.count("<td>\u2014</td>") == 2, dom[-3000:]
    assert "worker exited with code 3" in dom, dom[-3000:]
    assert '<div id="err"></div>' in dom, dom[-3000:]   # no fetch failed
    assert agents[0].node_id is not None


def test_screenshot():
    if CHROMIUM is None:
        rt.skip("chromium is not installed (scripts/deps.sh installs it)")
    from PIL import Image
    d = rt.Rdzvd()
    agents = job(d)                     # connected while the page loads
    shot = os.path.join(rt.mktemp("shot-"), "status.png")
    p = chromium(["--screenshot=" + shot, "--window-size=1100,800",
                  "--hide-scrollbars",
                  "http://127.0.0.1:%d/" % d.http_port])
    assert p.returncode == 0 and os.path.exists(shot), \
        p.stderr.decode(errors="replace")[-2000:]
    keep = os.environ.get("RDZV_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)
    img = Image.open(shot).convert("RGB")
    assert img.size == (1100, 800), img.size
    colors = img.getcolors(maxcolors=1 << 20)
    assert colors is not None and len(colors) > 50, "blank screenshot"
    # The running state is drawn in #007700: the script rendered the job.
    greenish = sum(n for n, (r, g, b) in colors
                   if g > 80 and r < 60 and b < 60)
    assert greenish > 20, "no running-state text in the screenshot"
    dark = sum(n for n, (r, g, b) in colors if r + g + b < 200)
    assert dark > 2000, "hardly any text drawn"
    assert agents[0].node_id is not None
    print("# screenshot %dx%d, %d colors, %d text pixels, %d green" %
          (img.size[0], img.size[1], len(colors), dark, greenish))


if __name__ == "__main__":
    rt.main(globals())
