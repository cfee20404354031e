# SPDX-License-Identifier: Apache-2.0
"""etcd_store: rdzvd --store etcd:// on one real etcd member (127.0.0.1).

  - every kind of write (SET, ADD many times in one batch, queues,
    namespaces and their drop, a value near 1 MiB) is back after kill -9
    and a new rdzvd on the same etcd;
  - the whole etcd down: rdzvd says so in its log and exits (it cannot
    vouch for its leadership); a writer that logged every acknowledged
    SET finds each of them once etcd and a new rdzvd are back;
  - bad --store arguments are refused with the cause and the fix;
  - a secured etcd: https with client certificates (a CA made by openssl
    now): rdzvd with --etcd-cacert/--etcd-cert/--etcd-key leads and its
    writes are in etcd; without its certificate it cannot reach etcd and
    says so, standing by; etcd's authentication: --etcd-user and
    --etcd-password-file lead, a wrong password is refused and said so;
  - etc/rdzvd-etcd.conf (the three-host layout's settings) with this
    machine's addresses: two rdzvds on it, one leads (/readyz 200), the
    other stands by (/readyz 503 naming the leader).
"""

import base64
import os
import re
import threading

import rdzvtest as rt
from etcd_lib import (EtcdCluster, b64, etcd_rdzvd, etcd_tls,
                      leader_and_standby, skip_without_etcd,
                      stands_by_saying)

DEPOSED = 75    # rdzvd's exit status when it can no longer lead


class AckLog:
    """A thread SETting k0, k1, ... until the connection fails; acked
    holds each key whose reply arrived."""

    def __init__(self, d, prefix=b"k"):
        self.d, self.prefix = d, prefix
        self.acked = []
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        try:
            c = self.d.native(timeout=20)
            n = 0
            while True:
                k = b"%s%d" % (self.prefix, n)
                c.set(k, b"v" + k)
                self.acked.append(k)
                n += 1
        except (rt.PeerClosed, rt.RdzvError, OSError):
            pass

    def join(self, timeout=60):
        self.t.join(timeout)
        assert not self.t.is_alive(), "writer still running"


def check_acked(d, keys):
    c = d.native()
    missing = [k for k in keys if c.get(k) != b"v" + k]
    assert not missing, "%d acknowledged keys lost, first %r" % (
        len(missing), missing[:3])


def test_everything_survives_kill9():
    etcd = EtcdCluster(1)
    d = etcd_rdzvd(etcd)
    c = d.native()
    # More than one page (128 keys) to load.
    for i in range(300):
        c.set(b"k%d" % i, b"v%d" % i)
    # Many ADDs to one key land in few batches: one key per etcd txn.
    ts = [threading.Thread(target=lambda: [d.native().add(b"ctr", 1)
                                           for _ in range(50)])
          for _ in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    for v in (b"a", b"b", b"c"):
        c.queue_push(b"q", v)
    assert c.queue_pop(b"q") == b"a"
    c.set(b"big", b"x" * 1000000)
    c.set(b"gone", b"1", ns=b"job-dropped")
    c.set(b"kept", b"1", ns=b"job-kept")
    c.queue_push(b"q", b"z", ns=b"job-kept")
    rdzv_keys = etcd.get_prefix(b"/rdzv/kv/")
    assert any(k.endswith(b"/k7") for k in rdzv_keys), list(rdzv_keys)[:5]
    d.kill9()

    d2 = etcd_rdzvd(etcd)
    c = d2.native()
    assert [c.get(b"k%d" % i) for i in range(300)] == [b"v%d" % i
                                                      for i in range(300)]
    assert c.add(b"ctr", 0) == 200
    assert c.queue_len(b"q") == 2
    assert c.queue_pop(b"q") == b"b"
    c.queue_push(b"q", b"d")
    assert len(c.get(b"big")) == 1000000
    assert c.get(b"kept", ns=b"job-kept") == b"1"
    assert c.queue_pop(b"q", ns=b"job-kept") == b"z"
    d2.stop()
    # The order of a queue survives a second generation too.
    d3 = etcd_rdzvd(etcd)
    c = d3.native()
    assert c.queue_pop(b"q") == b"c"
    assert c.queue_pop(b"q") == b"d"
    assert c.queue_len(b"q") == 0
    d3.stop()


def test_etcd_down():
    etcd = EtcdCluster(1)
    d = etcd_rdzvd(etcd)
    w = AckLog(d)
    rt.wait_until(lambda: len(w.acked) > 100, 20, what="writes acked")
    etcd.kill_all()
    rc = d.wait(30)
    assert rc == DEPOSED, "rdzvd exit status %r\n%s" % (rc, d.diagnostics())
    w.join()
    log = d.log_text()
    assert "cannot reach" in log or "keepalive failed" in log or \
        "commit failed" in log, log[-3000:]
    assert "no longer the leader" in log, log[-3000:]
    etcd.start_all()
    etcd.wait_serving()
    d.start()
    check_acked(d, w.acked)
    d.stop()


def test_bad_store_arguments():
    for args, want in (
            (["--store", "http://127.0.0.1:2379"], "expected etcd://"),
            (["--store", "etcd://127.0.0.1"], "127.0.0.1"),
            (["--store", "etcd://127.0.0.1:2379", "--durability",
              "memory"], "choose relaxed or strict"),
            (["--store", "etcd://127.0.0.1:2379", "--leader-ttl-ms",
              "500"], "1000 or more"),
            (["--store", "etcd://127.0.0.1:2379", "--etcd-cert", "x"],
             "--etcd-key")):
        rc, out, err = rt.run_rdzvd(["-d"] + args)
        assert rc != 0 and want in err, (args, rc, err)


def test_etcd_tls():
    tls = etcd_tls()
    etcd = EtcdCluster(1, tls=tls)
    d = etcd_rdzvd(etcd, extra=["--etcd-cacert", tls["ca"], "--etcd-cert",
                                tls["client_cert"], "--etcd-key",
                                tls["client_key"]])
    d.native().set(b"over-tls", b"1")
    assert any(k.endswith(b"/over-tls") for k in
               etcd.get_prefix(b"/rdzv/kv/")), "the write is not in etcd"
    assert d.stop() == 0, d.diagnostics()
    # No client certificate: etcd refuses the handshake; rdzvd says so
    # and waits, leading nothing.
    stands_by_saying(etcd_rdzvd(etcd, start=False, extra=[
        "--etcd-cacert", tls["ca"]]), "cannot reach the cluster")


def test_etcd_auth():
    etcd = EtcdCluster(1)
    etcd.post("/v3/auth/user/add", {"name": "root", "password": "rootpw"})
    etcd.post("/v3/auth/user/grant", {"user": "root", "role": "root"})
    etcd.post("/v3/auth/enable", {})
    tmp = rt.mktemp("etcd-auth-")
    good, wrong = os.path.join(tmp, "good"), os.path.join(tmp, "wrong")
    for path, pw in ((good, "rootpw\n"), (wrong, "nope\n")):
        rt.secret_file(path, pw)
    d = etcd_rdzvd(etcd, extra=["--etcd-user", "root",
                                "--etcd-password-file", good])
    d.native().set(b"authed", b"1")
    tok = etcd.post("/v3/auth/authenticate", {"name": "root",
                                              "password": "rootpw"})["token"]
    r = etcd.post("/v3/kv/range", {"key": b64(b"/rdzv/kv/"),
                                   "range_end": b64(b"/rdzv/kv0")},
                  headers={"Authorization": tok})
    assert any(base64.b64decode(kv["key"]).endswith(b"/authed")
               for kv in r.get("kvs", [])), r
    rc = d.stop()
    assert rc == 0, (rc, d.diagnostics())
    stands_by_saying(etcd_rdzvd(etcd, start=False, extra=[
        "--etcd-user", "root", "--etcd-password-file", wrong]),
        "refused user root")


def test_three_host_config():
    etcd = EtcdCluster(1)
    with open(os.path.join(rt.top_srcdir(), "etc", "rdzvd-etcd.conf")) as f:
        conf = f.read()
    ds = []
    for host in ("127.0.0.1", "127.0.0.2"):
        d = etcd_rdzvd(etcd, host=host, start=False)
        text = re.sub(r"^store = .*$", "store = " + etcd.store_arg, conf,
                      flags=re.M)
        text = re.sub(r"^listen = .*$", "listen = " + d.endpoint, text,
                      flags=re.M)
        text = re.sub(r"^http = .*$", "http = 127.0.0.1:0", text,
                      flags=re.M)
        # etcd_lib's members allow a 1 s lease: quicker to stop.
        text = re.sub(r"^leader-ttl-ms = .*$", "leader-ttl-ms = 1000",
                      text, flags=re.M)
        path = os.path.join(d.tmpdir, "rdzvd-etcd.conf")
        with open(path, "w") as f:
            f.write(text)
        d.raw = True
        d.extra = ["--config", path, "--port-file", d.port_file,
                   "--http-port-file", d.http_port_file, "--log-file",
                   os.path.join(d.tmpdir, "rdzvd.log")]
        ds.append(d)
    leader_and_standby(*ds)
    c = ds[0].native()
    c.set(b"k", b"v")
    assert c.get(b"k") == b"v"
    for d in ds:
        assert d.stop() == 0, d.diagnostics()


if __name__ == "__main__":
    skip_without_etcd()
    rt.main(globals(), per_test=120.0, total=400.0)
