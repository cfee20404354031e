# SPDX-License-Identifier: Apache-2.0
"""The blocking native client (common/client.h), every call checked by
tests/integ/client_check against a real rdzvd: in plaintext, and over TLS with
the CA in RDZV_TLS_CA (what rdzvctl and librdzvworker use)."""
import os
import subprocess

import rdzvtest as rt


def prog():
    return os.path.join(rt.top_builddir(), "tests", "integ",
                        "client_check")


def run_check(d, env=None):
    e = dict(os.environ)
    e.pop("RDZV_TLS_CA", None)
    e.update(env or {})
    p = subprocess.run([prog(), "127.0.0.1:%d" % d.port], env=e,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=120)
    out = p.stdout.decode()
    assert "Sanitizer" not in out and "runtime error:" not in out, out
    assert p.returncode == 0, out
    last = out.strip().splitlines()[-1]
    assert last.startswith("client_check: ") and last.endswith(" 0 failed"), \
        out
    print("  " + last)
    return out


def test_plaintext():
    d = rt.Rdzvd()
    run_check(d)
    d.stop()


def test_tls():
    certs = rt.make_tls_certs()
    d = rt.Rdzvd(tls=certs)
    run_check(d, {"RDZV_TLS_CA": certs["ca"]})
    # Every connection of the run was TLS: none was refused as plaintext.
    assert d.metric("rdzvd_tls_connections_total") >= 3, d.metrics()
    assert d.metric("rdzvd_errors_total", kind="tls_required") == 0
    d.stop()


if __name__ == "__main__":
    if not os.path.exists(prog()):
        rt.skip_all("tests/integ/client_check not built (make check "
                    "builds it)")
    rt.main(globals(), per_test=150, total=320)
