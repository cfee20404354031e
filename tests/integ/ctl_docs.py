# SPDX-License-Identifier: Apache-2.0
"""What an operator reads: the man pages render without a warning (mandoc
-T lint, groff -ww, man -l) and name every option of their program's
--help; etc/rdzvd.conf documents every rdzvd option; the Kubernetes
example (examples/k8s) parses, has what it promises, and its rdzvd
configuration and agent command line are accepted by the real programs;
so does its highly available variant (examples/k8s/ha: etcd, three
rdzvds whose readiness is "I lead"), its rdzvds run on real etcd."""
import json
import os
import re
import shutil
import subprocess

import rdzvtest as rt

BUILD = rt.top_builddir()
SRC = rt.top_srcdir()
PAGES = {"rdzvd.8": "rdzvd/rdzvd", "rdzv-agent.1": "agent/rdzv-agent",
         "rdzvctl.1": "client/rdzvctl"}


def need(tool, package):
    p = shutil.which(tool)
    assert p, "%s not found: install %s (scripts/deps.sh)" % (tool, package)
    return p


def page(name):
    return os.path.join(SRC, "man", name)


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60,
                          **kw)


def help_text(prog):
    r = run([os.path.join(BUILD, prog), "--help"])
    assert r.returncode == 0, r
    return r.stdout


def test_man_pages_lint_clean():
    mandoc = need("mandoc", "mandoc")
    groff = need("groff", "groff-base")
    man = need("man", "man-db")
    for name in PAGES:
        r = run([mandoc, "-T", "lint", "-W", "warning", page(name)])
        assert r.returncode == 0 and r.stdout + r.stderr == "", \
            "mandoc -T lint %s:\n%s%s" % (name, r.stdout, r.stderr)
        r = run([groff, "-ww", "-z", "-mandoc", page(name)])
        assert r.returncode == 0 and r.stderr == "", \
            "groff -ww %s:\n%s" % (name, r.stderr)
        r = run([man, "-l", page(name)],
                env=dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="",
                         PAGER="cat", MANPAGER="cat"))
        assert r.returncode == 0 and r.stderr == "", \
            "man -l %s:\n%s" % (name, r.stderr)
        for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "EXIT STATUS",
                        "EXAMPLES", "SEE ALSO"):
            assert re.search(r"^%s$" % section, r.stdout, re.M), \
                (name, section)
    # The lint does catch a broken page (the check can fail).
    bad = os.path.join(rt.mktemp("rdzv-man-"), "bad.1")
    with open(page("rdzvctl.1")) as f:
        text = f.read()
    with open(bad, "w") as f:
        f.write(text.replace(".Sh DESCRIPTION", ".Sh DESCRIPTION\n.Bl"))
    r = run([mandoc, "-T", "lint", "-W", "warning", bad])
    assert r.returncode != 0 and r.stdout + r.stderr


def test_man_pages_name_every_option():
    for name, prog in PAGES.items():
        with open(page(name)) as f:
            src = f.read()
        text = help_text(prog)
        longs = set(re.findall(r"(?<![\w-])--([a-z][a-z_-]*[a-z])", text))
        # rdzv-agent shows both spellings of one option; the page the
        # underscore one.
        if name == "rdzv-agent.1":
            longs = {o.replace("-", "_") for o in longs}
        missing = [o for o in sorted(longs)
                   if not re.search(r"Fl -%s\b" % re.escape(o), src)]
        assert not missing, "%s lacks %s" % (name, missing)
        shorts = set(re.findall(r"(?:^|[ ,])-([a-zA-Z])\b", text))
        missing = [o for o in sorted(shorts)
                   if not re.search(r"Fl %s\b|Fl [a-zA-Z]*%s[a-zA-Z]*\b" %
                                    (o, o), src)]
        assert not missing, "%s lacks -%s" % (name, missing)
    with open(page("rdzvctl.1")) as f:
        src = f.read()
    for cmd in ("status", "jobs", "members", "events", "kv get", "kv set",
                "kv del", "kv list", "close", "evict"):
        assert ".It Cm %s" % cmd in src, cmd
    exits = re.search(r"\.Sh EXIT STATUS(.*?)\.Sh", src, re.S).group(1)
    for code in "01234":
        assert ".It %s\n" % code in exits, code
    with open(page("rdzvd.8")) as f:
        src = f.read()
    sigs = re.search(r"\.Sh SIGNALS(.*?)\.Sh", src, re.S).group(1)
    for sig in ("SIGTERM", "SIGINT", "SIGHUP"):
        assert sig in sigs, sig


def test_rdzvd_conf_documents_every_option():
    with open(os.path.join(SRC, "etc", "rdzvd.conf")) as f:
        conf = f.read()
    keys = set(re.findall(r"^#([a-z][a-z-]*) =", conf, re.M))
    opts = set(re.findall(r"--([a-z][a-z-]*[a-z])", help_text("rdzvd/rdzvd")))
    missing = opts - keys - {"help", "version", "config"}
    assert not missing, "etc/rdzvd.conf lacks %s" % sorted(missing)


# ---- examples/k8s ----

def k8s_docs(sub=""):
    import yaml
    docs = {}
    d = os.path.join(SRC, "examples", "k8s", sub)
    for name in sorted(os.listdir(d)):
        if name.endswith(".yaml"):
            with open(os.path.join(d, name)) as f:
                for doc in yaml.safe_load_all(f):
                    assert isinstance(doc, dict) and "kind" in doc, name
                    docs.setdefault(doc["kind"], []).append(doc)
    return docs


def flag(args, name):
    for a in args:
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    raise AssertionError("%s not in %s" % (name, args))


def test_k8s_manifests():
    try:
        docs = k8s_docs()
    except ImportError:
        raise AssertionError("python3-yaml missing (scripts/deps.sh)")
    dep, = docs["Deployment"]
    spec = dep["spec"]
    assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
    pod = spec["template"]["spec"]
    c, = pod["containers"]
    for probe in ("livenessProbe", "readinessProbe"):
        assert c[probe]["httpGet"]["path"] == "/healthz", probe
        assert c[probe]["httpGet"]["port"] in ("http", 29401)
    ports = {p["containerPort"] for p in c["ports"]}
    assert ports == {29400, 29401}, ports
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    vols = {v["name"]: v for v in pod["volumes"]}
    db = flag(c["command"], "--db")
    assert os.path.dirname(db) == mounts["db"], (db, mounts)
    pvc, = docs["PersistentVolumeClaim"]
    assert vols["db"]["persistentVolumeClaim"]["claimName"] == \
        pvc["metadata"]["name"]
    cm, = docs["ConfigMap"]
    assert "rdzvd.conf" in cm["data"]
    assert vols["config"]["configMap"]["name"] == cm["metadata"]["name"]
    assert flag(c["command"], "--config") == mounts["config"] + "/rdzvd.conf"
    assert flag(c["command"], "--token-file").startswith(mounts["token"])
    svc, = docs["Service"]
    assert {p["port"] for p in svc["spec"]["ports"]} == {29400, 29401}
    assert svc["spec"]["selector"] == \
        dep["spec"]["template"]["metadata"]["labels"]
    job, = docs["Job"]
    js = job["spec"]
    assert js["completionMode"] == "Indexed"
    a, = js["template"]["spec"]["containers"]
    cmd = a["command"]
    n = int(flag(cmd, "--nnodes").split(":")[-1])
    assert js["parallelism"] == js["completions"] == n, (js, n)
    assert flag(cmd, "--rdzv_endpoint") == "%s:29400" % \
        svc["metadata"]["name"]
    assert flag(cmd, "--rdzv_id") == "$(JOB_NAME)-$(JOB_UID)"
    env = {e["name"]: e for e in a["env"]}
    assert "job-name" in env["JOB_NAME"]["valueFrom"]["fieldRef"][
        "fieldPath"]
    # A Job re-created under the same name is a new job: its uid.
    assert "controller-uid" in env["JOB_UID"]["valueFrom"]["fieldRef"][
        "fieldPath"]
    tok = env["RDZV_TOKEN_FILE"]["value"]
    avols = {v["name"]: v for v in js["template"]["spec"]["volumes"]}
    amounts = {m["name"]: m["mountPath"] for m in a["volumeMounts"]}
    tname = [k for k, v in amounts.items() if tok.startswith(v)]
    assert tname, (tok, amounts)
    assert avols[tname[0]]["secret"]["secretName"] == \
        vols["token"]["secret"]["secretName"]


def test_k8s_rdzvd_config_and_command_run():
    docs = k8s_docs()
    cm, = docs["ConfigMap"]
    c, = docs["Deployment"][0]["spec"]["template"]["spec"]["containers"]
    tmp = rt.mktemp("rdzv-k8s-")
    conf = os.path.join(tmp, "rdzvd.conf")
    with open(conf, "w") as f:
        f.write(cm["data"]["rdzvd.conf"])
    token = rt.secret_file(os.path.join(tmp, "token"), "k8s-test-token\n")
    # The pod's command line with this machine's paths and free ports.
    args = []
    for a in c["command"][1:]:
        k = a.split("=", 1)[0]
        args.append({"--config": "--config=" + conf,
                     "--listen": "--listen=127.0.0.1:0",
                     "--http": "--http=127.0.0.1:0",
                     "--db": "--db=" + os.path.join(tmp, "rdzvd.db"),
                     "--token-file": "--token-file=" + token}.get(k, a))
    d = rt.Rdzvd(raw=True, start=False, tmpdir=tmp)
    d.extra = args + ["--port-file", d.port_file, "--http-port-file",
                      d.http_port_file]
    d.start()
    ctl = os.path.join(BUILD, "client", "rdzvctl")
    r = run([ctl, "-e", "127.0.0.1:%d" % d.port, "--token-file", token,
             "--json", "status"])
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["durability"] == "strict"
    st, body, _ = d.http_get("/healthz")
    assert st == 200 and body == b"ok\n"


def ha_pod(docs):
    sts = {x["metadata"]["name"]: x for x in docs["StatefulSet"]}
    c, = sts["rdzvd"]["spec"]["template"]["spec"]["containers"]
    return sts, c


def test_k8s_ha_manifests():
    docs = k8s_docs("ha")
    sts, c = ha_pod(docs)
    svcs = {x["metadata"]["name"]: x for x in docs["Service"]}
    for name in ("rdzvd", "etcd"):
        spec = sts[name]["spec"]
        assert spec["replicas"] == 3, name
        aff = spec["template"]["spec"]["affinity"]["podAntiAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"][0]
        assert aff["topologyKey"] == "kubernetes.io/hostname", name
        assert aff["labelSelector"]["matchLabels"] == \
            spec["template"]["metadata"]["labels"], name
        assert svcs[spec["serviceName"]]["spec"][
            "publishNotReadyAddresses"] is True, name
    # Ready means "I lead"; alive means running, leader or standby.
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # The client Service: headless, ready pods only, the rdzvd pods.
    svc = svcs["rdzvd"]["spec"]
    assert svc["clusterIP"] == "None"
    assert not svc.get("publishNotReadyAddresses", False)
    assert svc["selector"] == sts["rdzvd"]["spec"]["template"]["metadata"][
        "labels"]
    # agents.yaml, unchanged, reaches the leader through it.
    job, = k8s_docs()["Job"]
    a, = job["spec"]["template"]["spec"]["containers"]
    assert flag(a["command"], "--rdzv_endpoint") == "rdzvd:29400"
    # The store names the three etcd members at their client port.
    cm, = docs["ConfigMap"]
    conf = cm["data"]["rdzvd.conf"]
    m = re.search(r"^store = etcd://(\S+)$", conf, re.M)
    assert m, conf
    es = sts["etcd"]
    want = ["etcd-%d.%s:2379" % (i, es["spec"]["serviceName"])
            for i in range(es["spec"]["replicas"])]
    assert m.group(1).split(",") == want, (m.group(1), want)
    assert re.search(r"^durability = strict$", conf, re.M)
    assert flag(c["command"], "--listen") == "$(POD_IP):29400"
    env = {e["name"]: e for e in c["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "status.podIP"
    kz = os.path.join(SRC, "examples", "k8s", "ha", "kustomization.yaml")
    import yaml
    with open(kz) as f:
        assert sorted(yaml.safe_load(f)["resources"]) == \
            ["etcd.yaml", "rdzvd.yaml"]


def test_k8s_ha_runs_on_etcd():
    """The ha ConfigMap and command line, with this machine's addresses
    and a real etcd: one rdzvd leads (ready), the other stands by (not
    ready, naming the leader)."""
    from etcd_lib import ETCD, EtcdCluster, free_port, leader_and_standby
    if not os.access(ETCD, os.X_OK):
        rt.skip("etcd is not installed (scripts/deps.sh installs "
                "Debian's etcd-server)")
    docs = k8s_docs("ha")
    cm, = docs["ConfigMap"]
    _, c = ha_pod(docs)
    etcd = EtcdCluster(1)
    tmp = rt.mktemp("rdzv-k8s-ha-")
    conf = os.path.join(tmp, "rdzvd.conf")
    with open(conf, "w") as f:
        text = re.sub(r"^store = .*$", "store = " + etcd.store_arg,
                      cm["data"]["rdzvd.conf"], flags=re.M)
        # etcd_lib's members allow a 1 s lease.
        f.write(re.sub(r"^leader-ttl-ms = .*$", "leader-ttl-ms = 1000",
                       text, flags=re.M))
    token = rt.secret_file(os.path.join(tmp, "token"), "k8s-test-token\n")
    ds = []
    for ip in ("127.0.0.1", "127.0.0.2"):
        d = rt.Rdzvd(raw=True, start=False, tmpdir=rt.mktemp("rdzvd-"))
        d.host = ip
        d.endpoint = "%s:%d" % (ip, free_port(ip))
        args = []
        for a in c["command"][1:]:
            k = a.split("=", 1)[0]
            args.append({"--config": "--config=" + conf,
                         "--listen": "--listen=" + d.endpoint,
                         "--http": "--http=127.0.0.1:0",
                         "--token-file": "--token-file=" + token}.get(k, a))
        d.extra = args + ["--port-file", d.port_file, "--http-port-file",
                          d.http_port_file, "--log-file", d.log_path]
        ds.append(d)
    leader_and_standby(*ds)
    assert ds[1].http_get("/healthz")[0] == 200
    ctl = os.path.join(BUILD, "client", "rdzvctl")
    r = run([ctl, "-e", ds[1].endpoint + "," + ds[0].endpoint,
             "--token-file", token, "status"])
    assert r.returncode == 0, r.stderr
    assert "leader at" in r.stdout and ds[0].endpoint in r.stdout, r.stdout
    for d in ds:
        assert d.stop() == 0, d.diagnostics()


def test_k8s_agent_command_accepted():
    job, = k8s_docs()["Job"]
    a, = job["spec"]["template"]["spec"]["containers"]
    # Kubernetes expands $(JOB_NAME) from the container's environment.
    argv = [x.replace("$(JOB_NAME)", "mlp-fashion").replace(
        "$(JOB_UID)", "3f1c") for x in a["command"]]
    assert argv[0] == "rdzv-agent"
    tmp = rt.mktemp("rdzv-k8s-")
    token = os.path.join(tmp, "token")
    with open(token, "w") as f:
        f.write("t\n")
    r = run([os.path.join(BUILD, "agent", "rdzv-agent"), "--dry_run"] +
            argv[1:], env={"PATH": os.environ.get("PATH", "/bin"),
                           "RDZV_TOKEN_FILE": token})
    assert r.returncode == 0, r.stderr
    got = dict(line.split("=", 1) for line in r.stdout.splitlines()
               if "=" in line and not line.startswith("env["))
    assert got["rdzv_id"] == "mlp-fashion-3f1c", got
    assert got["rdzv_endpoint"] == "rdzvd:29400", got
    assert got["nnodes"].split(":")[-1] == str(job["spec"]["parallelism"])
    assert got["token_file"] == token
    assert got["command"].startswith("ddp_mlp --epochs=")


def error_codes(path):
    with open(os.path.join(SRC, path)) as f:
        text = f.read()
    enum = re.search(r"enum rdzv_err \{(.*?)\};", text, re.S).group(1)
    return dict((n, int(v)) for n, v in
                re.findall(r"^\s*(RDZV_[A-Z]+) = (-?\d+),", enum, re.M)), \
        re.search(r"#define RDZV_ERR_MIN\s+(RDZV_[A-Z]+)", text).group(1)


def test_public_error_codes_match_the_internal_ones():
    # rdzv_worker.h repeats common/rdzv_err.h for library users (one
    # include guard): a code added to one must be added to the other.
    inner, imin = error_codes("common/rdzv_err.h")
    public, pmin = error_codes("libworker/rdzv_worker.h")
    assert inner == public, (sorted(set(inner.items()) ^
                                    set(public.items())))
    assert imin == pmin and inner[imin] == min(inner.values()), (imin, pmin)


def test_repair_settings_documented():
    # Every --rdzv_conf key the agent reads (cli_opts.c's strcmp(k, ...))
    # is in rdzv-agent(1)'s list, and every RDZV_* variable of repair
    # (the agent's worker environment, librdzvworker's, the torch
    # helper's, the warm spare's) is in the manual (README.md and doc/*.md)
    # and rdzv-agent(1).
    man = open(page("rdzv-agent.1")).read()
    readme = open(os.path.join(SRC, "README.md")).read()
    docdir = os.path.join(SRC, "doc")
    for f in sorted(os.listdir(docdir)):
        if f.endswith(".md"):
            readme += open(os.path.join(docdir, f)).read()
    cli = open(os.path.join(SRC, "agent", "cli_opts.c")).read()
    keys = set(re.findall(r'strcmp\(k, "([a-z_]+)"\)', cli))
    assert {"max_repairs", "repair_timeout"} <= keys, keys
    missing = [k for k in sorted(keys)
               if not re.search(r"^\.It Cm (.*, )?%s\b" % k, man, re.M)]
    assert not missing, "--rdzv_conf keys not in rdzv-agent(1): %s" % missing
    names = set()
    for d, exts in (("python/rdzv", ".py"), ("libworker", ".c"),
                    ("agent", ".c")):
        for f in os.listdir(os.path.join(SRC, d)):
            if f.endswith(exts):
                text = open(os.path.join(SRC, d, f)).read()
                names |= set(re.findall(r'"(RDZV_(?:REPAIR|PROGRESS_FD|'
                                        r'SPARE_|REPLACEMENT)[A-Z_]*)"',
                                        text))
    assert {"RDZV_PROGRESS_FD", "RDZV_REPLACEMENT", "RDZV_REPAIR",
            "RDZV_REPAIR_TIMEOUT_MS", "RDZV_REPAIR_DEBUG"} <= names, names
    for n in sorted(names):
        assert "`%s" % n in readme, "%s is not in README.md or doc/" % n
        assert re.search(r"^\.It Ev %s\b" % n, man, re.M), \
            "%s is not in rdzv-agent(1)'s ENVIRONMENT" % n


DOCS = ["README.md", "HACKING.md", "common/PROTOCOL.md"] + sorted(
    os.path.join("doc", f) for f in os.listdir(os.path.join(SRC, "doc"))
    if f.endswith(".md"))


def code_lines(text):
    """The lines of text's fenced blocks and its inline code spans."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
    rest = re.sub(r"```.*?```", "", text, flags=re.S)
    return [ln for b in blocks for ln in b.splitlines()] + \
        re.findall(r"`([^`\n]+)`", rest)


def test_docs_name_what_exists():
    """Every path the README and doc/ name in code (a first part that is
    a directory or file of the tree) exists in the source or the build
    tree (a library named without its .la too), and every option a command line there gives rdzv-agent, rdzvd
    or rdzvctl (before the program it runs) is in that program's
    --help."""
    tops = set(os.listdir(SRC)) - {"build"}
    helps = {p: help_text(PAGES[m]) for m, p in (
        ("rdzv-agent.1", "rdzv-agent"), ("rdzvd.8", "rdzvd"),
        ("rdzvctl.1", "rdzvctl"))}
    bad = []
    for doc in DOCS:
        for ln in code_lines(open(os.path.join(SRC, doc)).read()):
            for tok in re.split(r"[\s,()]+", ln):
                tok = tok.strip("'\".:;").split(":")[0].rstrip("/")
                if "/" not in tok or re.search(r"[*<{$]", tok) or \
                        tok.split("/")[0] not in tops or \
                        tok.endswith((".log", ".trs")):
                    continue    # a test's output exists once it ran
                if not any(os.path.exists(os.path.join(t, tok + x))
                           for t in (SRC, BUILD) for x in ("", ".la")):
                    bad.append("%s: path %s" % (doc, tok))
            m = re.match(r"(?:\$\s+)?(?:\S*/)?(rdzv-agent|rdzvd|rdzvctl)"
                         r"\s(.*)", ln.strip())
            if not m:
                continue
            for tok in m.group(2).split():
                if tok.endswith(".py") or tok.startswith(("./", "-m")) or \
                        tok in ("python", "python3"):
                    break       # the program it runs: its own options
                if re.match(r"--[a-z][a-z0-9_-]*$", tok.split("=")[0]) \
                        and tok.split("=")[0] not in helps[m.group(1)]:
                    bad.append("%s: %s %s" % (doc, m.group(1), tok))
    assert not bad, "stale names in the docs:\n  " + "\n  ".join(bad)


if __name__ == "__main__":
    rt.main(globals())
