# SPDX-License-Identifier: Apache-2.0
"""rdzvd's HTTP status page in a real browser: Debian's headless Chromium
loads http://127.0.0.1:PORT/ while a job runs, the page's script fetches
/api/ and renders jobs, members and events; the test reads the rendered
DOM and checks a screenshot (not blank, the running job's green state
text drawn).

A job's life (rdzvd/history.c): two tests/integ/worker_check workers
under rdzv-agent report progress, one is killed, the job restarts and
recovers; /api/jobs/JOB/history holds the samples and the marks with
their recovery, the page's SVG chart puts each mark at the x of its
time, the screenshot is kept as build/tests/integ/status_page_job.png
(a CI artifact), /metrics parses with prometheus_client's parser, and
all of it is back after an rdzvd restart.  Also the page with no job
and with 50 jobs (whose rdzvd restarts under them: a mark each)."""
import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.request

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


HIST_MS = 250           # --history-interval-ms for the history tests


def api(d, path, missing=False):
    """The JSON at path; with missing, None for a 404 (no job yet)."""
    try:
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (
                d.http_port, path), timeout=10) as r:
            return json.load(r)
    except urllib.error.HTTPError as e:
        if missing and e.code == 404:
            return None
        raise


def poll(what, fn, timeout=40.0):
    end = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError("timed out waiting for " + what)
        time.sleep(0.05)


def worker_pids(tmp, prog):
    out = []
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[0] == prog.encode() and tmp.encode() in argv:
            out.append(int(pid))
    return out


def chart_marks(dom):
    """[(data-t, x1)] of the first chart's marks, and the chart's
    (t0, t1, left, width)."""
    m = re.search(r'<svg class="chart"[^>]*>', dom)
    assert m, dom[-3000:]
    tag = m.group(0)
    geo = [float(re.search(r'data-%s="([0-9.]+)"' % k, tag).group(1))
           for k in ("t0", "t1", "left", "width")]
    body = dom[m.end():dom.index("</svg>", m.end())]
    marks = [(int(a), float(b)) for a, b in re.findall(
        r'<line class="mark \w+" data-t="(\d+)" x1="([0-9.]+)"', body)]
    return marks, geo


def check_chart(dom, hist):
    marks, (t0, t1, left, width) = chart_marks(dom)
    want = sorted(k["time_ms"] for k in hist["marks"])
    assert sorted(t for t, _ in marks) == want, (marks, want)
    for t, x in marks:
        exp = left + (t - t0) / (t1 - t0) * width
        assert abs(x - exp) <= 0.6, (t, x, exp)
    # The marks are where the samples say training stopped: every mark
    # lies within the sampled time span drawn.
    ts = [s["time_ms"] for s in hist["samples"]]
    assert min(ts) <= min(want) and max(want) <= max(ts), (ts[:3], want)
    return marks


def check_metrics(d, job, failures, restarts):
    try:
        from prometheus_client.parser import text_string_to_metric_families
    except ImportError:
        rt.skip("python3-prometheus-client is not installed "
                "(scripts/deps.sh installs it)")
    got = {}
    for fam in text_string_to_metric_families(d.metrics_text()):
        for smp in fam.samples:
            if smp.labels.get("job") == job:
                got[smp.name] = smp.value
    assert got["rdzvd_job_failures_total"] == failures, got
    assert got["rdzvd_job_restarts_total"] == restarts, got
    assert got["rdzvd_job_repairs_total"] == 0, got
    assert got["rdzvd_job_world_size"] == 2, got
    assert got["rdzvd_job_last_progress_age_seconds"] >= 0, got
    assert got["rdzvd_job_steps_per_second"] >= 0, got
    return got


def test_job_life_chart():
    if CHROMIUM is None:
        rt.skip("chromium is not installed (scripts/deps.sh installs it)")
    from agent_lib import Scope
    from PIL import Image
    prog = os.path.join(rt.top_builddir(), "tests", "integ", "worker_check")
    d = rt.Rdzvd(["--history-interval-ms", str(HIST_MS)])
    job = "life-demo"
    with Scope("life-") as s:
        a = s.agent(["--nnodes", "1", "--nproc_per_node", "2", "--no_python",
                     "--rdzv_backend", "c10d", "--rdzv_endpoint",
                     "127.0.0.1:%d" % d.port, "--rdzv_id", job,
                     "--max_restarts", "1", "--grace", "1"],
                    program=[prog, "progress", "120", s.tmp])
        # Training (reports reach the store at most once a second).
        poll("progress", lambda: any(x["step"] >= 40 for x in (api(
            d, "/api/jobs/%s/history" % job, True) or
            {"samples": []})["samples"]))
        pids = poll("workers", lambda: worker_pids(s.tmp, prog))
        os.kill(pids[0], signal.SIGKILL)
        # The restart, then progress again: the marks get their recovery.
        hist = poll("recovery", lambda: (lambda h: h if h["marks"] and all(
            k["recovery_ms"] is not None for k in h["marks"]) else None)(
            api(d, "/api/jobs/%s/history" % job)))
        assert a.wait(60) == 0, a.output()[-3000:]
    hist = api(d, "/api/jobs/%s/history" % job)
    kinds = [k["kind"] for k in hist["marks"]]
    assert kinds == ["failure", "restart"], hist["marks"]
    assert hist["counts"]["failure"] == 1 and hist["counts"]["restart"] == 1
    for k in hist["marks"]:
        # Workers start over and report within a few seconds.
        assert 0 < k["recovery_ms"] < 30000, k
    mt = hist["marks"][0]["time_ms"]
    print("# samples around the failure:", [
        (x["time_ms"] - mt, x["step"], x["ranks"], round(x["steps_per_s"]))
        for x in hist["samples"] if abs(x["time_ms"] - mt) < 2000])
    print("# marks:", [(k["kind"], k["recovery_ms"]) for k in hist["marks"]])
    rates = [x["steps_per_s"] for x in hist["samples"]]
    assert max(rates) > 5, rates        # 20 ms a step: tens a second
    check_metrics(d, job, 1, 1)
    url = "http://127.0.0.1:%d/#%s" % (d.http_port, job)
    p = chromium(["--dump-dom", url])
    dom = p.stdout.decode(errors="replace")
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-2000:]
    assert "life-demo: progress" in dom, dom[-3000:]
    marks = check_chart(dom, hist)
    assert len(marks) == 2
    assert '<div id="err"></div>' in dom, dom[-3000:]
    # The marks table gives each recovery in seconds.
    assert len(re.findall(r"<td>(failure|restart)</td><td>[0-9.]+ m?s</td>",
                          dom)) == 2, dom[-3000:]
    shot = os.path.join(rt.top_builddir(), "tests", "integ",
                        "status_page_job.png")
    p = chromium(["--screenshot=" + shot, "--window-size=1000,700",
                  "--hide-scrollbars", url])
    assert p.returncode == 0 and os.path.exists(shot), \
        p.stderr.decode(errors="replace")[-2000:]
    img = Image.open(shot).convert("RGB")
    # The rate line (#1565c0) and the failure mark (#c62828) are drawn.
    colors = dict((c, n) for n, c in img.getcolors(maxcolors=1 << 20))
    blue = sum(n for c, n in colors.items()
               if abs(c[0] - 0x15) < 40 and abs(c[1] - 0x65) < 40 and
               abs(c[2] - 0xc0) < 40)
    # Failure and restart share a time: one drawn over the other.
    red = sum(n for c, n in colors.items()
              if (abs(c[0] - 0xc6) < 30 and abs(c[1] - 0x28) < 30 and
                  abs(c[2] - 0x28) < 30) or
              (abs(c[0] - 0xef) < 30 and abs(c[1] - 0x6c) < 30 and
               abs(c[2] - 0x00) < 30))
    assert blue > 100 and red > 100, (blue, red)
    print("# screenshot kept: %s (%d rate, %d failure-mark pixels)"
          % (shot, blue, red))
    # After an rdzvd restart: the same samples and marks (the page after
    # a restart is drawn in test_page_fifty_jobs_and_restart).
    before = len(hist["samples"])
    d.restart()
    after = api(d, "/api/jobs/%s/history" % job)
    assert after["samples"][:before] == hist["samples"], "samples lost"
    assert after["marks"] == hist["marks"]
    check_metrics(d, job, 1, 1)
    d.stop_clean()


def test_page_no_job():
    if CHROMIUM is None:
        rt.skip("chromium is not installed (scripts/deps.sh installs it)")
    d = rt.Rdzvd(["--history-interval-ms", str(HIST_MS)])
    p = chromium(["--dump-dom", "http://127.0.0.1:%d/" % d.http_port])
    dom = p.stdout.decode(errors="replace")
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-2000:]
    assert '<div id="jobs">no jobs yet</div>' in dom, dom[-3000:]
    assert '<div id="err"></div>' in dom, dom[-3000:]
    assert '<svg class="chart"' not in dom
    assert "rdzvd_job_" not in "".join(
        l for l in d.metrics_text().splitlines() if not l.startswith("#"))


def test_page_fifty_jobs_and_restart():
    if CHROMIUM is None:
        rt.skip("chromium is not installed (scripts/deps.sh installs it)")
    d = rt.Rdzvd(["--history-interval-ms", str(HIST_MS)])
    agents = []
    for i in range(50):
        a = Agent(d, "bulk-%02d" % i, lws=1, nodes=(1, 1), lease_ms=60000)
        a.join()
        p = a.push()
        n = d.native(ns=p["store_ns"])
        n.set("progress/0", "%d %d" % (100 + i, int(time.time() * 1000)))
        n.close()
        agents.append(a)
    poll("samples", lambda: all(len(api(d, "/api/jobs/bulk-%02d/history"
                                          % i)["samples"]) >= 2
                                for i in (0, 49)))
    d.restart()                         # leases of 60 s: jobs stay running
    h = poll("rdzvd restart mark", lambda: (lambda h: h if h["marks"] else
                                            None)(api(d, "/api/jobs/bulk-07/history")))
    assert h["marks"][0]["kind"] == "rdzvd_restart", h["marks"]
    p = chromium(["--dump-dom", "http://127.0.0.1:%d/" % d.http_port],
                 timeout=90)
    dom = p.stdout.decode(errors="replace")
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-2000:]
    assert '<div id="err"></div>' in dom, dom[-3000:]
    for i in range(50):
        assert "bulk-%02d: progress" % i in dom, i
    assert dom.count('<svg class="chart"') == 50, dom.count("<svg")
    assert dom.count('class="mark rdzvd_restart"') == 50
    fams = {}
    from prometheus_client.parser import text_string_to_metric_families
    for fam in text_string_to_metric_families(d.metrics_text()):
        fams[fam.name] = fam
    jobs = {s.labels["job"] for s in fams["rdzvd_job_world_size"].samples}
    assert jobs == {"bulk-%02d" % i for i in range(50)}, jobs


def test_purged_job_vanishes():
    """--job-retention bounds the per-job series: a purged job's history,
    metrics and rows go with it, also across a restart."""
    d = rt.Rdzvd(["--history-interval-ms", str(HIST_MS),
                  "--job-retention", "1"])
    a = Agent(d, "short", lws=1, nodes=(1, 1), lease_ms=60000)
    a.join()
    p = a.push()
    n = d.native(ns=p["store_ns"])
    n.set("progress/0", "7 %d" % int(time.time() * 1000))
    poll("samples", lambda: len(api(d, "/api/jobs/short/history")[
        "samples"]) >= 2)
    assert 'rdzvd_job_world_size{job="short"} 1' in d.metrics_text()
    a.succeeded(p["round"])
    poll("purge", lambda: api(d, "/api/jobs/short/history", True) is None)
    assert 'job="short"' not in d.metrics_text()
    # No rows left behind: nothing but the rendezvous' own counters.
    keys = api(d, "/api/status")["keys"]
    d.restart()
    assert api(d, "/api/jobs/short/history", True) is None
    assert api(d, "/api/status")["keys"] == keys
    assert 'job="short"' not in d.metrics_text()
    assert keys == 0, keys
    d.stop_clean()


if __name__ == "__main__":
    rt.main(globals())
