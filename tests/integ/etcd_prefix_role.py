# SPDX-License-Identifier: Apache-2.0
"""rdzvd on an etcd with authentication on, as a least-privilege user
whose role grants rdzvd's prefix alone (not root): it leads, a standby
takes over when it is killed, and jobs run before and after; the other
clients' keys are untouched.  --etcd-compact-interval compacts when asked
(etcd lets such a user compact; the default leaves it to etcd's own
--auto-compaction-*).  Skipped without etcd."""
import base64
import json
import os

import rdzvtest as rt
from etcd_lib import (EtcdCluster, b64, etcd_rdzvd, leader_and_standby,
                      skip_without_etcd)

skip_without_etcd()

OP_JOIN, OP_ROUND, OP_ADMIN_JOBS = 21, 26, 29
RUNNING = 1
PREFIX = b"/rdzv/"


def prefix_only(etcd):
    """Auth on: root, and a user "rdzvd" whose role reads and writes
    PREFIX and nothing else.  Returns (rdzvd's options, root's token)."""
    etcd.post("/v3/auth/user/add", {"name": "root", "password": "rootpw"})
    etcd.post("/v3/auth/user/grant", {"user": "root", "role": "root"})
    etcd.post("/v3/auth/role/add", {"name": "rdzvd"})
    etcd.post("/v3/auth/role/grant", {"name": "rdzvd", "perm": {
        "key": b64(PREFIX), "range_end": b64(PREFIX[:-1] + b"0"),
        "permType": "READWRITE"}})
    etcd.post("/v3/auth/user/add", {"name": "rdzvd", "password": "rdzvdpw"})
    etcd.post("/v3/auth/user/grant", {"user": "rdzvd", "role": "rdzvd"})
    etcd.post("/v3/auth/enable", {})
    tmp = rt.mktemp("etcd-role-")
    pw = rt.secret_file(os.path.join(tmp, "password"), "rdzvdpw\n")
    tok = etcd.post("/v3/auth/authenticate", {"name": "root",
                                              "password": "rootpw"})["token"]
    return ["--etcd-user", "rdzvd", "--etcd-password-file", pw], tok


def as_root(etcd, tok, path, body):
    return etcd.post(path, body, headers={"Authorization": tok})


def denied(etcd, path, body):
    """What the rdzvd user may not do, it may not (the role is real)."""
    tok = etcd.post("/v3/auth/authenticate", {"name": "rdzvd",
                                              "password": "rdzvdpw"})["token"]
    try:
        etcd.post(path, body, headers={"Authorization": tok})
    except AssertionError as e:
        return "403" in str(e) or "permission denied" in str(e)
    return False


def run_job(d, job):
    """A one-node job on d (a fake agent); returns its connection once
    its round runs."""
    c = d.native()
    c.call(OP_JOIN, job, os.urandom(8).hex(), "host", "127.0.0.1",
           os.getpid(), 1, 1, 1, 0, 0, 60000)
    f = c.next_push(20.0)
    assert f.op == OP_ROUND and f.fields[2] == RUNNING, f
    return c


def jobs(d):
    return {j["job"]: j["state"] for j in
            json.loads(d.native().call(OP_ADMIN_JOBS)[0])}


def test_prefix_only_role_leads_fails_over_and_runs_jobs():
    etcd = EtcdCluster(1)
    extra, root = prefix_only(etcd)
    as_root(etcd, root, "/v3/kv/put", {"key": b64(b"/other/app"),
                                       "value": b64(b"theirs")})
    assert denied(etcd, "/v3/kv/put", {"key": b64(b"/other/app"),
                                       "value": b64(b"ours")})
    a = etcd_rdzvd(etcd, host="127.0.0.1", start=False, extra=extra)
    b = etcd_rdzvd(etcd, host="127.0.0.2", start=False, extra=extra)
    leader_and_standby(a, b)
    run_job(a, "before")
    a.native().set(b"k", b"v")
    a.kill9()
    rt.wait_until(lambda: os.path.exists(b.port_file), 30,
                  what="the standby to lead")
    b.port = b._read_port(b.port_file)
    assert b.native().get(b"k") == b"v"
    assert jobs(b) == {"before": "running"}, jobs(b)
    run_job(b, "after")
    assert jobs(b)["after"] == "running"
    # Nothing of rdzvd's outside its prefix; the other client's key as
    # it was.
    r = as_root(etcd, root, "/v3/kv/range", {"key": b64(b"\0"),
                                             "range_end": b64(b"\0")})
    keys = [base64.b64decode(kv["key"]) for kv in r.get("kvs", [])]
    assert keys and all(k.startswith(PREFIX) or k == b"/other/app"
                        for k in keys), keys
    r = as_root(etcd, root, "/v3/kv/range", {"key": b64(b"/other/app")})
    assert base64.b64decode(r["kvs"][0]["value"]) == b"theirs", r
    assert "compaction" not in b.log_text()
    assert b.stop() == 0, b.diagnostics()


def test_compaction_when_asked():
    etcd = EtcdCluster(1)
    extra, root = prefix_only(etcd)
    r = as_root(etcd, root, "/v3/kv/put", {"key": b64(b"/other/app"),
                                           "value": b64(b"1")})
    first = int(r["header"]["revision"])
    as_root(etcd, root, "/v3/kv/put", {"key": b64(b"/other/app"),
                                       "value": b64(b"2")})
    d = etcd_rdzvd(etcd, extra=extra + ["--etcd-compact-interval", "1"])
    n = d.native()

    def compacted():
        n.set(b"tick", os.urandom(4))      # revisions move on
        try:
            as_root(etcd, root, "/v3/kv/range", {"key": b64(b"/other/app"),
                                                 "revision": first})
            return False
        except AssertionError as e:
            assert "compacted" in str(e) or "400" in str(e), e
            return True
    rt.wait_until(compacted, 30, 0.2, "rdzvd's compaction")
    assert "compaction" not in d.log_text()    # no failure to tell
    assert d.stop() == 0, d.diagnostics()


if __name__ == "__main__":
    rt.main(globals())
