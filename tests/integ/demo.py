# SPDX-License-Identifier: Apache-2.0
"""demo: scripts/demo.sh, the first command the README gives, runs
against this build (--no-install: no deps.sh, no configure, no make) and
shows what it claims, so a change of behaviour breaks this test rather
than the user's first try.  Asserts its exit status 0 (each part checks
its own claims and the demo fails when one did not happen), every
part's PASS line, and the lines that carry the story: survivors' PIDs
kept, shrink and grow rounds, rdzvd killed and back, the restart count 1
on both nodes, the resume from the checkpoint, the torch ranks' shared
digest, the status page's address and its screenshot (kept as
tests/integ/demo_status_page.png, a CI artifact).

Plain build only: under ASan+UBSan (RDZV_SANITIZERS=1) it skips.  The
demo's five jobs take minutes there, and what they exercise is checked
under the sanitizers already, each on its own, by repair_agent.py,
repair_agent2.py, status_page.py and tests/compat/test_repair_agent_*.py;
what only this test checks, that the demo's script and story match the
programs, does not depend on the build's flags.
"""
import os
import re
import shutil
import signal
import subprocess

import rdzvtest as rt

DATA = "/usr/share/datasets/fashion-mnist"
# The demo's own deadlines add up to more; on a loaded 2-core machine it
# takes about 3 minutes.
DEADLINE = 840


def preconditions():
    if os.environ.get("RDZV_SANITIZERS") == "1":
        rt.skip("the demo runs in the plain build only (its behaviours "
                "are checked under ASan+UBSan by repair_agent*.py, "
                "status_page.py, test_repair_agent_torch*.py)")
    if not os.path.exists(os.path.join(DATA, "train-images-idx3-ubyte.gz")):
        rt.skip("no Fashion-MNIST at %s (Debian's dataset-fashion-mnist; "
                "scripts/deps.sh installs it)" % DATA)
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        rt.skip("chromium is not installed (scripts/deps.sh installs it)")
    for py, what in ((rt.TORCH_PYTHON, "TORCH_PYTHON"),
                     (rt.TORCH2_PYTHON, "TORCH2_PYTHON")):
        if not rt.has_torch(py):
            rt.no_torch("no torch at %s (%s); the demo's store part and "
                        "its torch part need both" % (py, what),
                        whole_file=False)


def run_demo(work):
    """Runs the demo, its lines streamed into this test's log; returns
    (exit status, output)."""
    env = dict(os.environ, RDZV_DEMO_DIR=work,
               TORCH_PYTHON=rt.TORCH_PYTHON, TORCH2_PYTHON=rt.TORCH2_PYTHON)
    p = rt.spawn(["bash", os.path.join(rt.top_srcdir(), "scripts", "demo.sh"),
                  "--no-install"], stdout=subprocess.PIPE,
                 stderr=subprocess.STDOUT, env=env)
    lines = []
    try:
        for raw in p.stdout:
            line = raw.decode(errors="replace")
            lines.append(line)
            print("| " + line, end="", flush=True)
        rc = p.wait(60)
    finally:
        if p.poll() is None:
            # SIGTERM first: the demo's harness then stops its rdzvd and
            # agents (a SIGKILL would leave them).
            rt.end(p, signal.SIGTERM)
            rt.end(p)
    return rc, "".join(lines)


def test_demo_shows_its_story():
    preconditions()
    work = os.path.join(rt.mktemp("demo-"), "out")
    rc, out = run_demo(work)
    for n in range(1, 7):
        assert re.search(r"^demo \| PASS part %d: " % n, out, re.M), \
            "no PASS for part %d" % n
    assert not re.search(r"^demo \| +(FAIL|FAILED)", out, re.M), out[-3000:]
    assert rc == 0, rc
    assert "demo: PASS: every part showed what it claims" in out
    # Part 2 (ddp_mlp) and part 5 (torch): repaired in place.
    assert out.count("ok: the 3 survivors kept their PIDs") == 2
    assert len(re.findall(r"SIGKILL -> shrink round: \d+ ms; shrink -> grow "
                          r"round .*: [0-9.]+ s$", out, re.M)) == 2
    assert len(re.findall(r"repair: shrink to 3 after node \d local rank 0 "
                          r"died \(signal 9\)", out)) >= 2
    # Part 3: rdzvd killed while steps rose, back on the same port.
    assert re.search(r"steps rising in `rdzvctl --json members mnist`: "
                     r"\[\d+, \d+\] -> \[\d+, \d+\]", out)
    assert re.search(r"rdzvd restarted: round \d+ resumes", out)
    assert "ok: the workers kept their PIDs" in out
    # Part 4: the restart, counted 1 on both nodes, and the resume.
    assert "ok: node A: restart count 1" in out
    assert "ok: node B: restart count 1" in out
    assert re.search(r"resumed from \S+: epoch \d+, \d+ samples done", out)
    # Part 5: every torch rank ends with the same state.
    assert re.search(r"ok: every rank \(the replacement too\) ends with the "
                     r"same model and optimizer: sha256 [0-9a-f]{16}", out)
    # The status page: its address while it ran, its picture at the end.
    assert re.search(r"^demo \| status page: http://127\.0\.0\.1:\d+/ ", out,
                     re.M)
    m = re.search(r"as headless Chromium drew it: (\S+\.png)$", out, re.M)
    assert m and os.path.getsize(m.group(1)) > 10000, m
    keep = os.path.join(rt.top_builddir(), "tests", "integ",
                        "demo_status_page.png")
    shutil.copyfile(m.group(1), keep)
    print("# the demo's screenshot kept: %s" % keep)


if __name__ == "__main__":
    rt.main(globals(), per_test=DEADLINE + 30, total=DEADLINE + 60)
