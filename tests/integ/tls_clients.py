# SPDX-License-Identifier: Apache-2.0
"""TLS in the blocking native client (common/client.c) and its users,
against a real rdzvd started with --tls-cert/--tls-key (PROTOCOL.md
"TLS"): rdzvctl's commands, events --follow and its Ctrl-C, with a token
too, over TLS with --tls-ca or RDZV_TLS_CA; refused without a CA (rdzvd
requires TLS), with the wrong CA, with a certificate for another host,
against an rdzvd without TLS, with a CA file that is not there: exit 4, a
message that says what to check, nothing written.  librdzvworker's store
(tests/integ/worker_check) runs its collectives' bootstrap over TLS with
RDZV_TLS_CA and fails with the reason without it."""
import json
import os
import select
import signal
import subprocess
import time

import rdzvtest as rt
import worker_lib as wl
from ctl_basic import CTL, Follow, ctl, ep

OP_JOIN, OP_ROUND = 21, 26
RUNNING = 1
EXIT_AUTH = 4
CERTS = rt.make_tls_certs()


def tls_daemon(*extra, **kw):
    return rt.Rdzvd(args=list(extra), durability="memory", tls=CERTS, **kw)


def token_file(token=b"tls-client-token"):
    return rt.secret_file(os.path.join(rt.mktemp("rdzv-tls-tok-"), "token"),
                          token + b"\n")


def absent(d, key, ns=b""):
    """Asserts key does not exist, asked over TLS with rdzvtest's client."""
    c = d.native(ns=ns)
    try:
        c.get(key)
        raise AssertionError("key %r was written" % key)
    except rt.RdzvError as e:
        assert e.code == rt.RDZV_ENOTFOUND, e
    finally:
        c.close()


def refused(rc, err, *words):
    assert rc == EXIT_AUTH, (rc, err)
    for w in words:
        assert w in err, (w, err)
    # One line that says it all, no second-guessing message after it.
    assert err.count("\n") == 1 and err.startswith("rdzvctl: "), err


class Agent:
    """A fake agent over TLS: JOIN, then round pushes."""

    def __init__(self, d, job, nodes=(1, 1), host="alpha"):
        self.c = d.native()
        f = self.c.call(OP_JOIN, job, os.urandom(8).hex(), host,
                        "127.0.0.1", os.getpid(), 1, nodes[0], nodes[1], 3,
                        100, 60000)
        self.node_id = f[0]

    def state(self, timeout=5.0):
        f = self.c.next_push(timeout)
        assert f.op == OP_ROUND, f
        return f.fields[2]


# ---- rdzvctl over TLS ----

def test_ctl_commands_over_tls():
    d = tls_daemon()
    ca = ["--tls-ca", CERTS["ca"]]
    hs0 = d.metric("rdzvd_tls_connections_total")
    rc, out, err = ctl(*ca, "status", "--json", endpoint=ep(d))
    assert rc == 0, err
    assert json.loads(out)["connections"] >= 1
    rc, out, err = ctl(*ca, "kv", "set", "alpha", "one", endpoint=ep(d))
    assert (rc, out) == (0, ""), err
    # By name too: the certificate names localhost.
    rc, out, err = ctl(*ca, "kv", "get", "alpha",
                       endpoint=ep(d, "localhost"))
    assert (rc, out) == (0, "one\n"), err
    rc, out, err = ctl(*ca, "--json", "kv", "set", "--ns", "n/1", "beta",
                       "two", endpoint=ep(d))
    assert rc == 0 and json.loads(out) == {"ns": "n/1", "key": "beta",
                                           "bytes": 3}, (out, err)
    rc, out, err = ctl(*ca, "kv", "list", "--ns", "n/1", endpoint=ep(d))
    assert (rc, out) == (0, "beta\n"), err
    rc, out, err = ctl(*ca, "kv", "del", "alpha", endpoint=ep(d))
    assert rc == 0, err
    rc, out, err = ctl(*ca, "kv", "get", "alpha", endpoint=ep(d))
    assert rc == 1 and 'no key "alpha"' in err, (rc, err)
    rc, out, err = ctl(*ca, "jobs", endpoint=ep(d))
    assert (rc, out) == (0, "no jobs\n"), err
    # One TLS connection per rdzvctl run, and no refusals.
    assert d.metric("rdzvd_tls_connections_total") - hs0 == 8
    assert d.metric("rdzvd_errors_total", kind="tls_handshake") == 0
    # What rdzvctl wrote is what rdzvd holds (read with Python's TLS).
    c = d.native(ns=b"n/1")
    assert c.get(b"beta") == b"two"
    c.close()


def test_large_values_cross_many_records():
    # 3 MiB each way: many TLS records, partial writes and reads that
    # stop in the middle of a record.
    d = tls_daemon()
    val = os.urandom(3 << 20)
    rc, _, err = ctl("--tls-ca", CERTS["ca"], "kv", "set", "big", "-",
                     endpoint=ep(d), stdin=val)
    assert rc == 0, err
    c = d.native()
    assert c.get(b"big") == val
    c.close()
    rc, out, err = ctl("--tls-ca", CERTS["ca"], "kv", "get", "big",
                       endpoint=ep(d), stdin=b"")
    assert rc == 0 and out == val + b"\n", (rc, len(out), err)


def test_rdzvd_gone_mid_write_is_no_sigpipe():
    # rdzvctl connects, then reads the value from stdin; rdzvd dies in
    # between, so the TLS records go to a closed socket: exit 3 with the
    # words, not death by SIGPIPE (rdzvctl does not ignore it).
    d = tls_daemon()
    e = {k: v for k, v in os.environ.items()
         if k not in ("RDZV_ENDPOINT", "RDZV_TOKEN_FILE", "RDZV_TLS_CA")}
    p = subprocess.Popen([CTL, "-e", ep(d), "--tls-ca", CERTS["ca"], "kv",
                          "set", "k", "-"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=e)
    rt._track(p)
    # rdzvctl reads the value only once connected (TLS and the native
    # handshake done): fill the pipe, and when it drains rdzvctl is past
    # its handshake.  (rdzvd's TLS gauge alone came up before rdzvctl had
    # rdzvd's preamble: killed then, rdzvctl failed to connect instead.)
    data = os.urandom(8 << 20)
    fd = p.stdin.fileno()
    os.set_blocking(fd, False)
    sent = 0
    try:
        while True:
            sent += os.write(fd, data[sent:sent + 65536])
    except BlockingIOError:
        pass
    rt.wait_until(lambda: select.select([], [fd], [], 0)[1], timeout=20,
                  what="rdzvctl connected and reading the value")
    assert d.metric("rdzvd_tls_connections") == 1, d.metrics()
    d.kill9()
    os.set_blocking(fd, True)
    out, err = p.communicate(data[sent:], timeout=20)
    rt._untrack(p)
    assert p.returncode == 3, (p.returncode, err)
    assert b"lost the connection" in err, err


def test_ca_from_environment_and_option_wins():
    d = tls_daemon()
    rc, _, err = ctl("kv", "set", "k", "v", endpoint=ep(d),
                     env={"RDZV_TLS_CA": CERTS["ca"]})
    assert rc == 0, err
    rc, out, err = ctl("kv", "get", "k", endpoint=ep(d),
                       env={"RDZV_TLS_CA": CERTS["ca"]})
    assert (rc, out) == (0, "v\n"), err
    # The wrong CA in the environment: refused, named.
    rc, out, err = ctl("kv", "get", "k", endpoint=ep(d),
                       env={"RDZV_TLS_CA": CERTS["other_ca"]})
    refused(rc, err, "certificate verify failed")
    # --tls-ca beats RDZV_TLS_CA.
    rc, out, err = ctl("--tls-ca", CERTS["ca"], "kv", "get", "k",
                       endpoint=ep(d), env={"RDZV_TLS_CA": CERTS["other_ca"]})
    assert (rc, out) == (0, "v\n"), err


def test_token_inside_tls():
    tok = token_file()
    d = tls_daemon("--token-file", tok)
    both = ["--tls-ca", CERTS["ca"], "--token-file", tok]
    rc, _, err = ctl(*both, "kv", "set", "k", "v", endpoint=ep(d))
    assert rc == 0, err
    rc, out, err = ctl(*both, "kv", "get", "k", endpoint=ep(d))
    assert (rc, out) == (0, "v\n"), err
    # TLS right, no token: the token message, exit 4, nothing changed.
    rc, _, err = ctl("--tls-ca", CERTS["ca"], "kv", "set", "k", "x",
                     endpoint=ep(d))
    refused(rc, err, "requires a token")
    # Token right, no TLS: the TLS message.
    rc, _, err = ctl("--token-file", tok, "kv", "set", "k", "x",
                     endpoint=ep(d))
    refused(rc, err, "requires TLS")
    rc, out, err = ctl(*both, "kv", "get", "k", endpoint=ep(d))
    assert (rc, out) == (0, "v\n"), err
    # (Without a token rdzvctl gives up before answering the challenge.)
    assert d.metric("rdzvd_errors_total", kind="tls_required") == 1
    assert d.metric("rdzvd_tls_connections_total") == 4


# ---- refusals: exit 4, a message that says what to do, nothing written ----

def test_no_ca_against_tls_required():
    d = tls_daemon()
    for args in (("status",), ("kv", "set", "nope", "x"),
                 ("close", "nojob")):
        rc, out, err = ctl(*args, endpoint=ep(d))
        refused(rc, err, "rdzvd at %s requires TLS" % ep(d), "--tls-ca",
                "RDZV_TLS_CA")
        assert out == ""
    absent(d, b"nope")
    assert d.metric("rdzvd_errors_total", kind="tls_required") == 3


def test_wrong_ca_is_a_verify_failure():
    d = tls_daemon()
    rc, out, err = ctl("--tls-ca", CERTS["other_ca"], "kv", "set", "nope",
                       "x", endpoint=ep(d))
    refused(rc, err, "TLS handshake with %s failed" % ep(d),
            "certificate verify failed",
            "is --tls-ca the CA that signed rdzvd's --tls-cert?")
    # "system" is the system's store (which lacks the test CA), not a
    # file of that name.
    rc, out, err = ctl("--tls-ca", "system", "kv", "set", "nope", "x",
                       endpoint=ep(d))
    refused(rc, err, "certificate verify failed", "is --tls-ca the CA")
    absent(d, b"nope")
    rt.wait_until(lambda: d.metric("rdzvd_errors_total",
                                   kind="tls_handshake") == 2,
                  what="rdzvd counts the failed handshakes")


def test_certificate_for_another_host():
    # rdzvd shows a certificate (signed by the right CA) that names
    # not-this-host.example only: refused by address and by name.
    d = rt.Rdzvd(durability="memory", tls_cert=CERTS["wrong_host_cert"],
                 tls_key=CERTS["wrong_host_key"], tls_ca=CERTS["ca"])
    rc, _, err = ctl("--tls-ca", CERTS["ca"], "kv", "set", "nope", "x",
                     endpoint=ep(d))
    refused(rc, err, "certificate verify failed", "IP address mismatch",
            "does not name the host")
    rc, _, err = ctl("--tls-ca", CERTS["ca"], "kv", "set", "nope", "x",
                     endpoint=ep(d, "localhost"))
    refused(rc, err, "certificate verify failed", "hostname mismatch",
            "does not name the host")
    # Nothing was written (asked under the name the certificate has).
    s = rt.tls_wrap(d.connect(), CERTS["ca"], "not-this-host.example")
    c = rt.NativeClient(s)
    try:
        c.get(b"nope")
        raise AssertionError("written")
    except rt.RdzvError as e:
        assert e.code == rt.RDZV_ENOTFOUND, e
    c.close()


def test_plaintext_rdzvd_and_missing_ca_file():
    d = rt.Rdzvd(durability="memory")
    rc, _, err = ctl("--tls-ca", CERTS["ca"], "status", endpoint=ep(d))
    refused(rc, err, "TLS handshake with %s failed" % ep(d),
            "is rdzvd started with --tls-cert?")
    assert d.metric("rdzvd_errors_total", kind="tls_not_configured") == 1
    missing = os.path.join(CERTS["dir"], "no-such-ca.pem")
    rc, _, err = ctl("--tls-ca", missing, "status", endpoint=ep(d))
    refused(rc, err, "TLS CA file %s" % missing, "--tls-ca")
    rc, _, err = ctl("status", endpoint=ep(d),
                     env={"RDZV_TLS_CA": missing})
    refused(rc, err, missing)
    # A file that is no certificate at all.
    rc, _, err = ctl("--tls-ca", CERTS["key"], "status", endpoint=ep(d))
    assert rc == EXIT_AUTH and "TLS CA file" in err, (rc, err)
    rc, _, err = ctl("--tls-ca", "", "status", endpoint=ep(d))
    assert rc == 2 and "--tls-ca" in err, (rc, err)


def test_silent_server_handshake_times_out():
    # The handshake is bounded by --timeout like the rest of connecting.
    import socket
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(4)
    t0 = time.monotonic()
    rc, _, err = ctl("--tls-ca", CERTS["ca"], "--timeout", "0.5", "status",
                     endpoint="127.0.0.1:%d" % ls.getsockname()[1])
    took = time.monotonic() - t0
    ls.close()
    assert rc == 3 and "no answer within 500 ms" in err, (rc, err)
    assert 0.4 < took < 5.0, took


def test_optional_tls_serves_both():
    d = tls_daemon(tls_mode="optional")
    rc, _, err = ctl("kv", "set", "k", "plain", endpoint=ep(d))
    assert rc == 0, err
    rc, out, err = ctl("--tls-ca", CERTS["ca"], "kv", "get", "k",
                       endpoint=ep(d))
    assert (rc, out) == (0, "plain\n"), err


# ---- events --follow over TLS ----

def test_events_follow_over_tls_and_sigint():
    d = tls_daemon()
    a = Agent(d, "tf", host="h1")
    assert a.state() == RUNNING
    f = Follow(d, "tf", env={"RDZV_TLS_CA": CERTS["ca"]})
    f.wait_line(r"round 1 running")
    # A standby joining is an event: it shows up while rdzvctl waits in
    # rdzvd (the reply arrives over TLS into a blocked read).
    t0 = time.monotonic()
    Agent(d, "tf", host="h2")
    f.wait_line(r"join node 2 ", timeout=3.0)
    assert time.monotonic() - t0 < 3.0
    assert f.p.poll() is None
    # Ctrl-C while waiting for the next batch: exit 0 at once.
    time.sleep(0.2)
    t0 = time.monotonic()
    f.p.send_signal(signal.SIGINT)
    rc, err = f.wait(5)
    assert rc == 0 and time.monotonic() - t0 < 2.0, (rc, err)
    assert err == "", err


def test_events_follow_ends_with_the_job_over_tls():
    d = tls_daemon()
    a = Agent(d, "te", host="h1")
    assert a.state() == RUNNING
    f = Follow(d, "te", "--json", "--tls-ca", CERTS["ca"])
    f.wait_line(r'"round 1 running')
    rc, _, err = ctl("--tls-ca", CERTS["ca"], "close", "te", "--reason",
                     "tls done", endpoint=ep(d))
    assert rc == 0, err
    f.wait_line(r"closed by an operator: tls done")
    rc, err = f.wait(10)
    assert rc == 0, (rc, err)
    for line in f.lines():
        assert set(json.loads(line)) == {"seq", "time_ms", "text"}, line


# ---- librdzvworker's store ----

def worker_prog():
    p = wl.prog()
    if not os.path.exists(p):
        rt.skip("tests/integ/worker_check not built (make check builds it)")
    return p


def test_worker_store_over_tls():
    prog = worker_prog()
    d = tls_daemon()
    hs0 = d.metric("rdzvd_tls_connections_total")
    before = d.metric("rdzvd_ops_total", op="set") + \
        d.metric("rdzvd_ops_total", op="get")
    res = wl.run_ok(2, [prog, "coll", "quick"], d=d, timeout=60,
                    env={"RDZV_TLS_CA": CERTS["ca"]})
    for r, (rc, out, err) in enumerate(res):
        assert "ok coll rank=%d" % r in out, out
    # The ranks' bootstrap went through rdzvd's store, over TLS (rdzvd
    # takes nothing else): one TLS connection each.
    after = d.metric("rdzvd_ops_total", op="set") + \
        d.metric("rdzvd_ops_total", op="get")
    assert after - before >= 2, (before, after)
    assert d.metric("rdzvd_tls_connections_total") - hs0 == 2
    assert d.metric("rdzvd_errors_total", kind="tls_required") == 0


def test_worker_store_tls_failures_say_why():
    prog = worker_prog()
    d = tls_daemon()
    cases = (({"RDZV_TLS_CA": CERTS["other_ca"]},
              ["certificate verify failed", "RDZV_TLS_CA=" +
               CERTS["other_ca"]]),
             ({}, ["requires TLS", "RDZV_TLS_CA is unset"]))
    for env, words in cases:
        res = wl.Group(2, [prog, "init"], d=d, env=dict(
            env, WORKER_CHECK_TIMEOUT_MS="5000")).wait(30)
        for rc, out, err in res:
            assert rc == 2, (rc, out, err)
            assert "code=%d" % rt.RDZV_ETLS in out, out
            for w in words:
                assert w in out, (w, out)


if __name__ == "__main__":
    rt.main(globals())
