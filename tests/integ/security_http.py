# SPDX-License-Identifier: Apache-2.0
"""The HTTP side's credential (doc/security.md): the native secret is never
accepted over HTTP; the page and /api/ take a viewer secret of their own
(--http-token-file) as a Bearer header or as the HttpOnly, SameSite=Strict
cookie the login form sets; /healthz, /readyz and /metrics stay open;
--http-tls on serves it all over TLS with the native port's certificate;
the default HTTP bind is loopback.  In headless Chromium (driven over the
DevTools protocol): the page sends a browser to the form, a wrong secret
is refused, the right one signs in and the page's data loads."""
import base64
import http.client
import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import sys
import time
import urllib.parse

import rdzvtest as rt

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import security_jobs as sj  # noqa: E402

VIEWER = b"viewer-secret-for-tests"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def daemon(*extra, viewer=VIEWER, native=True, tls=None):
    tmp = rt.mktemp("rdzvd-http-")
    args = list(extra)
    if native:
        args += ["--token-file", sj.write(os.path.join(tmp, "secret"),
                                          sj.SECRET + b"\n")]
    if viewer is not None:
        args += ["--http-token-file",
                 sj.write(os.path.join(tmp, "viewer"), viewer + b"\n")]
    return rt.Rdzvd(args=args, tls=tls)


def req(d, path, method="GET", headers=None, body=None, tls_ca=None):
    """(status, headers, body) of one request to d's HTTP port."""
    if tls_ca:
        ctx = ssl.create_default_context(cafile=tls_ca)
        c = http.client.HTTPSConnection("127.0.0.1", d.http_port, timeout=5,
                                        context=ctx)
    else:
        c = http.client.HTTPConnection("127.0.0.1", d.http_port, timeout=5)
    try:
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return r.status, r.headers, r.read()
    finally:
        c.close()


def bearer(tok):
    return {"Authorization": "Bearer " + tok.decode()}


def login(d, secret):
    return req(d, "/login", "POST", {
        "Content-Type": "application/x-www-form-urlencoded"},
        urllib.parse.urlencode({"token": secret.decode()}))


def test_viewer_secret_opens_the_page_native_never():
    d = daemon()
    op = sj.as_operator(d)
    sj.join(op, b"jobV")
    for path in ("/api/status", "/api/jobs", "/api/jobs/jobV", "/"):
        st, _, body = req(d, path, headers=bearer(VIEWER))
        assert st == 200, (path, st, body)
    assert b"jobV" in req(d, "/api/jobs", headers=bearer(VIEWER))[2]
    n = 0
    for path in ("/api/status", "/api/jobs", "/api/jobs/jobV"):
        for h in (bearer(sj.SECRET), bearer(b"guess"), {},
                  {"Cookie": "rdzv_view=" + "0" * 64}):
            st, hdr, body = req(d, path, headers=h)
            assert st == 401, (path, h, st)
            assert "Bearer" in hdr["WWW-Authenticate"]
            assert b"jobV" not in body
            n += 1
    # A browser without the cookie is sent to the form; a wrong
    # credential on the page is refused.
    st, hdr, _ = req(d, "/")
    assert st == 303 and hdr["Location"] == "/login", (st, hdr)
    assert req(d, "/", headers=bearer(sj.SECRET))[0] == 401
    n += 1
    assert d.metric("rdzvd_errors_total", kind="forbidden") == n
    for path in ("/healthz", "/readyz", "/metrics"):
        assert req(d, path)[0] == 200, path


def test_login_sets_a_strict_httponly_cookie():
    d = daemon()
    st, _, body = req(d, "/login")
    assert st == 200 and b'name=token' in body and b"type=password" in body
    st, hdr, body = login(d, sj.SECRET)       # the native one: refused
    assert st == 401 and b"Wrong viewer secret" in body, (st, body)
    assert "Set-Cookie" not in hdr
    assert d.metric("rdzvd_errors_total", kind="forbidden") == 1
    st, hdr, _ = login(d, VIEWER)
    assert st == 303 and hdr["Location"] == "/", (st, hdr)
    cookie = hdr["Set-Cookie"]
    for attr in ("HttpOnly", "SameSite=Strict", "Path=/"):
        assert attr in cookie, cookie
    assert VIEWER.decode() not in cookie     # a MAC, not the secret
    pair = cookie.split(";")[0]
    st, _, body = req(d, "/api/status", headers={"Cookie": "a=b; " + pair})
    assert st == 200 and b"version" in body, (st, body)
    # The cookie is this rdzvd's: a restart signs everyone out.
    d.restart()
    assert req(d, "/api/status", headers={"Cookie": pair})[0] == 401
    # Only /login takes a POST.
    assert req(d, "/api/status", "POST", bearer(VIEWER), b"x")[0] == 405


def test_native_token_alone_closes_the_page():
    d = daemon(viewer=None)
    st, _, body = req(d, "/api/status", headers=bearer(sj.SECRET))
    assert st == 401 and b"--http-token-file" in body, (st, body)
    st, _, body = login(d, sj.SECRET)
    assert st == 403 and b"--http-token-file" in body, (st, body)
    # Without any secret the page is open, as it always was.
    d2 = daemon(viewer=None, native=False)
    assert req(d2, "/api/status")[0] == 200


def test_viewer_secret_must_not_be_the_native_one():
    tmp = rt.mktemp("rdzvd-http-")
    tok = sj.write(os.path.join(tmp, "t"), sj.SECRET + b"\n")
    rc, _, err = rt.run_rdzvd(["-d", "--listen", "127.0.0.1:0", "--http",
                               "127.0.0.1:0", "--durability", "memory",
                               "--token-file", tok, "--http-token-file",
                               tok])
    assert rc == 1 and "holds the native token" in err, err


def test_http_default_bind_is_loopback():
    rc, out, err = rt.run_rdzvd(["--help"])
    assert "--http HOST:PORT|off" in out + err
    assert "(default 127.0.0.1:29401)" in out + err, out + err


def test_http_tls():
    tmp = rt.mktemp("rdzvd-http-tls-")
    certs = rt.make_tls_certs(tmp)
    d = daemon("--http-tls", "on", tls=certs)
    ca = certs["ca"]
    st, _, body = req(d, "/api/status", headers=bearer(VIEWER), tls_ca=ca)
    assert st == 200 and b"version" in body, (st, body)
    assert req(d, "/healthz", tls_ca=ca)[0] == 200
    c = http.client.HTTPSConnection(
        "127.0.0.1", d.http_port, timeout=5,
        context=ssl.create_default_context(cafile=ca))
    c.request("POST", "/login", body="token=" + VIEWER.decode(), headers={
        "Content-Type": "application/x-www-form-urlencoded"})
    r = c.getresponse()
    assert r.status == 303 and "; Secure" in r.headers["Set-Cookie"]
    c.close()
    # Plaintext HTTP gets no page from a TLS port.
    try:
        st = req(d, "/healthz")[0]
        raise AssertionError("plaintext HTTP answered %s" % st)
    except (http.client.HTTPException, OSError):
        pass
    # A CA that did not sign it: the client refuses.
    try:
        req(d, "/healthz", tls_ca=certs["other_ca"])
        raise AssertionError("an unknown CA was trusted")
    except ssl.SSLError:
        pass
    rc, _, err = rt.run_rdzvd(["-d", "--listen", "127.0.0.1:0",
                               "--durability", "memory", "--http-tls", "on"])
    assert rc != 0 and "needs a certificate" in err, err


# ---- headless Chromium over the DevTools protocol ----

class DevToolsError(AssertionError):
    """An error answer from DevTools (the whole answer is its text)."""


class DevTools:
    """A minimal client of Chromium's DevTools websocket (RFC 6455 text
    frames, masked as a client must)."""

    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port),
                                             timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((
            "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\n"
            "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
            "Sec-WebSocket-Version: 13\r\n\r\n" % (u.path, u.hostname,
                                                   u.port, key)).encode())
        buf = b""
        while b"\r\n\r\n" not in buf:
            chunk = self.sock.recv(4096)
            assert chunk, "DevTools closed during the upgrade"
            buf += chunk
        head, self.buf = buf.split(b"\r\n\r\n", 1)
        assert b" 101 " in head.split(b"\r\n")[0], head
        self.id = 0

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            assert chunk, "DevTools closed"
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _send(self, obj):
        data = json.dumps(obj).encode()
        mask = os.urandom(4)
        n = len(data)
        if n < 126:
            head = struct.pack("!BB", 0x81, 0x80 | n)
        elif n < 65536:
            head = struct.pack("!BBH", 0x81, 0x80 | 126, n)
        else:
            head = struct.pack("!BBQ", 0x81, 0x80 | 127, n)
        body = bytes(b ^ mask[i % 4] for i, b in enumerate(data))
        self.sock.sendall(head + mask + body)

    def _recv(self):
        msg = b""
        while True:
            b0, b1 = self._read(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read(8))[0]
            payload = self._read(n)
            if b0 & 0x0F in (0x9, 0xA):      # ping, pong: not ours
                continue
            msg += payload
            if b0 & 0x80:
                return json.loads(msg)

    # What Chromium answers an evaluation that met a navigation (the
    # page's own redirect to /login, a form's submit): not yet, ask again.
    NAVIGATING = ("navigated or closed", "context was destroyed",
                  "Cannot find context")

    def call(self, method, **params):
        self.id += 1
        self._send({"id": self.id, "method": method, "params": params})
        while True:
            m = self._recv()
            if m.get("id") == self.id:
                if "error" in m:
                    raise DevToolsError(m)
                return m.get("result", {})

    def js(self, expr):
        r = self.call("Runtime.evaluate", expression=expr,
                      returnByValue=True)
        return r.get("result", {}).get("value")

    def until(self, expr, what, timeout=30.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if self.js(expr):
                    return
            except DevToolsError as e:
                if not any(w in str(e) for w in self.NAVIGATING):
                    raise
            time.sleep(0.1)
        raise AssertionError("page: %s not seen in %ds (at %s: %s)" % (
            what, timeout, self.js("location.href"),
            self.js("document.body&&document.body.innerText")))


def browser(tls=False):
    """A headless Chromium with DevTools on a free port; its page's
    DevTools client.  tls: it takes the test CA's certificates (the
    test's own CA is no system one)."""
    tmp = rt.mktemp("chromium-")
    prof = os.path.join(tmp, "profile")
    extra = ["--ignore-certificate-errors"] if tls else []
    p = rt.spawn([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                  "--disable-dev-shm-usage", "--no-first-run",
                  "--user-data-dir=" + prof, "--remote-debugging-port=0"] +
                 extra + ["about:blank"], stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL, cwd=tmp)
    portfile = os.path.join(prof, "DevToolsActivePort")
    rt.wait_until(lambda: os.path.exists(portfile) and
                  open(portfile).read().count("\n") >= 1, 30,
                  what="Chromium's DevTools port")
    port = int(open(portfile).read().split("\n")[0])
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/json/list")
    pages = [t for t in json.loads(c.getresponse().read())
             if t.get("type") == "page"]
    c.close()
    assert pages, "no page target"
    return p, DevTools(pages[0]["webSocketDebuggerUrl"])


def _sign_in(tls):
    """Chromium at the page (over HTTPS with tls): sent to the login
    form, the native secret refused there, the viewer secret signs in and
    the page's job table loads; the cookie is HttpOnly, SameSite=Strict
    (and Secure over HTTPS)."""
    if CHROMIUM is None:
        rt.skip("chromium is not installed (scripts/deps.sh installs it)")
    certs = rt.make_tls_certs(rt.mktemp("rdzvd-page-tls-")) if tls else None
    d = daemon(*(["--http-tls", "on"] if tls else []), tls=certs)
    op = sj.as_operator(d)
    sj.join(op, b"page-job")
    p, dt = browser(tls)
    try:
        base = "%s://127.0.0.1:%d" % ("https" if tls else "http",
                                      d.http_port)
        dt.call("Page.navigate", url=base + "/")
        dt.until("location.pathname==='/login'&&"
                 "!!document.getElementById('token')", "the login form")
        dt.js("document.getElementById('token').value=%s;"
              "document.getElementById('signin').click()" %
              json.dumps(sj.SECRET.decode()))
        dt.until("document.getElementById('err')&&document.getElementById("
                 "'err').textContent.indexOf('Wrong viewer secret')>=0",
                 "the refusal of the native secret")
        dt.js("document.getElementById('token').value=%s;"
              "document.getElementById('signin').click()" %
              json.dumps(VIEWER.decode()))
        dt.until("location.pathname==='/'&&!!document.getElementById('jobs')"
                 "&&document.getElementById('jobs').textContent.indexOf("
                 "'page-job')>=0", "the job in the page's table")
        assert dt.js("document.getElementById('err').textContent") == ""
        assert dt.js("document.cookie") == ""      # HttpOnly: not for JS
        cookies = dt.call("Network.getCookies", urls=[base + "/"])
        got = [c for c in cookies["cookies"] if c["name"] == "rdzv_view"]
        assert len(got) == 1, cookies
        assert got[0]["httpOnly"] and got[0]["sameSite"] == "Strict", got
        assert got[0]["secure"] == tls, got
    finally:
        rt.end(p)
    st, _, body = req(d, "/metrics", tls_ca=certs["ca"] if tls else None)
    assert st == 200, st
    n = rt.metric_value(rt.parse_metrics(body.decode())[0],
                        "rdzvd_errors_total", 0.0, kind="forbidden")
    assert n == 1, n


def test_browser_signs_in_and_the_page_loads():
    _sign_in(tls=False)


def test_browser_over_https():
    _sign_in(tls=True)


if __name__ == "__main__":
    rt.main(globals())
