# SPDX-License-Identifier: Apache-2.0
"""etcd_lib: real etcd clusters on loopback for the etcd store tests.

    c = EtcdCluster(n)     members m1..mN on 127.0.0.1, .2, .3 ... with
                           ports free on each address, fast election
                           timings (heartbeat 50 ms, election 500 ms, so a
                           1 s lease is allowed); waits until it serves
    EtcdCluster(n, tls=t)  clients speak https and must show a certificate
                           (t = etcd_tls(): a CA, the members' certificate
                           and a client's, made with openssl now)
    c.endpoints            "127.0.0.1:P1,127.0.0.2:P2,..." for --store
    c.store_arg            "etcd://" + endpoints
    c.kill(i) / c.start(i) SIGKILL member i (0-based) / start it again on
                           its data directory
    c.kill_all() / c.start_all()
    c.get_prefix(prefix)   {key bytes: value bytes} through the gateway
    c.wait_serving()       until a range request succeeds
    skip_without_etcd()    skip the whole file when etcd is not installed
    etcd_rdzvd(c, ...)     an rdzvd on c (see there)
    etcd_trio(c)           three rdzvds on c, on 127.0.0.1, .2 and .3:
                           (leader, [standbys]) once both stand by
    standby_http(d)        a standby's HTTP port, once it listens
    leader_and_standby(a, b)  starts a (it leads) and b (it stands by) and
                           checks their /readyz: 200 and 503 naming a
    stands_by_saying(d, s) starts d, which cannot lead, until its log
                           says s; checks it opened no client port

Members are started with rdzvtest.spawn(), so nothing outlives the test.
"""

import base64
import json
import os
import shutil
import socket
import ssl
import urllib.request

import rdzvtest as rt

ETCD = shutil.which("etcd") or "/usr/bin/etcd"


def skip_without_etcd():
    if not os.access(ETCD, os.X_OK):
        rt.skip_all("etcd is not installed (scripts/deps.sh installs "
                    "Debian's etcd-server)")


def free_port(host):
    s = socket.socket()
    s.bind((host, 0))
    port = s.getsockname()[1]
    s.close()
    return port


def b64(b):
    return base64.b64encode(b).decode()


_ETCD_EXT = """\
[member_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, IP:127.0.0.2, IP:127.0.0.3
[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth
"""


def etcd_tls():
    """rdzvtest's test CA, a member certificate from it (127.0.0.1-3; for
    clients too: etcd's JSON gateway dials its own gRPC port with it) and
    a client certificate: {ca, cert, key, client_cert, client_key}."""
    t = rt.make_tls_certs()
    d = rt.mktemp("etcd-tls-")
    cnf = os.path.join(d, "etcd.cnf")
    with open(cnf, "w") as f:
        f.write(_ETCD_EXT)
    for name, ext, serial in (("member", "member_ext", "6"),
                              ("client", "client_ext", "7")):
        rt._openssl("req", "-new", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-keyout",
                    name + ".key", "-out", name + ".csr", "-subj",
                    "/CN=" + name, cwd=d)
        rt._openssl("x509", "-req", "-in", name + ".csr", "-CA", t["ca"],
                    "-CAkey", t["ca_key"], "-set_serial", serial, "-days",
                    "3", "-sha256", "-extfile", cnf, "-extensions", ext,
                    "-out", name + ".pem", cwd=d)
    j = lambda n: os.path.join(d, n)
    return {"ca": t["ca"], "cert": j("member.pem"), "key": j("member.key"),
            "client_cert": j("client.pem"), "client_key": j("client.key")}


class EtcdCluster:
    def __init__(self, n=1, tmpdir=None, tls=None):
        self.tls = tls
        self.scheme = "https" if tls else "http"
        self.dir = tmpdir or rt.mktemp("etcd-")
        self.hosts = ["127.0.0.%d" % (i + 1) for i in range(n)]
        self.client_ports = [free_port(h) for h in self.hosts]
        self.peer_ports = [free_port(h) for h in self.hosts]
        self.procs = [None] * n
        self.initial = ",".join("m%d=http://%s:%d" % (i + 1, h, p)
                                for i, (h, p) in enumerate(
                                    zip(self.hosts, self.peer_ports)))
        self.start_all()
        self.wait_serving()

    @property
    def endpoints(self):
        return ",".join("%s:%d" % hp
                        for hp in zip(self.hosts, self.client_ports))

    @property
    def store_arg(self):
        return "etcd://" + self.endpoints

    def start(self, i):
        h, cp, pp = self.hosts[i], self.client_ports[i], self.peer_ports[i]
        log = open(os.path.join(self.dir, "m%d.log" % (i + 1)), "ab")
        argv = [ETCD, "--name", "m%d" % (i + 1),
                "--data-dir", os.path.join(self.dir, "m%d" % (i + 1)),
                "--listen-client-urls", "%s://%s:%d" % (self.scheme, h, cp),
                "--advertise-client-urls", "%s://%s:%d" % (self.scheme, h,
                                                          cp),
                "--listen-peer-urls", "http://%s:%d" % (h, pp),
                "--initial-advertise-peer-urls", "http://%s:%d" % (h, pp),
                "--initial-cluster", self.initial,
                "--initial-cluster-state", "new",
                "--heartbeat-interval", "50", "--election-timeout", "500"]
        if self.tls:
            argv += ["--cert-file", self.tls["cert"], "--key-file",
                     self.tls["key"], "--trusted-ca-file", self.tls["ca"],
                     "--client-cert-auth"]
        self.procs[i] = rt.spawn(argv, stdout=log, stderr=log,
                                 cwd=self.dir)
        log.close()

    def start_all(self):
        for i in range(len(self.hosts)):
            self.start(i)

    def kill(self, i):
        if self.procs[i] is not None:
            rt.end(self.procs[i])
            self.procs[i] = None

    def kill_all(self):
        for i in range(len(self.hosts)):
            self.kill(i)

    def post(self, path, body, timeout=3.0, headers=None):
        last = None
        ctx = None
        if self.tls:
            ctx = ssl.create_default_context(cafile=self.tls["ca"])
            ctx.load_cert_chain(self.tls["client_cert"],
                                self.tls["client_key"])
        for h, p in zip(self.hosts, self.client_ports):
            try:
                req = urllib.request.Request(
                    "%s://%s:%d%s" % (self.scheme, h, p, path),
                    data=json.dumps(body).encode(),
                    headers=dict({"Content-Type": "application/json"},
                                 **(headers or {})))
                with urllib.request.urlopen(req, timeout=timeout,
                                            context=ctx) as r:
                    return json.loads(r.read())
            except OSError as e:
                last = e
        raise AssertionError("no etcd member answered %s: %s" % (path, last))

    def wait_serving(self, timeout=30.0):
        def ok():
            try:
                self.post("/v3/kv/range", {"key": b64(b"x")}, timeout=1.0)
                return True
            except AssertionError:
                return False
        rt.wait_until(ok, timeout, 0.1, "etcd serving")

    def get_prefix(self, prefix):
        end = prefix[:-1] + bytes([prefix[-1] + 1])
        r = self.post("/v3/kv/range", {"key": b64(prefix),
                                       "range_end": b64(end)})
        return {base64.b64decode(kv["key"]):
                base64.b64decode(kv.get("value", ""))
                for kv in r.get("kvs", [])}

    def logs(self):
        out = []
        for i in range(len(self.hosts)):
            p = os.path.join(self.dir, "m%d.log" % (i + 1))
            if os.path.exists(p):
                with open(p, errors="replace") as f:
                    out.append("--- m%d ---\n%s" % (i + 1, f.read()[-2000:]))
        return "\n".join(out)


def etcd_rdzvd(cluster, ttl_ms=1000, durability="strict", start=True,
               host="127.0.0.1", extra=()):
    """An rdzvd on cluster (strict by default) listening on host at a port
    chosen now (clients must know a standby's address before it listens:
    d.endpoint); with start=True waits until it leads (its port file
    appears)."""
    d = rt.Rdzvd(["--store", cluster.store_arg, "--leader-ttl-ms",
                  str(ttl_ms)] + list(extra), durability=durability,
                 start=False, ready_timeout=30.0)
    d.host = host
    d.endpoint = "%s:%d" % (host, free_port(host))
    d.extra = ["--listen", d.endpoint] + d.extra
    if start:
        d.start()
    return d


def standby_http(d):
    """The standby d's HTTP port, once it listens (before it leads)."""
    rt.wait_until(lambda: os.path.exists(d.http_port_file), 20, 0.02,
                  "the standby's http port file")
    d.http_port = d._read_port(d.http_port_file)
    return d


TRIO_HOSTS = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]


def etcd_trio(cluster, timeout=20):
    """Three rdzvds on cluster, one per address of TRIO_HOSTS; returns
    (leader, [standbys]) once the first leads and the others have said,
    within timeout seconds, whom they stand by for."""
    ds = [etcd_rdzvd(cluster, host=h, start=False) for h in TRIO_HOSTS]
    ds[0].start()
    for d in ds[1:]:
        d.start(wait=False)
    for d in ds[1:]:
        rt.wait_until(lambda: "standing by" in d.log_text(), timeout,
                      what="a standby")
    return ds[0], ds[1:]


def leader_and_standby(a, b):
    """Starts a, which leads, then b, which stands by; their /readyz say
    so (b's names a's address)."""
    a.start()
    b.start(wait=False)
    rt.wait_until(lambda: "standing by" in b.log_text(), 20, what="standby")
    standby_http(b)
    st, body, _ = a.http_get("/readyz")
    assert st == 200, (st, body)
    st, body, _ = b.http_get("/readyz")
    assert st == 503 and a.endpoint.encode() in body, (st, body)


def stands_by_saying(d, says):
    """Starts d, which cannot reach or use etcd, until its log says
    `says`; it opened no client port; stops it."""
    d.start(wait=False)
    rt.wait_until(lambda: says in d.log_text(), 30,
                  what="rdzvd saying %r" % says)
    assert not os.path.exists(d.port_file)
    assert d.stop() == 0, d.diagnostics()
