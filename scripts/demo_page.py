# SPDX-License-Identifier: Apache-2.0
"""The demo's last part: rdzvd's status page, as a browser draws it.

Headless Chromium (Debian's chromium, which scripts/deps.sh installs)
loads the page of one job after the others ran; the rendered page must
draw that job's chart with a mark for each interruption rdzvd recorded
(/api/jobs/JOB/history), and a screenshot of it is kept in the demo's
work directory, its path printed.  Run by demo_train.py."""
import os

import demo_lib as dl
from demo_lib import PartFailed, say
# The status page test's browser and chart reader.
import status_page as sp


def check_page(part, job):
    demo = part.demo
    if sp.CHROMIUM is None:
        raise PartFailed("chromium is not installed (scripts/deps.sh "
                         "installs Debian's chromium)")
    url = "%s#%s" % (demo.url, job)
    hist = sp.api(demo.d, "/api/jobs/%s/history" % job)
    kinds = [k["kind"] for k in hist["marks"]]
    say("rdzvd's history of %s (/api/jobs/%s/history): %d samples; its "
        "marks, each with the time until a rank reported a step after it:"
        % (job, job, len(hist["samples"])))
    for k in hist["marks"]:
        say("  %-13s %-8s %s" % (k["kind"], "%d ms" % k["recovery_ms"]
                                 if k["recovery_ms"] is not None else "-",
                                 k["text"]))
    p = sp.chromium(["--dump-dom", url])
    dom = p.stdout.decode(errors="replace")
    if p.returncode != 0 or "<svg" not in dom:
        raise PartFailed("chromium could not render %s: %s" % (
            url, p.stderr.decode(errors="replace")[-500:]))
    marks, _ = sp.chart_marks(dom)
    part.check(len(hist["samples"]) > 0 and len(marks) == len(kinds) > 0,
               "the page draws %s's progress with its %d marks" %
               (job, len(kinds)), "%d marks drawn" % len(marks))
    shot = os.path.join(demo.work, "status-page.png")
    p = sp.chromium(["--screenshot=" + shot, "--window-size=1100,900",
                     "--hide-scrollbars", url])
    ok = p.returncode == 0 and os.path.exists(shot)
    part.check(ok and not blank(shot), "screenshot taken",
               p.stderr.decode(errors="replace")[-500:])
    say("status page of %s, as headless Chromium drew it: %s" % (job, shot))


def blank(path):
    """Whether the PNG is one flat colour (or unreadable)."""
    try:
        from PIL import Image
    except ImportError:
        return os.path.getsize(path) < 1000
    with Image.open(path) as im:
        colors = im.convert("RGB").getcolors(maxcolors=1 << 20)
    return colors is None or len(colors) < 10


def part(demo, job):
    p = dl.Sections(demo)
    p.begin(6, "the status page, drawn by headless Chromium")
    try:
        check_page(p, job)
        err = None
    except (PartFailed, AssertionError, OSError) as e:
        err = e
    p.end_section(err)
