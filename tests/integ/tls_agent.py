# SPDX-License-Identifier: Apache-2.0
"""rdzv-agent over TLS to a real rdzvd (--tls-cert/--tls-key, issue 5):
two agents and a token finish a job, their workers told RDZV_TLS_CA (an
absolute path, from a relative --tls_ca or from RDZV_TLS_CA); an agent
without a CA, with the wrong CA, or with a CA against a plaintext rdzvd
stops at once with a message saying what to fix (not after the
reconnect timeout); a bad CA file is a usage error; and a TLS agent rides
out rdzvd killed with SIGKILL and stopped with SIGTERM (same port, same
database) with no worker restarted, the job then completing.  rdzvd's
TLS counters confirm what went over TLS.  Nothing of a test is left."""
import os
import socket
import shutil
import time

import rdzvtest as rt
from agent_lib import (Scope, agent_path, by_round, conf,
                       job_status, starts, wait_starts)

TOKEN = b"tls-agent-test-token"
LEASE = 1.0
# Far above what the tests wait: a quick exit is a deliberate one.
SLOW = "join_timeout=120,reconnect_timeout=120"


def args(d, job, nnodes="2:2", nproc=2, extra=(), host="127.0.0.1"):
    return ["--nnodes", nnodes, "--nproc_per_node", str(nproc),
            "--rdzv_endpoint", "%s:%d" % (host, d.port), "--rdzv_id", job,
            "--max_restarts", "0", "--grace", "1",
            "--rdzv_conf", conf(0.2, LEASE, SLOW)] + list(extra)


def token_file(tmp):
    return rt.secret_file(os.path.join(tmp, "token"), TOKEN + b"\n")


# A worker that records its start like agent_lib's and runs until the
# test creates DIR/go, so an rdzvd restart always falls inside the round.
UNTIL_GO = r'''
import json, os, sys, time
d = sys.argv[1]
env = os.environ
info = {k: v for k, v in env.items() if k.startswith("RDZV_") or
        k in ("RANK", "WORLD_SIZE", "TORCHELASTIC_RESTART_COUNT")}
info["pid"], info["t"] = os.getpid(), time.time()
name = "start.%s.%s.%d" % (env["RDZV_ROUND"], env["RANK"], os.getpid())
with open(os.path.join(d, "." + name), "w") as f:
    json.dump(info, f)
os.rename(os.path.join(d, "." + name), os.path.join(d, name))
end = time.monotonic() + 60
while not os.path.exists(os.path.join(d, "go")) and time.monotonic() < end:
    time.sleep(0.02)
'''


def tls_total(d):
    return d.metric("rdzvd_tls_connections_total")


class TlsScope(Scope):
    """A Scope whose agents, at the end, must not have printed a
    sanitizer report (under --enable-asan an agent that exits 1 on
    purpose would hide one in its exit status)."""

    def close(self):
        for a in self.agents:
            assert "Sanitizer" not in a.output(), a.output()
        Scope.close(self)


def tls_rdzvd():
    """New test certificates and an rdzvd serving TLS with them: (certs,
    rdzvd)."""
    certs = rt.make_tls_certs()
    return certs, rt.Rdzvd(tls=certs)


def fails_fast(a, limit, *needles):
    """The agent exits 1 within limit seconds saying every needle."""
    t0 = time.monotonic()
    rc = a.wait(limit + 5)
    dt = time.monotonic() - t0
    out = a.output()
    assert rc == 1, (rc, out)
    assert dt < limit, "took %.1fs:\n%s" % (dt, out)
    for n in needles:
        assert n in out, (n, out)
    return out


def test_two_agents_tls_and_token():
    certs = rt.make_tls_certs()
    with TlsScope("tlsagent-") as s:
        tok = token_file(s.tmp)
        d = rt.Rdzvd(["--token-file", tok], tls=certs)
        # A relative --tls_ca (agents run in s.tmp) and RDZV_TLS_CA.
        shutil.copy(certs["ca"], os.path.join(s.tmp, "ca.pem"))
        env = {"W_RUN": "0.3", "RDZV_TOKEN_FILE": tok}
        a = s.agent(args(d, "tlsjob", extra=["--tls_ca", "ca.pem"]),
                    env=env)
        # A shell worker printing its environment, on the other node,
        # whose agent checks rdzvd's certificate for a host name.
        sh = ("echo \"rank=$RANK world=$WORLD_SIZE tls=$RDZV_TLS_CA "
              "token=$RDZV_TOKEN_FILE\"; sleep 0.3")
        b = s.agent(args(d, "tlsjob", extra=["--no_python"],
                         host="localhost"),
                    env=dict(env, RDZV_TLS_CA=certs["ca"]),
                    program=["/bin/sh", "-c", sh, s.tmp])
        assert a.wait(30) == 0, a.output()
        assert b.wait(30) == 0, b.output()
        st = starts(s.tmp)
        assert len(st) == 2, st
        for i in st:
            assert i["RDZV_TLS_CA"] == os.path.join(s.tmp, "ca.pem"), i
            # The job's credential (derived), never the operator's secret.
            assert i["RDZV_TOKEN_FILE"] != tok, i
            assert "/rdzv-cred-" in i["RDZV_TOKEN_FILE"], i
            assert i["WORLD_SIZE"] == "4", i
        out = b.output()
        ranks = set()
        for line in out.splitlines():
            if "rank=" in line and "tls=" in line:
                assert "world=4 tls=%s token=" % certs["ca"] in line, line
                assert "token=%s" % tok not in line, line
                ranks.add(line.split("rank=")[1].split()[0])
        assert len(ranks) == 2, out
        assert "job tlsjob succeeded" in a.output(), a.output()
        # Both agents came in over TLS and passed the token inside it.
        assert tls_total(d) >= 2, d.metrics()
        assert d.metric("rdzvd_errors_total", kind="auth") == 0
        assert d.metric("rdzvd_errors_total", kind="tls_required") == 0
        d.stop()


def test_no_ca_against_tls_required():
    certs, d = tls_rdzvd()
    with TlsScope("tlsagent-") as s:
        a = s.agent(args(d, "noca"), env={"RDZV_TLS_CA": ""})
        fails_fast(a, 5, "rdzvd at 127.0.0.1:%d requires TLS" % d.port,
                   "--tls_ca FILE or RDZV_TLS_CA")
        assert not starts(s.tmp)
    assert d.metric("rdzvd_errors_total", kind="tls_required") >= 1
    assert tls_total(d) == 0
    d.stop()


def test_wrong_ca_fails_fast():
    certs, d = tls_rdzvd()
    with TlsScope("tlsagent-") as s:
        a = s.agent(args(d, "wrongca", extra=["--tls_ca",
                                              certs["other_ca"]]))
        fails_fast(a, 5, "TLS handshake with 127.0.0.1:%d failed: "
                   "certificate verify failed" % d.port,
                   "is --tls_ca the CA that signed rdzvd's --tls-cert?")
        assert not starts(s.tmp)
    assert tls_total(d) == 0
    d.stop()
    # rdzvd's certificate names another host: verification fails too.
    d2 = rt.Rdzvd(tls_cert=certs["wrong_host_cert"],
                  tls_key=certs["wrong_host_key"], tls_ca=certs["ca"])
    with TlsScope("tlsagent-") as s:
        a = s.agent(args(d2, "wronghost", extra=["--tls_ca", certs["ca"]]))
        fails_fast(a, 5, "certificate verify failed",
                   "IP address mismatch")
        b = s.agent(args(d2, "wronghost", extra=["--tls_ca", certs["ca"]],
                         host="localhost"))
        fails_fast(b, 5, "certificate verify failed", "ostname mismatch")
        assert not starts(s.tmp)
    assert tls_total(d2) == 0
    d2.stop()


def test_ca_against_plaintext_rdzvd():
    certs = rt.make_tls_certs()
    d = rt.Rdzvd()
    with TlsScope("tlsagent-") as s:
        a = s.agent(args(d, "plain", extra=["--tls_ca", certs["ca"]]))
        fails_fast(a, 5, "TLS handshake with 127.0.0.1:%d failed" % d.port,
                   "is rdzvd started with --tls-cert?")
        assert not starts(s.tmp)
    # rdzvd answers the ClientHello with a refusal preamble, a protocol
    # error to TLS: fatal at the first attempt, not retried.
    assert d.metric("rdzvd_errors_total", kind="tls_not_configured") == 1
    d.stop()


def test_bad_ca_file_is_usage_error():
    certs, d = tls_rdzvd()
    with TlsScope("tlsagent-") as s:
        a = s.agent(args(d, "badca", extra=["--tls_ca", certs["key"]]))
        assert a.wait(10) == 2, a.output()
        assert "--tls_ca: TLS CA file %s" % certs["key"] in a.output(), \
            a.output()
        missing = os.path.join(s.tmp, "nope.pem")
        b = s.agent(args(d, "badca"), env={"PET_TLS_CA": missing})
        assert b.wait(10) == 2, b.output()
        assert "--tls_ca %s: No such file" % missing in b.output(), \
            b.output()
        # --dry_run shows the resolved (absolute) CA; system is a name.
        shutil.copy(certs["ca"], os.path.join(s.tmp, "ca.pem"))
        c = s.agent(args(d, "badca", extra=["--tls_ca", "ca.pem",
                                            "--dry_run"]))
        assert c.wait(10) == 0, c.output()
        assert "tls_ca=%s\n" % os.path.join(s.tmp, "ca.pem") in c.output()
        e = s.agent(args(d, "badca", extra=["--dry_run"]),
                    env={"RDZV_TLS_CA": "system"})
        assert e.wait(10) == 0, e.output()
        assert "tls_ca=system\n" in e.output(), e.output()
        assert not starts(s.tmp)
    d.stop()


def test_standalone_ignores_tls():
    certs = rt.make_tls_certs()
    with TlsScope("tlsagent-") as s:
        # From the environment: silently not used, and not inherited.
        a = s.agent(["--standalone", "--nproc_per_node", "2"],
                    env={"W_RUN": "0", "RDZV_TLS_CA": certs["ca"]})
        assert a.wait(20) == 0, a.output()
        st = starts(s.tmp)
        assert len(st) == 2 and all("RDZV_TLS_CA" not in i for i in st), st
        assert "--tls_ca ignored" not in a.output(), a.output()
        # Given: a warning says it is not used.
        b = s.agent(["--standalone", "--nproc_per_node", "1", "--tls_ca",
                     certs["ca"]], env={"W_RUN": "0"})
        assert b.wait(20) == 0, b.output()
        assert "--tls_ca ignored" in b.output(), b.output()


def hang_up_on(port, count, timeout):
    """Listens on port, closing each connection once its first bytes (a
    ClientHello) came, until count were cut or timeout passed."""
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", port))
    ls.listen(16)
    ls.settimeout(0.5)
    cut, end = 0, time.monotonic() + timeout
    try:
        while cut < count and time.monotonic() < end:
            try:
                c, _ = ls.accept()
            except socket.timeout:
                continue
            c.settimeout(2)
            try:
                c.recv(1)
            except OSError:
                pass
            c.close()
            cut += 1
    finally:
        ls.close()
    return cut


def test_rdzvd_restarts_under_tls_agents():
    certs = rt.make_tls_certs()
    port = rt.free_port()
    d = rt.Rdzvd(["--listen", "127.0.0.1:%d" % port], durability="strict",
                 tls=certs)
    assert d.port == port
    with TlsScope("tlsagent-") as s:
        worker = os.path.join(s.tmp, "until_go.py")
        with open(worker, "w") as f:
            f.write(UNTIL_GO)
        ag = [s.agent(args(d, "phoenix", extra=["--tls_ca", certs["ca"]]),
                      program=[worker, s.tmp]) for _ in range(2)]
        wait_starts(s.tmp, lambda st: len(st) == 4, timeout=15)
        r1 = set(by_round(s.tmp))
        for how in ("kill9", "term", "hangup"):
            if how == "kill9":
                d.kill9()
            else:
                d.stop()
            if how == "hangup":
                # Something on the port that hangs up on every handshake
                # (rdzvd draining or at --max-connections does that):
                # ordinary drops, however many in a row.
                cut = hang_up_on(port, count=4, timeout=15)
                assert cut >= 4, (cut, [a.output()[-3000:] for a in ag])
            else:
                time.sleep(0.3)
            d.start()
            assert d.port == port
            rt.wait_until(lambda: job_status(d, "phoenix").count(
                " connected") == 2, timeout=LEASE * 4,
                what="agents reconnected over TLS after %s" % how)
            assert tls_total(d) >= 2, d.metrics()
            for a in ag:
                assert a.alive(), a.output()
        # Heartbeats over TLS keep both nodes past two leases.
        time.sleep(LEASE * 2)
        st = job_status(d, "phoenix")
        assert "state running round %d " % min(r1) in st, st
        assert st.count(" member ") == 2 and st.count(" connected") == 2, st
        assert len(starts(s.tmp)) == 4, "a worker was restarted"
        open(os.path.join(s.tmp, "go"), "w").close()
        for a in ag:
            assert a.wait(30) == 0, a.output()
            out = a.output()
            assert out.count("rejoined job phoenix") == 3, out
            assert "job phoenix succeeded" in out, out
        assert set(by_round(s.tmp)) == r1
    d.stop()


if __name__ == "__main__":
    if not os.path.exists(agent_path()):
        rt.skip_all("agent/rdzv-agent not built")
    rt.main(globals(), per_test=40, total=170)
