# SPDX-License-Identifier: Apache-2.0
"""Job credentials (doc/security.md, PROTOCOL.md "Authentication"): one
rdzvd for many jobs, each job's nodes holding only their job's
credential, derived from the operator's secret.  A worker of job A with
A's credential tries every native op against job B, the root keyspace,
rdzvd's own spaces and the operator's ops: each is refused with an EAUTH
reply that says why, counted in rdzvd_errors_total{kind="forbidden"}, and
nothing of B changes; A's own rounds, keys, events and status work.  A
forged credential and a replayed handshake are refused.  rdzvctl
credential writes what rdzvd derives; rdzvd refuses a job credential as
its own secret; rdzv-agent takes either kind and hands its workers the
job's credential only, and refuses one of another job; a training script
under the agent cannot close or evict another job with what it was
given.  Unmodified TCPStore clients are refused on a round's port too
unless --tcpstore-allow lists them, and then reach that round only."""
import hashlib
import hmac
import os
import subprocess
import sys

import rdzvtest as rt

OP = dict(PING=1, SET=2, GET=3, ADD=4, CAS=5, WAIT=6, CHECK=7, DELETE=8,
          NUM_KEYS=9, APPEND=10, MULTI_GET=11, MULTI_SET=12, QUEUE_PUSH=13,
          QUEUE_POP=14, QUEUE_LEN=15, LIST_KEYS=16, BARRIER=17, WATCH=19,
          JOIN=21, HEARTBEAT=22, LEAVE=23, FAILURE=24, SUCCEEDED=25,
          ROUND=26, JOB_STATUS=27, ADMIN_STATUS=28, ADMIN_JOBS=29,
          ADMIN_JOB=30, ADMIN_EVENTS=31, ADMIN_CLOSE=32, ADMIN_EVICT=33,
          AUTH_CHALLENGE=34, AUTH=35, READY=36, ADMIN_FORGET=39)
EAUTH, ENOTFOUND = -10, -4
RUNNING = 1
SECRET = b"operator-secret-for-security-tests"
CTAG, STAG = b"rdzv-auth-v1 client", b"rdzv-auth-v1 server"
HEADER = b"rdzv job credential v1"
FIELDS = ("job", "round", "state", "node_id", "group_rank",
          "group_world_size", "world_size", "rank_base", "restart_count",
          "max_restarts", "store_ns", "store_port", "message")


def job_key(job, secret=SECRET):
    return hmac.new(secret, HEADER + b"\0" + job, hashlib.sha256).digest()


def mac(key, tag, a, b):
    return hmac.new(key, tag + a + b, hashlib.sha256).digest()


def write(path, data):
    return rt.secret_file(path, data)


def daemon():
    tmp = rt.mktemp("rdzvd-sec-")
    d = rt.Rdzvd(args=["--token-file",
                       write(os.path.join(tmp, "secret"), SECRET + b"\n")])
    d.secret_file = os.path.join(tmp, "secret")
    return d


def ctl(*args):
    argv = [os.path.join(rt.top_builddir(), "client", "rdzvctl")]
    p = subprocess.run(argv + list(args), capture_output=True, timeout=30,
                       stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr.decode(errors="replace")


def challenge(d):
    """A connection past the preamble, and rdzvd's nonce."""
    s = rt.connect(d.host, d.port)
    if d.tls_ca:		# a TLS port: the handshake comes first
        s = rt.tls_wrap(s, d.tls_ca)
    s.sendall(rt.nat_preamble())
    pre = rt.recv_exact(s, 8)
    assert pre[:4] == b"RDZV" and pre[5] == 1, pre
    c = rt.NativeClient(s, preamble=False)
    f = c.next_push()
    assert f.op == OP["AUTH_CHALLENGE"] and len(f.fields[0]) == 32
    return c, f.fields[0]


def as_job(d, job, key=None):
    """A native connection that proved job's credential."""
    key = key or job_key(job)
    c, sn = challenge(d)
    cn = os.urandom(32)
    smac = c.call(OP["AUTH"], cn, mac(key, CTAG, sn, cn), job)[0]
    assert smac == mac(key, STAG, cn, sn), "rdzvd's proof is wrong"
    return c


def as_operator(d):
    c, sn = challenge(d)
    cn = os.urandom(32)
    c.call(OP["AUTH"], cn, mac(SECRET, CTAG, sn, cn))
    return c


def join(c, job):
    """JOINs a one-node job on c; its node id and first round."""
    node = c.call(OP["JOIN"], job, os.urandom(8).hex(), "h-" + job.decode(),
                  "127.0.0.1", os.getpid(), 1, 1, 1, 0, 0, 60000)[0]
    f = c.next_push(10.0)
    assert f.op == OP["ROUND"], f
    r = dict(zip(FIELDS, f.fields))
    assert r["state"] == RUNNING, r
    return node, r


def refused(c, op, *fields):
    """op is refused on c with a reason, and c still serves."""
    try:
        c.call(OP[op], *fields)
        raise AssertionError("%s %r was not refused" % (op, fields))
    except rt.RdzvError as e:
        assert e.code == EAUTH, (op, e)
        assert "credential" in str(e), (op, e)
    assert c.ping(b"still") == b"still"


def test_rdzvctl_credential_is_what_rdzvd_derives():
    d = daemon()
    rc, out, err = ctl("--token-file", d.secret_file, "credential", "jobA")
    assert rc == 0, err
    assert out == HEADER + b"\njob jobA\nkey " + \
        job_key(b"jobA").hex().encode() + b"\n", out
    path = os.path.join(rt.mktemp("cred-"), "a.cred")
    rc, _, err = ctl("--token-file", d.secret_file, "credential", "jobA",
                     "--out", path)
    assert rc == 0, err
    assert open(path, "rb").read() == out
    assert os.stat(path).st_mode & 0o777 == 0o600
    # Only the operator's secret derives: a credential cannot.
    rc, _, err = ctl("--token-file", path, "credential", "jobB")
    assert rc != 0 and "job credential" in err, err
    rc, _, err = ctl("--token-file", d.secret_file, "credential", "a b")
    assert rc == 2 and "not a job id" in err, err


def test_own_job_works():
    d = daemon()
    c = as_job(d, b"jobA")
    node, r = join(c, b"jobA")
    ns = r["store_ns"]
    assert ns == b"jobA".join([b"job/", b"/round/1"]), ns
    c.set(b"k", b"v", ns=ns)
    assert c.get(b"k", ns=ns) == b"v"
    assert c.add(b"n", 2, ns=ns) == 2
    assert c.list_keys(ns=ns) == [b"k", b"n"] or \
        sorted(c.list_keys(ns=ns)) == [b"k", b"n"]
    assert c.call(OP["HEARTBEAT"], b"jobA", node)[0] == 1
    assert b"jobA" in c.call(OP["ADMIN_JOB"], b"jobA")[0]
    assert b"text" in c.call(OP["ADMIN_EVENTS"], b"jobA", -1, 0)[0]
    c.call(OP["JOB_STATUS"], b"jobA")
    assert d.metric("rdzvd_errors_total", kind="forbidden") == 0
    # rdzvctl with A's credential reads A's job.
    path = write(os.path.join(rt.mktemp("cred-"), "a"), HEADER +
                 b"\njob jobA\nkey " + job_key(b"jobA").hex().encode())
    rc, out, err = ctl("-e", "127.0.0.1:%d" % d.port, "--token-file", path,
                       "members", "jobA")
    assert rc == 0 and b"h-jobA" in out, (rc, out, err)


def test_other_job_refused_nothing_changed():
    d = daemon()
    op = as_operator(d)
    bnode, rb = join(op, b"jobB")
    bns = rb["store_ns"]
    op.set(b"secret", b"B's", ns=bns)
    op.set(b"root", b"operator's", ns=b"")
    a = as_job(d, b"jobA")
    anode, ra = join(a, b"jobA")
    # A job whose id starts with A's: "job/jobA/x/round/1" is its round.
    xnode, rx = join(op, b"jobA/x")
    before = d.metric("rdzvd_errors_total", kind="forbidden")
    n = 0
    for ns in (bns, b"", b"job/jobA", b"job/jobA/other", rx["store_ns"],
               ra["store_ns"] + b"/sub", b"\0events"):
        refused(a, "SET", ns, b"secret", b"A was here")
        refused(a, "GET", ns, b"secret")
        refused(a, "ADD", ns, b"n", 1)
        refused(a, "CAS", ns, b"secret", b"B's", b"A's")
        refused(a, "DELETE", ns, b"secret")
        refused(a, "NUM_KEYS", ns)
        refused(a, "APPEND", ns, b"secret", b"+A")
        refused(a, "MULTI_GET", ns, 1, b"secret")
        refused(a, "MULTI_SET", ns, 1, b"secret", b"A")
        refused(a, "QUEUE_PUSH", ns, b"q", b"A")
        refused(a, "QUEUE_POP", ns, b"q", 0)
        refused(a, "QUEUE_LEN", ns, b"q")
        refused(a, "LIST_KEYS", ns)
        refused(a, "BARRIER", ns, b"bar", 2, 0)
        refused(a, "WAIT", ns, 0, 1, b"secret")
        refused(a, "CHECK", ns, 1, b"secret")
        refused(a, "WATCH", ns, b"secret")
        n += 17
    # The rendezvous ops of job B, and the operator's.
    for args in (("JOIN", b"jobB", "i", "h", "127.0.0.1", 1, 1, 1, 1, 0, 0,
                  60000),
                 ("HEARTBEAT", b"jobB", bnode),
                 ("LEAVE", b"jobB", bnode),
                 ("FAILURE", b"jobB", bnode, 1, 0, 0, 1, 0, b"A says so"),
                 ("SUCCEEDED", b"jobB", bnode, 1),
                 ("READY", b"jobB", bnode, 1, 0),
                 ("JOB_STATUS", b"jobB"),
                 ("ADMIN_JOB", b"jobB"),
                 ("ADMIN_EVENTS", b"jobB", -1, 0),
                 ("ADMIN_CLOSE", b"jobB", b"closed by A"),
                 ("ADMIN_EVICT", b"jobB", bnode, 1),
                 ("ADMIN_EVICT", b"jobA", anode, 1),
                 ("ADMIN_FORGET", b"jobB"),
                 ("ADMIN_FORGET", b"jobA"),
                 ("ADMIN_STATUS",),
                 ("ADMIN_JOBS",)):
        refused(a, *args)
        n += 1
    assert d.metric("rdzvd_errors_total", kind="forbidden") == before + n
    assert "refused op" in d.log_text()
    # Nothing of B, the root or A/x changed; B still runs.
    assert op.get(b"secret", ns=bns) == b"B's"
    assert op.get(b"root", ns=b"") == b"operator's"
    assert op.list_keys(ns=bns) == [b"secret"]
    for ns in (b"job/jobA", b"job/jobA/other", rx["store_ns"]):
        assert op.num_keys(ns=ns) == 0, ns
    assert op.call(OP["HEARTBEAT"], b"jobB", bnode)[0] == 1
    assert b'"running"' in op.call(OP["ADMIN_JOB"], b"jobB")[0]
    assert op.call(OP["HEARTBEAT"], b"jobA", anode)[0] == 1
    # The operator's secret still reaches everything.
    assert b"jobB" in op.call(OP["ADMIN_JOBS"])[0]
    # A refusal says what was refused in an operator's words.
    try:
        a.call(OP["ADMIN_FORGET"], b"jobB")
    except rt.RdzvError as e:
        assert "rdzvctl forget" in str(e) and "operator's secret" in \
            str(e), e


def test_forged_credential_refused():
    d = daemon()
    # A key made from another secret, and A's key offered as B's.
    for job, key in ((b"jobA", job_key(b"jobA", b"guessed secret")),
                     (b"jobB", job_key(b"jobA")),
                     (b"jobA", SECRET)):
        c, sn = challenge(d)
        cn = os.urandom(32)
        try:
            c.call(OP["AUTH"], cn, mac(key, CTAG, sn, cn), job)
            raise AssertionError("forged credential accepted")
        except rt.RdzvError as e:
            assert e.code == EAUTH, e
        assert rt.expect_closed(c.sock, 5) == b""
    assert d.metric("rdzvd_errors_total", kind="auth") == 3
    assert "wrong job credential" in d.log_text()
    # An id rdzvd would never give a job.
    c, sn = challenge(d)
    cn = os.urandom(32)
    try:
        c.call(OP["AUTH"], cn, mac(job_key(b"x"), CTAG, sn, cn), b"a b")
        raise AssertionError("a job id with a space accepted")
    except rt.RdzvError as e:
        assert e.code == EAUTH, e


def test_replayed_handshake_refused():
    d = daemon()
    c1, sn1 = challenge(d)
    cn = os.urandom(32)
    good = mac(job_key(b"jobA"), CTAG, sn1, cn)
    c1.call(OP["AUTH"], cn, good, b"jobA")     # recorded on the wire
    c2, sn2 = challenge(d)
    assert sn2 != sn1
    try:
        c2.call(OP["AUTH"], cn, good, b"jobA")
        raise AssertionError("replayed AUTH accepted")
    except rt.RdzvError as e:
        assert e.code == EAUTH, e
    assert rt.expect_closed(c2.sock, 5) == b""
    assert d.metric("rdzvd_errors_total", kind="auth") == 1


def test_rdzvd_refuses_a_credential_as_its_secret():
    tmp = rt.mktemp("rdzvd-sec-")
    cred = write(os.path.join(tmp, "cred"), HEADER + b"\njob j\nkey " +
                 job_key(b"j").hex().encode() + b"\n")
    rc, _, err = rt.run_rdzvd(["-d", "--listen", "127.0.0.1:0", "--http",
                               "off", "--durability", "memory",
                               "--token-file", cred])
    assert rc == 1 and "job credential" in err, err


def agent(d, token_file, job, out, extra=()):
    argv = [os.path.join(rt.top_builddir(), "agent", "rdzv-agent"),
            "--nnodes", "1", "--nproc_per_node", "1",
            "--rdzv_endpoint", "127.0.0.1:%d" % d.port,
            "--token_file", token_file] + list(extra)
    if job is not None:
        argv += ["--rdzv_id", job]
    argv += ["--no_python", "/bin/sh", "-c",
             'cat "$RDZV_TOKEN_FILE" > ' + out]
    env = dict(os.environ)
    env.pop("RDZV_TOKEN_FILE", None)
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=60, env=env, start_new_session=True)
    return p.returncode, p.stderr.decode(errors="replace")


def test_agent_takes_a_job_credential():
    d = daemon()
    tmp = rt.mktemp("agent-sec-")
    cred = HEADER + b"\njob jobC\nkey " + job_key(b"jobC").hex().encode()
    path = write(os.path.join(tmp, "c.cred"), cred + b"\n")
    out = os.path.join(tmp, "seen")
    rc, err = agent(d, path, "jobC", out)
    assert rc == 0, err
    assert open(out, "rb").read() == cred + b"\n"
    # From the operator's secret the workers get the job's credential.
    rc, err = agent(d, d.secret_file, "jobD", out)
    assert rc == 0, err
    assert open(out, "rb").read() == HEADER + b"\njob jobD\nkey " + \
        job_key(b"jobD").hex().encode() + b"\n"
    # C's credential for job E: refused before anything runs.
    os.unlink(out)
    rc, err = agent(d, path, "jobE", out)
    assert rc != 0 and "credential of job jobC" in err, err
    assert not os.path.exists(out)
    assert d.metric("rdzvd_errors_total", kind="forbidden") == 0


def test_agent_warns_of_the_default_id():
    d = daemon()
    tmp = rt.mktemp("agent-sec-")
    rc, err = agent(d, d.secret_file, None, os.path.join(tmp, "o"))
    assert rc == 0, err
    assert '--rdzv_id is "none", the default' in err, err
    rc, err = agent(d, d.secret_file, "named", os.path.join(tmp, "o"))
    assert rc == 0 and "the default" not in err, err


def test_worker_cannot_close_another_job():
    # The case: a training script under an agent started with the
    # operator's secret runs rdzvctl with the RDZV_TOKEN_FILE it was given.
    d = daemon()
    op = as_operator(d)
    bnode, rb = join(op, b"jobB")
    tmp = rt.mktemp("worker-sec-")
    out = os.path.join(tmp, "rc")
    ctlbin = os.path.join(rt.top_builddir(), "client", "rdzvctl")
    argv = [os.path.join(rt.top_builddir(), "agent", "rdzv-agent"),
            "--nnodes", "1", "--nproc_per_node", "1",
            "--rdzv_endpoint", "127.0.0.1:%d" % d.port,
            "--token_file", d.secret_file, "--rdzv_id", "jobA",
            "--no_python", "/bin/sh", "-c",
            '"$0" -e "$RDZV_ENDPOINT" close jobB 2>"$1.err"; echo $? > "$1";'
            '"$0" -e "$RDZV_ENDPOINT" evict jobB %d --now; '
            'echo $? >> "$1"; "$0" -e "$RDZV_ENDPOINT" members jobA >/dev/null;'
            ' echo $? >> "$1"' % bnode, ctlbin, out]
    env = dict(os.environ)
    env.pop("RDZV_TOKEN_FILE", None)
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True,
                       timeout=60, env=env, start_new_session=True)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    # close and evict refused (exit 4, authentication), its own job read.
    assert open(out).read().split() == ["4", "4", "0"], open(out).read()
    assert "cannot reach job" in open(out + ".err").read()
    assert op.call(OP["HEARTBEAT"], b"jobB", bnode)[0] == 1
    assert b'"running"' in op.call(OP["ADMIN_JOB"], b"jobB")[0]
    assert d.metric("rdzvd_errors_total", kind="forbidden") == 2


def test_tcpstore_rules_with_a_secret():
    # Unmodified torch has no credential: refused on a round's port too,
    # unless --tcpstore-allow lists it; then that round's keys only.
    d = daemon()
    op = as_operator(d)
    _, ra = join(op, b"jobA")
    t = rt.TCPStore2(rt.connect("127.0.0.1", ra["store_port"]),
                     handshake=False)
    t.send_raw(rt.enc2("set", b"k", b"v"))
    assert rt.expect_closed(t.sock, 5) == b""
    assert d.metric("rdzvd_errors_total", kind="tcpstore_denied") == 1
    tmp = rt.mktemp("rdzvd-sec-")
    d2 = rt.Rdzvd(args=["--token-file", write(os.path.join(tmp, "s"),
                                              SECRET),
                        "--tcpstore-allow", "127.0.0.0/8"])
    d2.secret_file = os.path.join(tmp, "s")
    op2 = as_operator(d2)
    _, ra = join(op2, b"jobA")
    _, rb = join(op2, b"jobB")
    op2.set(b"secret", b"B's", ns=rb["store_ns"])
    t = rt.TCPStore2(rt.connect("127.0.0.1", ra["store_port"]))
    t.set(b"k", b"v")
    assert op2.get(b"k", ns=ra["store_ns"]) == b"v"
    assert t.num_keys() == 1         # not B's key, nor anything else


def test_python_member_with_a_job_credential():
    # python/rdzv/native.py (torchrun's rdzv backend) reads the same file.
    sys.path.insert(0, os.path.join(rt.top_srcdir(), "python"))
    try:
        from rdzv import native
    except ImportError as e:
        rt.skip("python/rdzv cannot be imported here: %s" % e)
    d = daemon()
    cred = HEADER + b"\njob jobP\nkey " + job_key(b"jobP").hex().encode()
    sock = native.connect("127.0.0.1", d.port, token=cred)
    sock.close()
    bad = HEADER + b"\njob jobP\nkey " + job_key(b"jobQ").hex().encode()
    try:
        native.connect("127.0.0.1", d.port, token=bad)
        raise AssertionError("a wrong credential accepted")
    except native.RdzvError as e:
        assert e.code == EAUTH, e


if __name__ == "__main__":
    rt.main(globals())
