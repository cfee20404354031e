# SPDX-License-Identifier: Apache-2.0
"""daemon: rdzvd as an operator sees it.

Command line (--help, --version, bad options), start-up errors (port in
use, unwritable database) with exit 1 and a message naming the cause,
--config files, SIGHUP log reopening, IPv6 listening, and the HTTP
listener: /healthz, and /metrics in Prometheus text whose figures move
with traffic.
"""

import os
import re
import signal
import socket
import time

import rdzvtest as rt

LONG_OPTIONS = [
    "--foreground", "--listen", "--port-file", "--http", "--http-port-file",
    "--db", "--durability", "--relaxed-window-ms", "--config", "--log-file",
    "--log-level", "--key-max", "--value-max", "--keys-max",
    "--max-connections", "--output-max", "--memory-budget",
    "--request-timeout-ms", "--help", "--version",
]
OPS = ["set", "get", "add", "compare_set", "wait", "check", "delete",
       "num_keys", "append", "multi_get", "multi_set", "queue_push",
       "queue_pop", "queue_len", "list_keys", "barrier", "cancel", "ping",
       "watch"]
ERROR_KINDS = ["malformed", "too_big", "request_timeout", "memory_budget",
               "output_limit", "accept", "store"]
DIALECTS = ["native", "tcpstore113", "tcpstore2", "unknown"]


def base_args(tmp, **over):
    """A full command line for run_rdzvd with ports 0 in tmp."""
    a = {"--listen": "127.0.0.1:0", "--port-file": os.path.join(tmp, "port"),
         "--http": "127.0.0.1:0",
         "--http-port-file": os.path.join(tmp, "http-port"),
         "--db": os.path.join(tmp, "db")}
    a.update(over)
    out = ["-d"]
    for k, v in a.items():
        out += [k, v]
    return out


def test_help():
    for flag in ("--help", "-h"):
        rc, out, err = rt.run_rdzvd([flag])
        assert rc == 0, (flag, rc, err)
        text = out + err
        missing = [o for o in LONG_OPTIONS if o not in text]
        assert not missing, "%s does not list %s" % (flag, missing)
        for short in ("-d", "-l", "-h", "-V"):
            assert re.search(r"(^|\s)%s[,\s]" % short, text), short


def test_version():
    with open(os.path.join(rt.top_srcdir(), "configure.ac")) as f:
        m = re.search(r"AC_INIT\(\[rdzv\],\s*\[([^\]]+)\]", f.read())
    version = m.group(1)
    for flag in ("--version", "-V"):
        rc, out, err = rt.run_rdzvd([flag])
        assert rc == 0, (flag, rc, err)
        assert version in out + err, (out, err)


def test_bad_options():
    tmp = rt.mktemp()
    cases = [
        (["--no-such-option"], "no-such-option"),
        (["--durability", "sometimes"], "durability"),
        (["--key-max", "lots"], "key-max"),
        (["--request-timeout-ms", "-5"], "request-timeout-ms"),
        (["--listen", "127.0.0.1"], "listen"),
        (["--log-level", "loud"], "log-level"),
    ]
    for extra, name in cases:
        rc, out, err = rt.run_rdzvd(base_args(tmp) + extra)
        assert rc == 1, "%s: exit %d (want 1); %s" % (extra, rc, err)
        assert name in out + err or name.replace("-", "_") in out + err, \
            "%s: message does not name %s: %r" % (extra, name, out + err)
        assert not os.path.exists(os.path.join(tmp, "port"))


def test_port_in_use():
    tmp = rt.mktemp()
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen(1)
    port = blocker.getsockname()[1]
    for opt in ("--listen", "--http"):
        args = base_args(tmp, **{opt: "127.0.0.1:%d" % port})
        t0 = time.monotonic()
        rc, out, err = rt.run_rdzvd(args)
        assert rc == 1, "%s on a used port: exit %d; %s" % (opt, rc, err)
        assert time.monotonic() - t0 < 5
        text = (out + err).lower()
        assert "in use" in text, "%s: cause not named: %r" % (opt, out + err)
        assert str(port) in text, "%s: port not named: %r" % (opt, out + err)
        assert not os.path.exists(os.path.join(tmp, "port")), \
            "port file written by a daemon that failed to start"
    blocker.close()


def test_unwritable_db():
    tmp = rt.mktemp()
    afile = os.path.join(tmp, "afile")
    open(afile, "w").close()
    paths = [os.path.join(afile, "x.db")]       # a file is no directory
    if os.geteuid() != 0:                       # root ignores modes
        ro = os.path.join(tmp, "ro")
        os.mkdir(ro, 0o555)
        paths.append(os.path.join(ro, "x.db"))
    for path in paths:
        for mode in ("relaxed", "strict"):
            rc, out, err = rt.run_rdzvd(base_args(tmp, **{
                "--db": path, "--durability": mode}))
            assert rc == 1, "db %s: exit %d; %s" % (path, rc, err)
            assert path in out + err, "cause not named: %r" % (out + err)
            assert not os.path.exists(os.path.join(tmp, "port"))


def test_config_file():
    d = rt.Rdzvd(start=False, raw=True)
    conf = os.path.join(d.tmpdir, "rdzvd.conf")
    with open(conf, "w") as f:
        f.write("# test configuration\n\n"
                "listen = 127.0.0.1:0\n"
                "port_file = %s\n"
                "http-port-file = %s\n"
                "http = 127.0.0.1:0\n"
                "db=:memory:\n"
                "durability = memory\n"
                "  key_max   =   16  \n"
                "log-file = %s\n" % (d.port_file, d.http_port_file,
                                     d.log_path))
    d.extra = ["--config", conf]
    d.start()
    t = d.tcps113()
    t.set(b"k" * 16, b"ok")
    assert t.get(b"k" * 16) == b"ok"
    t.send_raw(rt.enc113("set", b"k" * 17, b"no"))
    rt.expect_closed(t.sock, 5)
    assert d.metric("rdzvd_errors_total", kind="too_big") == 1
    assert os.path.getsize(d.log_path) > 0, "log-file from config not used"
    assert d.stop() == 0
    # the command line wins over the file
    d.extra = ["--config", conf, "--key-max", "32"]
    d.start()
    t = d.tcps113()
    t.set(b"k" * 17, b"ok")
    assert t.get(b"k" * 17) == b"ok"
    assert d.stop() == 0
    # the shipped example configuration parses
    shipped = os.path.join(rt.top_srcdir(), "etc", "rdzvd.conf")
    e = rt.Rdzvd(["--config", shipped], durability="memory", db=":memory:")
    assert e.native().ping(b"x") == b"x"


def test_config_errors():
    tmp = rt.mktemp()
    cases = [
        ("bogus_key = 1\n", "bogus_key"),
        ("durability = eventually\n", "eventually"),
        ("key-max\n", "bad.conf:3"),        # the line, by number
    ]
    for text, name in cases:
        conf = os.path.join(tmp, "bad.conf")
        with open(conf, "w") as f:
            f.write("# fine\nlog-level = info\n" + text)
        rc, out, err = rt.run_rdzvd(base_args(tmp) + ["--config", conf])
        assert rc == 1, "%r: exit %d; %s" % (text, rc, err)
        assert name in out + err, "%r: message %r" % (text, out + err)
        assert conf in out + err or "bad.conf" in out + err, \
            "%r: file not named: %r" % (text, out + err)
        assert not os.path.exists(os.path.join(tmp, "port"))
    rc, out, err = rt.run_rdzvd(base_args(tmp) +
                                ["--config", os.path.join(tmp, "absent")])
    assert rc == 1 and "absent" in out + err, (rc, out, err)


def closing_line(d):
    """Makes rdzvd log a 'closing' line; returns the peer port named."""
    s = d.connect()
    port = s.getsockname()[1]
    s.sendall(b"\xff")
    rt.expect_closed(s, 5)
    return port


def test_sighup_reopens_log():
    d = rt.Rdzvd([], durability="memory", db=":memory:")
    p1 = closing_line(d)
    rt.wait_until(lambda: (":%d:" % p1) in open(d.log_path).read(), 5,
                  what="first closing line in the log")
    rotated = d.log_path + ".1"
    os.rename(d.log_path, rotated)
    p2 = closing_line(d)                # still goes to the renamed file
    rt.wait_until(lambda: (":%d:" % p2) in open(rotated).read(), 5,
                  what="line logged to the renamed file before SIGHUP")
    d.signal(signal.SIGHUP)
    time.sleep(0.1)
    p3 = closing_line(d)
    rt.wait_until(lambda: os.path.exists(d.log_path) and
                  (":%d:" % p3) in open(d.log_path).read(), 5,
                  what="a new log file with the new line after SIGHUP")
    assert (":%d:" % p3) not in open(rotated).read()
    assert d.running()
    assert d.native().ping(b"alive") == b"alive"
    assert d.stop() == 0


def test_ipv6_listen():
    try:
        s = socket.socket(socket.AF_INET6)
        s.bind(("::1", 0))
        s.close()
    except OSError:
        rt.skip("no IPv6 loopback")
    tmp = rt.mktemp()
    d = rt.Rdzvd(["--listen", "[::1]:0", "--port-file",
                  os.path.join(tmp, "port"), "--http", "off",
                  "--db", ":memory:", "--durability", "memory"],
                 raw=True, http=False, tmpdir=tmp)
    s = socket.create_connection(("::1", d.port), timeout=5)
    c = rt.NativeClient(s)
    c.set("v6", b"yes")
    assert c.get("v6") == b"yes"


def test_sd_notify():
    # systemd's Type=notify: READY=1 once serving, STOPPING=1 on SIGTERM.
    # A datagram socket stands in for systemd's NOTIFY_SOCKET.
    tmp = rt.mktemp("notify-")
    path = os.path.join(tmp, "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(10)
    env = dict(os.environ, NOTIFY_SOCKET=path)
    d = rt.Rdzvd(durability="memory", env=env)
    msg = sock.recv(4096).decode()      # one datagram: READY and STATUS
    assert "READY=1" in msg, msg
    assert "STATUS=serving on port %d" % d.port in msg, msg
    d.signal(signal.SIGTERM)
    assert "STOPPING=1" in sock.recv(4096).decode()
    assert d.wait(10) == 0
    sock.close()


def test_healthz():
    d = rt.Rdzvd([], durability="memory", db=":memory:")
    st, body, _ = d.http_get("/healthz")
    assert (st, body) == (200, b"ok\n"), (st, body)
    st, _, _ = d.http_get("/no-such-page")
    assert st == 404, st


def test_metrics_format():
    d = rt.Rdzvd([], durability="relaxed")
    st, body, resp = d.http_get("/metrics")
    assert st == 200
    ctype = resp.getheader("Content-Type", "")
    assert ctype.startswith("text/plain"), ctype
    text = body.decode()
    assert text.endswith("\n")
    samples, types = rt.parse_metrics(text)      # every line parses
    want_types = {
        "rdzvd_connections": "gauge",
        "rdzvd_connections_accepted_total": "counter",
        "rdzvd_connections_rejected_total": "counter",
        "rdzvd_ops_total": "counter",
        "rdzvd_errors_total": "counter",
        "rdzvd_keys": "gauge",
        "rdzvd_waiters": "gauge",
        "rdzvd_commit_seconds": "histogram",
        "rdzvd_store_pending_bytes": "gauge",
    }
    for name, ty in want_types.items():
        assert types.get(name) == ty, "%s: TYPE %r" % (name, types.get(name))
    m = lambda n, **l: rt.metric_value(samples, n, None, **l)
    for dl in DIALECTS:
        assert m("rdzvd_connections", dialect=dl) is not None, dl
    for op in OPS:
        assert m("rdzvd_ops_total", op=op) is not None, op
    for k in ERROR_KINDS:
        assert m("rdzvd_errors_total", kind=k) == 0, k
    for n in ("rdzvd_connections_accepted_total",
              "rdzvd_connections_rejected_total", "rdzvd_keys",
              "rdzvd_waiters", "rdzvd_store_pending_bytes",
              "rdzvd_commit_seconds_sum", "rdzvd_commit_seconds_count"):
        assert m(n) is not None, n
    assert m("rdzvd_commit_seconds_bucket", le="+Inf") is not None
    # every sample belongs to a family with a TYPE line
    for (name, _) in samples:
        fam = re.sub(r"_(bucket|sum|count)$", "", name)
        assert name in types or fam in types, "no TYPE for %s" % name


def histogram(samples, name):
    b = sorted(((float(dict(l)["le"]), v) for (n, l), v in samples.items()
                if n == name + "_bucket"))
    return b, samples[(name + "_count", ())], samples[(name + "_sum", ())]


def test_metrics_move():
    d = rt.Rdzvd([], durability="relaxed")
    m0 = d.metrics()
    c = d.native()
    c.set("k", b"1")
    c.get("k")
    c.add("n", 1)
    c.cas("k", b"1", b"2")
    c.wait(["k"], 0)
    c.check(["k"])
    c.append("k", b"x")
    c.multi_get(["k"])
    c.multi_set({"m": b"1"})
    c.queue_push("q", b"i")
    c.queue_pop("q", 0)
    c.queue_len("q")
    c.list_keys()
    c.barrier("b", 1, 1000)
    c.num_keys()
    wid = c.wait_send(["never"], -1)
    c.cancel(wid)
    try:
        c.reply(wid)
    except rt.RdzvError as e:
        assert e.code == rt.RDZV_ECANCELED
    c.ping(b"")
    c.watch("k")
    c.delete("m")
    m1 = d.metrics()
    for op in OPS:
        a = rt.metric_value(m0, "rdzvd_ops_total", 0, op=op)
        b = rt.metric_value(m1, "rdzvd_ops_total", 0, op=op)
        want = 2 if op == "wait" else 1     # the cancelled one too
        assert b - a == want, "ops_total{op=%s} moved by %d, not %d" % (
            op, b - a, want)
    for i in range(5):
        c.set("s%d" % i, b"v")
    m2 = d.metrics()
    assert rt.metric_value(m2, "rdzvd_ops_total", op="set") - \
        rt.metric_value(m1, "rdzvd_ops_total", op="set") == 5
    # keys: k, n, b (barrier counter), s0..s4
    assert rt.metric_value(m2, "rdzvd_keys") == c.num_keys() == 8
    # connection figures
    acc = rt.metric_value(m2, "rdzvd_connections_accepted_total")
    t1 = d.tcps113()
    t1.num_keys()
    t2 = d.tcps2()
    silent = d.connect()
    rt.wait_until(lambda: d.metric("rdzvd_connections_accepted_total") ==
                  acc + 3, 5, what="accepted_total +3")
    m3 = d.metrics()
    for dl in DIALECTS:
        want = 0 if dl != "native" else 1
        want = 1 if dl in ("tcpstore113", "tcpstore2", "unknown") else want
        assert rt.metric_value(m3, "rdzvd_connections", dialect=dl) == want, \
            (dl, rt.metric_value(m3, "rdzvd_connections", dialect=dl))
    # waiters gauge follows a pending wait
    w0 = rt.metric_value(m3, "rdzvd_waiters")
    t1.send_raw(rt.enc113("wait", [b"later"]))
    rt.wait_until(lambda: d.metric("rdzvd_waiters") == w0 + 1, 5,
                  what="waiters +1")
    t2.set(b"later", b"1")
    assert t1.read_u8() == rt.STOP_WAITING
    rt.wait_until(lambda: d.metric("rdzvd_waiters") == w0, 5,
                  what="waiters back")
    # commits show in the histogram (relaxed mode commits within 50 ms)
    _, count0, _ = histogram(m0, "rdzvd_commit_seconds")
    rt.wait_until(lambda: histogram(d.metrics(), "rdzvd_commit_seconds")[1] >
                  count0, 5, what="commit_seconds_count to rise")
    rt.wait_until(lambda: d.metric("rdzvd_store_pending_bytes") == 0, 5,
                  what="pending bytes to drain")
    buckets, count, total = histogram(d.metrics(), "rdzvd_commit_seconds")
    vals = [v for _, v in buckets]
    assert vals == sorted(vals), "buckets not cumulative: %r" % buckets
    assert buckets[-1][0] == float("inf") and buckets[-1][1] == count
    assert total >= 0 and count > 0
    # errors move too (closing_line sends an unknown 1.13 opcode)
    closing_line(d)
    rt.wait_until(lambda: d.metric("rdzvd_errors_total", kind="malformed")
                  == 1, 5, what="errors_total{kind=malformed} == 1")
    del silent


if __name__ == "__main__":
    rt.main(globals(), per_test=30, total=120)
