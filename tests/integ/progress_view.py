# SPDX-License-Identifier: Apache-2.0
"""Training progress in rdzvd's job detail: workers write
"progress/<rank>" = "<step> <unix_ms>" into their round's namespace, and
/api/jobs/JOB, ADMIN_JOB (`rdzvctl members`, table and --json) and the
status page show, per member of the running round, how many of its ranks
reported, their lowest and highest step and the oldest report's age.
Malformed values and ranks outside a member are not counted; a member
with no report, a standby and the next round show none.  `rdzvctl top`
shows the same live, as plain lines off a terminal and redrawn in place
on one (a pty)."""
import json
import os
import re
import subprocess
import time

import rdzvtest as rt
from rendezvous import Agent, RUNNING, STANDBY, STOP
from status_page import CHROMIUM, chromium

OP_ADMIN_JOB = 30
JOB = "prog-demo"


def now_ms():
    return int(time.time() * 1000)


def ctl(d, *args):
    p = os.path.join(rt.top_builddir(), "client", "rdzvctl")
    if not os.access(p, os.X_OK):
        rt.skip("client/rdzvctl is not built")
    r = subprocess.run([p, "-e", "127.0.0.1:%d" % d.port] + list(args),
                       capture_output=True, timeout=20, text=True)
    assert r.returncode == 0, r
    return r.stdout


class Job:
    """Three members (3, 2 and 1 workers) and a standby; progress written
    through the native client into the round's namespace:
      a: its 1st rank at step 1200 0.4 s ago, its 2nd at 1180 12 s ago,
         its 3rd malformed;
      b: both ranks at step 50, stamped a minute ahead of rdzvd's clock;
      c: only a malformed value."""

    def __init__(self, d):
        kw = dict(nodes=(3, 3), lease_ms=60000)
        self.a = Agent(d, JOB, lws=3, **kw)
        self.b = Agent(d, JOB, lws=2, **kw)
        self.c = Agent(d, JOB, lws=1, **kw)
        for x in (self.a, self.b, self.c):
            x.join()
        self.push = {}
        for x in (self.a, self.b, self.c):
            p = x.push()
            assert p["state"] == RUNNING, p
            self.push[x.node_id] = p
        self.s = Agent(d, JOB, lws=1, **kw)
        self.s.join()
        assert self.s.push()["state"] == STANDBY
        ns = self.push[self.a.node_id]["store_ns"]
        assert ns == b"job/%s/round/1" % JOB.encode()
        self.base = {x.node_id: self.push[x.node_id]["rank_base"]
                     for x in (self.a, self.b, self.c)}
        n = d.native(ns=ns)
        t = now_ms()
        ra, rb, rc = (self.base[x.node_id] for x in (self.a, self.b, self.c))
        n.set("progress/%d" % ra, "1200 %d" % (t - 400))
        n.set("progress/%d" % (ra + 1), "1180 %d" % (t - 12000))
        n.set("progress/%d" % (ra + 2), "1190x %d" % t)
        n.set("progress/%d" % rb, "50 %d" % (t + 60000))
        n.set("progress/%d" % (rb + 1), "50 %d" % (t + 60000))
        n.set("progress/%d" % rc, "-7 %d" % t)
        # Outside every member (world size 6), and other keys: not read.
        n.set("progress/6", "99999 %d" % t)
        n.set("progress/x", "1 %d" % t)
        self.written = t
        self.n = n


def members(doc):
    return {m["node_id"]: m for m in doc["members"]}


def check_doc(job, doc, since):
    """The detail document as Job wrote it; since = ms elapsed since the
    writes at most (bounds the ages)."""
    m = members(doc)
    assert doc["state"] == "running"
    pa = m[job.a.node_id]["progress"]
    assert pa["ranks_reporting"] == 2, pa
    assert (pa["min_step"], pa["max_step"]) == (1180, 1200), pa
    assert 12000 <= pa["oldest_report_ms_ago"] <= 12000 + since + 5, pa
    pb = m[job.b.node_id]["progress"]
    assert pb == {"ranks_reporting": 2, "min_step": 50, "max_step": 50,
                  "oldest_report_ms_ago": 0, "stragglers": []}, pb
    assert m[job.c.node_id]["progress"] is None
    assert m[job.s.node_id]["progress"] is None
    assert m[job.s.node_id]["state"] == "standby"
    assert "rank_base" not in m[job.s.node_id]
    for x in (job.a, job.b, job.c):
        assert m[x.node_id]["rank_base"] == job.base[x.node_id]


def test_api_and_admin_job():
    d = rt.Rdzvd()
    job = Job(d)
    st, body, _ = d.http_get("/api/jobs/" + JOB)
    assert st == 200, body
    doc = json.loads(body)
    check_doc(job, doc, now_ms() - job.written)
    raw = json.loads(d.native().call(OP_ADMIN_JOB, JOB)[0])
    check_doc(job, raw, now_ms() - job.written)
    # Ages are computed per request, not stored.
    time.sleep(0.3)
    later = json.loads(d.http_get("/api/jobs/" + JOB)[1])
    assert members(later)[job.a.node_id]["progress"][
        "oldest_report_ms_ago"] >= members(doc)[job.a.node_id][
        "progress"]["oldest_report_ms_ago"] + 250
    # A new report is seen at once (with its wait on peers, a third
    # field, too); a malformed one (a fourth field) replacing a good one
    # takes that rank out of the count.
    ra = job.base[job.a.node_id]
    job.n.set("progress/%d" % (ra + 2), "1250 %d 30" % now_ms())
    job.n.set("progress/%d" % (ra + 1), "1180 %d 7 9" % now_ms())
    pa = members(json.loads(d.http_get("/api/jobs/" + JOB)[1]))[
        job.a.node_id]["progress"]
    assert pa["ranks_reporting"] == 2 and \
        (pa["min_step"], pa["max_step"]) == (1200, 1250), pa
    assert 400 <= pa["oldest_report_ms_ago"] < 12000, pa
    d.stop_clean()


def test_next_round_starts_without_progress():
    d = rt.Rdzvd()
    job = Job(d)
    p = job.push[job.a.node_id]
    job.a.failure(p["round"], "worker exited with code 3", code=3)
    for x in (job.a, job.b, job.c):
        assert x.push()["state"] == STOP

    def round2():
        doc = json.loads(d.http_get("/api/jobs/" + JOB)[1])
        return doc if doc["state"] == "running" and doc["round"] == 2 \
            else None
    rt.wait_until(round2, what="round 2 running")
    # Three members again, their round's namespace new and empty.
    doc = round2()
    assert all(m["progress"] is None for m in doc["members"]), doc
    assert sum("rank_base" in m for m in doc["members"]) == 3, doc


def test_rdzvctl_members():
    d = rt.Rdzvd()
    job = Job(d)
    doc = json.loads(ctl(d, "--json", "members", JOB))
    check_doc(job, doc, now_ms() - job.written)
    out = ctl(d, "members", JOB)
    lines = out.splitlines()
    head = lines[1]
    assert re.search(r"  CONNECTED +STEP  LAST REPORT$", head), out
    rows = {int(line.split()[0]): line for line in lines[2:]}
    m = re.search(r"\s1180-1200 \(2 of 3\)\s+(\d+\.\d)s ago$",
                  rows[job.a.node_id])
    assert m and 12.0 <= float(m.group(1)) <= \
        12.1 + (now_ms() - job.written) / 1000, out
    assert re.search(r"\syes\s+50\s+0ms ago$", rows[job.b.node_id]), out
    assert re.search(r"\syes\s+-\s+-$", rows[job.c.node_id]), out
    assert re.search(r"\syes\s+-\s+-$", rows[job.s.node_id]), out
    # Right-aligned under their headers.
    end = head.index("LAST REPORT") + len("LAST REPORT")
    for line in lines[2:]:
        assert len(line) == end, (line, out)
    step_end = head.index("STEP") + len("STEP")
    assert rows[job.a.node_id][step_end - 8:step_end] == "(2 of 3)", out


def test_status_page_progress_column():
    if CHROMIUM is None:
        rt.skip("chromium is not installed (scripts/deps.sh installs it)")
    d = rt.Rdzvd()
    job = Job(d)
    p = chromium(["--dump-dom", "http://127.0.0.1:%d/" % d.http_port])
    dom = p.stdout.decode(errors="replace")
    assert p.returncode == 0, p.stderr.decode(errors="replace")[-2000:]
    assert "<th>progress</th>" in dom, dom[-3000:]
    # Ages of 10 s and more in whole seconds.
    m = re.search(r"<td>steps 1180-1200 \(2 ranks\), (\d+) s ago</td>", dom)
    assert m and 12 <= int(m.group(1)) <= \
        13 + (now_ms() - job.written) / 1000, dom[-3000:]
    assert "<td>step 50 (2 ranks), 0.0 s ago</td>" in dom, dom[-3000:]
    # c and the standby: an em dash, nothing made up.
    assert dom.count("<td>\u2014</td>") == 2, dom[-3000:]
    assert '<div id="err"></div>' in dom, dom[-3000:]
    assert job.a.node_id is not None


def ctl_path():
    p = os.path.join(rt.top_builddir(), "client", "rdzvctl")
    if not os.access(p, os.X_OK):
        rt.skip("client/rdzvctl is not built")
    return p


def test_rdzvctl_top_plain():
    d = rt.Rdzvd()
    job = Job(d)
    rb = job.base[job.b.node_id]
    top = subprocess.Popen([ctl_path(), "-e", "127.0.0.1:%d" % d.port, "top",
                            JOB, "--count", "4"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
    # b's ranks are the slowest (a's lowest is 1180); they move 40 steps
    # every 0.25 s.
    step = 50
    while top.poll() is None and step < 1100:
        step += 40
        for r in (rb, rb + 1):
            job.n.set("progress/%d" % r, "%d %d" % (step, now_ms()))
        time.sleep(0.25)
    out, err = top.communicate(timeout=20)
    assert top.returncode == 0, (out, err)
    views = [l for l in out.splitlines() if l.startswith("job ")]
    assert len(views) == 4, out
    assert "\033" not in out, out          # plain: no escapes
    assert re.match(r"job prog-demo running round 1 world 6 restarts 0/3 "
                    r"step \d+ \(4 ranks, ", views[0]), views[0]
    # Slowest: b's ranks, whatever their step.
    assert all("slowest node %d " % job.b.node_id in v for v in views), out
    rates = [float(re.search(r" ([0-9.]+) steps/s", v).group(1))
             for v in views]
    # About 160 steps/s; the first view has no rate yet.
    assert rates[0] == 0 and max(rates) > 50, rates
    assert re.search(r"^event .*round 1 running", out, re.M), out


def test_rdzvctl_top_tty_and_close():
    import pty
    d = rt.Rdzvd()
    job = Job(d)
    ctl(d, "close", JOB)
    pid, fd = pty.fork()
    if pid == 0:
        os.execv(ctl_path(), [ctl_path(), "-e", "127.0.0.1:%d" % d.port,
                              "top", JOB])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 65536)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    _, status = os.waitpid(pid, 0)
    text = out.decode(errors="replace")
    # A closed job: one view, then exit 0.
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, text
    assert text.count("\033[H\033[2J") == 1, text
    assert "job prog-demo" in text and "failed" in text, text
    assert "recent events" in text and "closed with rdzvctl" in text, text
    assert job.a.node_id is not None


def test_rdzvctl_top_usage():
    d = rt.Rdzvd()
    r = subprocess.run([ctl_path(), "-e", "127.0.0.1:%d" % d.port, "top",
                        "nosuch", "--count", "1"], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 1 and "nosuch" in r.stderr, r
    r = subprocess.run([ctl_path(), "top", JOB, "--count", "0"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and "--count" in r.stderr, r
    r = subprocess.run([ctl_path(), "members", JOB, "--count", "2"],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 2 and "--count is not an option" in r.stderr, r
    r = subprocess.run([ctl_path(), "top", "-h"], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 0 and "--count N" in r.stdout, r


if __name__ == "__main__":
    rt.main(globals())
