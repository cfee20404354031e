# SPDX-License-Identifier: Apache-2.0
"""Token authentication (PROTOCOL.md "Authentication"): without the token,
with a wrong one, with a replayed answer, and over TCPStore from a network
not listed, nothing is read or changed, each refusal is counted, and the
right token works both ways (the server proves it holds it too)."""
import hashlib
import hmac
import os
import urllib.error
import urllib.request

import rdzvtest as rt

OP_AUTH_CHALLENGE, OP_AUTH = 34, 35
NAT_PRE_AUTH = 1
TOKEN = b"s3cret-token-for-tests"
CTAG, STAG = b"rdzv-auth-v1 client", b"rdzv-auth-v1 server"


def mac(token, tag, a, b):
    return hmac.new(token, tag + a + b, hashlib.sha256).digest()


def daemon(*extra, token=TOKEN):
    tmp = rt.mktemp("rdzvd-auth-")
    path = rt.secret_file(os.path.join(tmp, "token"), token + b"\n")
    return rt.Rdzvd(args=["--token-file", path] + list(extra))


def raw_native(d):
    """Connects and reads the preamble and challenge by hand."""
    s = rt.connect(d.host, d.port)
    s.sendall(rt.nat_preamble())
    pre = rt.recv_exact(s, 8)
    assert pre[:4] == b"RDZV" and pre[5] == NAT_PRE_AUTH, pre
    c = rt.NativeClient(s, preamble=False)
    f = c.next_push()
    assert f.op == OP_AUTH_CHALLENGE and len(f.fields[0]) == 32
    return c, f.fields[0]


def authed(d, token=TOKEN):
    c, sn = raw_native(d)
    cn = os.urandom(32)
    smac = c.call(OP_AUTH, cn, mac(token, CTAG, sn, cn))[0]
    assert smac == mac(token, STAG, cn, sn), "server MAC wrong"
    return c


def refused(c, what):
    try:
        what()
        raise AssertionError("not refused")
    except rt.RdzvError as e:
        assert e.code == -10, e          # RDZV_EAUTH
    assert rt.expect_closed(c.sock, 5) == b""


def test_right_token_works():
    d = daemon()
    c = authed(d)
    c.set(b"k", b"v")
    assert c.get(b"k") == b"v"


def test_no_token_nothing_changed():
    d = daemon()
    c, _ = raw_native(d)
    refused(c, lambda: c.set(b"k", b"from-nobody"))
    assert d.metric("rdzvd_errors_total", kind="auth") == 1
    ok = authed(d)
    try:
        ok.get(b"k")
        raise AssertionError("unauthenticated SET changed the store")
    except rt.RdzvError as e:
        assert e.code == -4                # not found


def test_wrong_token():
    d = daemon()
    c, sn = raw_native(d)
    cn = os.urandom(32)
    refused(c, lambda: c.call(OP_AUTH, cn, mac(b"guess", CTAG, sn, cn)))
    assert d.metric("rdzvd_errors_total", kind="auth") == 1
    assert "wrong token" in d.log_text()


def test_replayed_challenge_answer():
    d = daemon()
    c1, sn1 = raw_native(d)
    cn = os.urandom(32)
    good = mac(TOKEN, CTAG, sn1, cn)
    c1.call(OP_AUTH, cn, good)             # a valid exchange, recorded
    c2, sn2 = raw_native(d)
    assert sn2 != sn1                      # a fresh nonce per connection
    refused(c2, lambda: c2.call(OP_AUTH, cn, good))
    assert d.metric("rdzvd_errors_total", kind="auth") == 1


def test_server_without_token_is_detected():
    # A client holding a token checks the server's MAC: a server that
    # does not know the token cannot fake it.
    d = daemon(token=b"another-token")
    c, sn = raw_native(d)
    cn = os.urandom(32)
    try:
        c.call(OP_AUTH, cn, mac(TOKEN, CTAG, sn, cn))
        raise AssertionError("accepted a token it does not hold")
    except rt.RdzvError as e:
        assert e.code == -10


def test_tcpstore_refused_without_allow_list():
    d = daemon()
    t = d.tcps113()
    t.send_raw(rt.enc113("set", b"/k", b"v"))
    assert rt.expect_closed(t.sock, 5) == b""
    assert d.metric("rdzvd_errors_total", kind="tcpstore_denied") == 1
    try:
        authed(d).get(b"/k")
        raise AssertionError("refused TCPStore SET changed the store")
    except rt.RdzvError as e:
        assert e.code == -4


def test_tcpstore_unlisted_network_refused():
    d = daemon("--tcpstore-allow", "10.0.0.0/8,::2/128")
    t = d.tcps113()
    t.send_raw(rt.enc113("get", b"/k"))
    assert rt.expect_closed(t.sock, 5) == b""
    assert d.metric("rdzvd_errors_total", kind="tcpstore_denied") == 1


def test_tcpstore_listed_network_allowed():
    d = daemon("--tcpstore-allow", "10.0.0.0/8, 127.0.0.0/8")
    t = d.tcps113()
    t.set(b"/k", b"v")
    assert t.get(b"/k") == b"v"
    assert d.metric("rdzvd_errors_total", kind="tcpstore_denied") == 0


def test_http_never_takes_the_native_token():
    # The native secret never goes over HTTP (tests/integ/security_http.py
    # covers the viewer secret that opens the page).
    d = daemon()
    base = "http://127.0.0.1:%d" % d.http_port
    for path in ("/api/status", "/"):
        for hdr in ({}, {"Authorization": "Bearer " + TOKEN.decode()}):
            req = urllib.request.Request(base + path, headers=hdr)
            try:
                urllib.request.urlopen(req, timeout=5)
                raise AssertionError("%s served with %r" % (path, hdr))
            except urllib.error.HTTPError as e:
                assert e.code == 401
                assert b"--http-token-file" in e.read()
    # Health and metrics stay open for probes and scrapers.
    assert urllib.request.urlopen(base + "/healthz", timeout=5).status == 200
    assert urllib.request.urlopen(base + "/metrics", timeout=5).status == 200
    assert d.metric("rdzvd_errors_total", kind="forbidden") == 4


def test_bad_token_file_is_a_clear_error():
    tmp = rt.mktemp("rdzvd-auth-")
    empty = os.path.join(tmp, "empty")
    open(empty, "w").close()
    rc, _, err = rt.run_rdzvd(["-d", "--listen", "127.0.0.1:0", "--http",
                               "off", "--durability", "memory",
                               "--token-file", empty])
    assert rc == 1 and "empty" in err, err
    rc, _, err = rt.run_rdzvd(["-d", "--listen", "127.0.0.1:0", "--http",
                               "off", "--durability", "memory",
                               "--token-file", os.path.join(tmp, "missing")])
    assert rc == 1 and "cannot read token file" in err, err


def agent(d, token_file, out, timeout=30, job=None):
    """Runs a one-node job whose worker writes RDZV_TOKEN_FILE to out and
    the file's bytes to out + ".bytes"."""
    import subprocess
    argv = [os.path.join(rt.top_builddir(), "agent", "rdzv-agent"),
            "--nnodes", "1", "--nproc_per_node", "1",
            "--rdzv_endpoint", "127.0.0.1:%d" % d.port,
            "--rdzv_id", job or "auth-" + os.urandom(4).hex(), "--no_python"]
    if token_file is not None:
        argv += ["--token_file", token_file]
    argv += ["/bin/sh", "-c", 'printf %s "$RDZV_TOKEN_FILE" > ' + out +
             '; cat "$RDZV_TOKEN_FILE" > ' + out + '.bytes']
    env = dict(os.environ)
    env.pop("RDZV_TOKEN_FILE", None)
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=timeout, env=env, start_new_session=True)
    return p.returncode, p.stderr.decode(errors="replace")


def test_agent_with_token():
    d = daemon()
    tmp = rt.mktemp("agent-auth-")
    tok = rt.secret_file(os.path.join(tmp, "token"), TOKEN)
    out = os.path.join(tmp, "seen")
    rc, err = agent(d, tok, out, job="auth-job")
    assert rc == 0, err
    # Workers get their job's credential, never the operator's secret,
    # in a file the agent removes when it ends.
    seen = open(out).read()
    assert seen != tok and not os.path.exists(seen), seen
    key = hmac.new(TOKEN, b"rdzv job credential v1\0auth-job",
                   hashlib.sha256).hexdigest()
    got = open(out + ".bytes", "rb").read()
    assert got == b"rdzv job credential v1\njob auth-job\nkey %s\n" % \
        key.encode(), got
    rc, err = agent(d, None, os.path.join(tmp, "x"))
    assert rc == 1 and "requires a token" in err, err
    bad = rt.secret_file(os.path.join(tmp, "bad"), b"wrong")
    rc, err = agent(d, bad, os.path.join(tmp, "y"))
    assert rc == 1 and "refused our token" in err, err
    assert not os.path.exists(os.path.join(tmp, "y"))


def test_library_workers_use_the_token():
    # librdzvworker programs under the agent authenticate with the token
    # the agent hands them (RDZV_TOKEN_FILE): two ranks form a group.
    import subprocess
    prog = os.path.join(rt.top_builddir(), "tests", "integ", "worker_check")
    if not os.path.exists(prog):
        rt.skip("tests/integ/worker_check not built (make check builds it)")
    d = daemon()
    tmp = rt.mktemp("worker-auth-")
    tok = rt.secret_file(os.path.join(tmp, "token"), TOKEN)
    argv = [os.path.join(rt.top_builddir(), "agent", "rdzv-agent"),
            "--nnodes", "1", "--nproc_per_node", "2",
            "--rdzv_endpoint", "127.0.0.1:%d" % d.port,
            "--rdzv_id", "wauth", "--token_file", tok, "--no_python",
            prog, "coll"]
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=120, start_new_session=True)
    out = (p.stdout + p.stderr).decode(errors="replace")
    assert p.returncode == 0, out[-3000:]
    assert "ok coll rank=0" in out and "ok coll rank=1" in out, out[-3000:]
    assert d.metric("rdzvd_errors_total", kind="auth") == 0


if __name__ == "__main__":
    rt.main(globals())
