# SPDX-License-Identifier: Apache-2.0
"""TLS on rdzvd's store port (PROTOCOL.md "TLS"), against the real rdzvd
with Python's ssl module as the client: the native protocol works inside
TLS (pushes, token authentication, values of several MiB, back-pressure);
--tls required refuses a plaintext native client with the NAT_PRE_TLS
preamble and changes nothing; --tls optional serves both; TCPStore is
unaffected; a client that does not trust rdzvd's certificate, a TLS client
of an rdzvd without TLS, a stalled or garbled handshake are each closed,
counted and logged with the peer, and nobody else notices; bad TLS
options stop rdzvd at start naming the file; SIGHUP rotates the
certificate for new connections."""
import hashlib
import hmac
import os
import shutil
import signal
import ssl
import time

import rdzvtest as rt

CERTS = rt.make_tls_certs()
REFUSAL = b"RDZV\x00\x02\x00\x00"          # version 0, NAT_PRE_TLS
OP_AUTH_CHALLENGE, OP_AUTH = 34, 35
TOKEN = b"tls-test-token"
CTAG, STAG = b"rdzv-auth-v1 client", b"rdzv-auth-v1 server"


def tls_daemon(*extra, mode=None, **kw):
    return rt.Rdzvd(args=list(extra), tls=CERTS, tls_mode=mode,
                    durability="memory", **kw)


def errors(d, kind):
    return d.metric("rdzvd_errors_total", kind=kind)


def local_port(sock):
    return sock.getsockname()[1]


class MemClient:
    """A TLS client whose ciphertext the test sends itself (in pieces,
    or only partly), over a plain socket."""

    def __init__(self, d, step=None):
        self.sock = d.connect()
        self.inc, self.out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.obj = rt.tls_client_context(CERTS["ca"]).wrap_bio(
            self.inc, self.out, server_hostname="127.0.0.1")
        self.step = step
        while True:
            try:
                self.obj.do_handshake()
                break
            except ssl.SSLWantReadError:
                self.push(self.out.read())
                self.pull()
        self.push(self.out.read())

    def push(self, data):
        if self.step:
            rt.send_all_slowly(self.sock, data, self.step)
        else:
            self.sock.sendall(data)

    def pull(self):
        b = self.sock.recv(65536)
        if not b:
            raise rt.PeerClosed()
        self.inc.write(b)

    def record(self, data):
        """The ciphertext of data (not sent)."""
        self.obj.write(data)
        return self.out.read()

    def read_exact(self, n):
        got = b""
        while len(got) < n:
            try:
                got += self.obj.read(n - len(got))
            except ssl.SSLWantReadError:
                self.pull()
        return got


def first_flight():
    """The bytes of a real ClientHello: a memory-BIO client's first
    flight."""
    out = ssl.MemoryBIO()
    obj = rt.tls_client_context(CERTS["ca"]).wrap_bio(
        ssl.MemoryBIO(), out, server_hostname="127.0.0.1")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    return out.read()


def test_native_over_tls_set_get_wait_push():
    d = tls_daemon()
    a, b = d.native(), d.native()
    assert isinstance(a.sock, ssl.SSLSocket)
    a.set(b"k", b"v")
    assert b.get(b"k") == b"v"
    # A blocking WAIT answered when another TLS client sets the key.
    wid = a.wait_send([b"later"])
    time.sleep(0.05)
    b.set(b"later", b"x")
    assert a.reply(wid, rt.OP_WAIT, timeout=5) == []
    # A watch push crosses TLS unprompted.
    a.watch(b"w")
    b.set(b"w", b"1")
    ev = a.next_event()
    assert ev[1] == b"w" and ev[2] == rt.WATCH_CREATED and ev[4] == b"1", ev
    assert d.metric("rdzvd_tls_connections_total") == 2
    assert d.metric("rdzvd_tls_connections") == 2
    a.close()
    rt.wait_until(lambda: d.metric("rdzvd_tls_connections") == 1,
                  what="closed TLS connection uncounted")


def test_tls12_client():
    d = tls_daemon()
    ctx = rt.tls_client_context(CERTS["ca"])
    ctx.maximum_version = ssl.TLSVersion.TLSv1_2
    s = ctx.wrap_socket(d.connect(), server_hostname="127.0.0.1")
    assert s.version() == "TLSv1.2"
    c = rt.NativeClient(s)
    v = os.urandom(1 << 20)
    c.set(b"k", v)
    assert c.get(b"k") == v
    assert d.metric("rdzvd_tls_connections_total") == 1


def test_token_auth_inside_tls():
    tmp = rt.mktemp("rdzvd-tls-")
    tok = rt.secret_file(os.path.join(tmp, "token"), TOKEN + b"\n")
    d = tls_daemon("--token-file", tok)

    def challenged():
        s = d.tls_connect()
        s.sendall(rt.nat_preamble())
        pre = rt.recv_exact(s, 8)
        assert pre[:4] == b"RDZV" and pre[4] == 1 and \
            pre[5] == rt.NAT_PRE_AUTH, pre
        c = rt.NativeClient(s, preamble=False)
        f = c.next_push()
        assert f.op == OP_AUTH_CHALLENGE
        return c, f.fields[0]

    c, sn = challenged()
    cn = os.urandom(32)
    smac = c.call(OP_AUTH, cn,
                  hmac.new(TOKEN, CTAG + sn + cn, hashlib.sha256).digest())[0]
    assert smac == hmac.new(TOKEN, STAG + cn + sn, hashlib.sha256).digest()
    c.set(b"k", b"authed")
    assert c.get(b"k") == b"authed"
    # TLS alone is not the token: unauthenticated requests are refused.
    u, _ = challenged()
    try:
        u.set(b"k", b"intruder")
        raise AssertionError("SET without the token accepted over TLS")
    except rt.RdzvError as e:
        assert e.code == rt.RDZV_EAUTH, e
    assert c.get(b"k") == b"authed"
    assert errors(d, "auth") == 1


def test_required_refuses_plaintext_native():
    d = tls_daemon()                  # required is the default
    s = d.connect()
    port = local_port(s)
    # A preamble and a SET in one segment: the SET must not be served.
    s.sendall(rt.nat_preamble() +
              rt.nat_frame(rt.OP_SET, rt.nat_fields(b"", b"k", b"plain"),
                           id=1))
    assert rt.expect_closed(s, 5) == REFUSAL
    assert errors(d, "tls_required") == 1
    assert "closing 127.0.0.1:%d: plaintext native connection refused: " \
        "TLS is required" % port in d.log_text()
    c = d.native()
    try:
        c.get(b"k")
        raise AssertionError("the refused connection's SET was served")
    except rt.RdzvError as e:
        assert e.code == rt.RDZV_ENOTFOUND, e
    # rdzvtest's client reports the refusal as RDZV_ETLS.
    try:
        d.native(tls_ca=None)
        raise AssertionError("plaintext client accepted")
    except rt.RdzvError as e:
        assert e.code == rt.RDZV_ETLS, e
    assert errors(d, "tls_required") == 2
    assert d.metric("rdzvd_tls_connections_total") == 1


def test_optional_serves_both():
    d = tls_daemon(mode="optional")
    plain, tls = d.native(tls_ca=None), d.native()
    assert not isinstance(plain.sock, ssl.SSLSocket)
    assert isinstance(tls.sock, ssl.SSLSocket)
    plain.set(b"a", b"from-plain")
    tls.set(b"b", b"from-tls")
    assert tls.get(b"a") == b"from-plain"
    assert plain.get(b"b") == b"from-tls"
    assert errors(d, "tls_required") == 0
    assert d.metric("rdzvd_tls_connections") == 1
    assert "plaintext native clients served too" in d.log_text()


def test_tcpstore_unaffected_in_both_modes():
    for mode in ("required", "optional"):
        d = tls_daemon(mode=mode)
        t1, t2 = d.tcps113(), d.tcps2()
        t1.set(b"k1", b"v1")
        t2.set(b"k2", b"v2")
        # SET has no reply: a GET on the same connection orders it before
        # the other connection reads it.
        assert t1.get(b"k1") == b"v1" and t2.get(b"k2") == b"v2"
        assert t2.get(b"k1") == b"v1" and t1.get(b"k2") == b"v2"
        n = d.native()
        assert n.get(b"k2") == b"v2"      # one store, whatever the carrier
        assert errors(d, "tls_required") == 0
        d.stop()


def test_tcpstore_inside_tls_refused():
    d = tls_daemon()
    s = d.tls_connect()
    s.sendall(rt.enc113("set", b"k", b"v"))
    rt.expect_closed(s, 5)
    assert errors(d, "malformed") == 1
    assert "only the native protocol is spoken over TLS" in d.log_text()
    assert d.native().num_keys() == 0


def test_untrusted_certificate_fails_and_is_counted():
    d = tls_daemon()
    s = d.connect()
    port = local_port(s)
    try:
        rt.tls_wrap(s, CERTS["other_ca"])
        raise AssertionError("handshake against the wrong CA passed")
    except rt.RdzvError as e:
        assert e.code == rt.RDZV_ETLS, e
        assert "certificate verify failed" in str(e), e
    rt.wait_until(lambda: errors(d, "tls_handshake") == 1,
                  what="handshake failure counted")
    # The client's alert is the reason rdzvd logs.
    assert "closing 127.0.0.1:%d: TLS handshake failed: tlsv1 alert " \
        "unknown ca" % port in d.log_text()
    assert d.metric("rdzvd_tls_connections_total") == 0
    assert d.native().num_keys() == 0
    # A certificate for another name fails the host check the same way.
    w = rt.Rdzvd(tls_cert=CERTS["wrong_host_cert"],
                 tls_key=CERTS["wrong_host_key"], durability="memory")
    try:
        rt.tls_wrap(w.connect(), CERTS["ca"])
        raise AssertionError("certificate for another host accepted")
    except rt.RdzvError as e:
        assert e.code == rt.RDZV_ETLS and "mismatch" in str(e), e
    rt.wait_until(lambda: errors(w, "tls_handshake") == 1,
                  what="host mismatch counted")


def test_tls_client_of_plain_rdzvd_closed_and_counted():
    d = rt.Rdzvd(durability="memory")
    s = d.connect()
    port = local_port(s)
    t0 = time.monotonic()
    try:
        rt.tls_wrap(s, CERTS["ca"])
        raise AssertionError("TLS handshake with a plaintext rdzvd passed")
    except rt.RdzvError as e:
        assert e.code == rt.RDZV_ETLS, e
    assert time.monotonic() - t0 < 2, "closed only after a delay"
    assert errors(d, "tls_not_configured") == 1
    assert "closing 127.0.0.1:%d: a TLS client, but rdzvd has no " \
        "--tls-cert" % port in d.log_text()
    assert d.native().ping(b"x") is not None


def test_stalled_handshake_closed_within_bound():
    d = tls_daemon("--request-timeout-ms", "600")
    hello = first_flight()
    assert hello[0] == 0x16 and len(hello) > 100
    lone = d.connect()
    lone.sendall(b"\x16")
    half = d.connect()
    half.sendall(hello[:len(hello) // 2])
    t0 = time.monotonic()
    # Meanwhile rdzvd serves everyone else.
    c = d.native()
    c.set(b"k", b"v")
    assert c.get(b"k") == b"v"
    for s in (lone, half):
        rt.expect_closed(s, 5)
    took = time.monotonic() - t0
    assert 0.4 < took < 3, "stalled handshakes closed after %.2fs" % took
    assert errors(d, "tls_handshake") == 2
    assert errors(d, "request_timeout") == 0
    assert d.log_text().count("TLS handshake incomplete after 600 ms") == 2
    assert c.get(b"k") == b"v"


def test_garbage_after_0x16_closes_only_that_connection():
    d = tls_daemon()
    c = d.native()
    c.set(b"k", b"v")
    # Random bytes, but not a plausible record header (major version 3
    # and a length past what was sent): OpenSSL rightly waits for such a
    # record's body, until the handshake deadline (the stalled test).
    for junk in (b"\x16\x99" + os.urandom(299),
                 b"\x16\x03\x01\x00\x05hello",
                 b"\x16\x03\x01\xff\xff" + b"\0" * 64):
        s = d.connect()
        s.sendall(junk)
        t0 = time.monotonic()
        rt.expect_closed(s, 5)
        assert time.monotonic() - t0 < 3, "garbage waited for the deadline"
    assert errors(d, "tls_handshake") == 3
    assert c.get(b"k") == b"v"
    assert d.metric("rdzvd_tls_connections") == 1


def test_handshake_and_records_in_pieces():
    d = tls_daemon("--request-timeout-ms", "800")
    idle = d.native()
    # Every byte of the handshake and of the requests its own segment.
    m = MemClient(d, step=7)
    m.push(m.record(rt.nat_preamble()))
    assert m.read_exact(8)[:5] == b"RDZV\x01"
    req = rt.nat_frame(rt.OP_SET, rt.nat_fields(b"", b"k", b"slow"), id=1)
    m.push(m.record(req))
    rep = m.read_exact(12)
    assert rep[8:12] == b"\x01\x00\x00\x00", rep        # id 1
    assert d.native().get(b"k") == b"slow"
    # Half a record is a started request: the request deadline applies.
    r = m.record(rt.nat_frame(rt.OP_PING, rt.nat_fields(b"p"), id=2))
    m.sock.sendall(r[:len(r) // 2])
    t0 = time.monotonic()
    rt.expect_closed(m.sock, 5)
    assert 0.5 < time.monotonic() - t0 < 4
    assert errors(d, "request_timeout") == 1
    # A TLS connection with nothing started is never timed out.
    time.sleep(0.3)
    assert idle.get(b"k") == b"slow"
    assert errors(d, "request_timeout") == 1


def test_large_values_round_trip():
    d = tls_daemon("--value-max", "16M")
    c = d.native()
    vals = [os.urandom(6 << 20), os.urandom(3 << 20), os.urandom(1)]
    # Pipelined: requests and replies of several records each, both ways.
    ids = [c.send(rt.OP_SET, b"", b"big%d" % i, v)
           for i, v in enumerate(vals)]
    for i in ids:
        assert c.reply(i, rt.OP_SET, timeout=30) == []
    gets = [c.send(rt.OP_GET, b"", b"big%d" % i) for i in range(len(vals))]
    for i, v in zip(gets, vals):
        assert c.reply(i, rt.OP_GET, timeout=30) == [v]
    other = d.native()
    assert other.get(b"big0") == vals[0]


def test_output_cap_holds_over_tls():
    d = tls_daemon("--output-max", "1M")
    c = d.native()
    v = os.urandom(512 << 10)
    c.set(b"v", v)
    # Twenty replies of 512 KiB nobody reads yet: rdzvd must stop reading.
    ids = [c.send(rt.OP_GET, b"", b"v") for _ in range(20)]
    rt.wait_until(lambda: errors(d, "output_limit") >= 1, timeout=10,
                  what="output limit reached")
    rss = d.vmrss()
    assert rss < 64 << 20, "rdzvd grew to %d bytes" % rss
    for i in ids:
        assert c.reply(i, rt.OP_GET, timeout=30) == [v]
    assert c.get(b"v") == v


def test_bad_tls_options_stop_rdzvd():
    tmp = rt.mktemp("rdzvd-tls-")
    junk = os.path.join(tmp, "junk.pem")
    with open(junk, "w") as f:
        f.write("not a certificate\n")
    missing = os.path.join(tmp, "missing.pem")
    base = ["-d", "--listen", "127.0.0.1:0", "--http", "off",
            "--durability", "memory"]
    cases = [
        (["--tls-cert", CERTS["cert"]],
         [CERTS["cert"], "needs its private key", "--tls-key"]),
        (["--tls-key", CERTS["key"]],
         [CERTS["key"], "needs the certificate", "--tls-cert"]),
        (["--tls", "optional"], ["--tls optional needs a certificate"]),
        (["--tls", "maybe", "--tls-cert", CERTS["cert"], "--tls-key",
          CERTS["key"]], ["'maybe' is not one of required, optional"]),
        (["--tls-cert", missing, "--tls-key", CERTS["key"]],
         ["cannot read TLS certificate " + missing, "No such file",
          "--tls-cert"]),
        (["--tls-cert", CERTS["cert"], "--tls-key", missing],
         ["cannot read TLS key " + missing, "--tls-key"]),
        (["--tls-cert", junk, "--tls-key", CERTS["key"]],
         ["TLS certificate " + junk]),
        (["--tls-cert", CERTS["cert"], "--tls-key", junk],
         ["TLS key " + junk]),
        (["--tls-cert", CERTS["cert"], "--tls-key", CERTS["other_key"]],
         ["TLS key " + CERTS["other_key"], "mismatch",
          "--tls-cert %s must be" % CERTS["cert"]]),
    ]
    for args, want in cases:
        rc, _, err = rt.run_rdzvd(base + args)
        assert rc == 1, (args, rc, err)
        for w in want:
            assert w in err, (args, w, err)


def test_config_file_keys():
    d = rt.Rdzvd(start=False, durability="memory")
    conf = os.path.join(d.tmpdir, "rdzvd.conf")
    with open(conf, "w") as f:
        f.write("listen = 127.0.0.1:0\nport-file = %s\nhttp = 127.0.0.1:0\n"
                "http-port-file = %s\ndurability = memory\n"
                "tls-cert = %s\ntls_key = %s\ntls = optional\n" %
                (d.port_file, d.http_port_file, CERTS["cert"], CERTS["key"]))
    d.raw, d.extra, d.tls_ca = True, ["--config", conf], CERTS["ca"]
    d.start()
    d.native().set(b"k", b"v")
    assert d.native(tls_ca=None).get(b"k") == b"v"     # optional
    with open(conf, "a") as f:
        f.write("tls-key =\n")
    rc, _, err = rt.run_rdzvd(["-d", "--config", conf])
    assert rc != 0 and "needs its private key" in err, err


def test_sighup_rotates_the_certificate():
    d = rt.Rdzvd(start=False, durability="memory")
    cert = os.path.join(d.tmpdir, "cert.pem")
    key = os.path.join(d.tmpdir, "key.pem")
    shutil.copy(CERTS["cert"], cert)
    shutil.copy(CERTS["key"], key)
    d.tls_cert, d.tls_key, d.tls_ca = cert, key, CERTS["ca"]
    d.start()
    old = d.native()
    old.set(b"k", b"v")
    shutil.copy(CERTS["other_cert"], cert)
    shutil.copy(CERTS["other_cert_key"], key)
    d.signal(signal.SIGHUP)
    rt.wait_until(lambda: "TLS certificate %s and key %s reloaded" %
                  (cert, key) in d.log_text(), what="reload logged")
    # New connections get the new certificate; the open one carries on.
    assert d.native(tls_ca=CERTS["other_ca"]).get(b"k") == b"v"
    try:
        d.native(tls_ca=CERTS["ca"])
        raise AssertionError("old CA still verifies after rotation")
    except rt.RdzvError as e:
        assert e.code == rt.RDZV_ETLS, e
    assert old.get(b"k") == b"v"
    # A broken new certificate is refused; the current one stays.
    with open(cert, "w") as f:
        f.write("garbage\n")
    d.signal(signal.SIGHUP)
    rt.wait_until(lambda: "TLS certificate not reloaded" in d.log_text(),
                  what="failed reload logged")
    assert d.running()
    assert d.native(tls_ca=CERTS["other_ca"]).get(b"k") == b"v"


if __name__ == "__main__":
    rt.main(globals())
