# SPDX-License-Identifier: Apache-2.0
"""The image of the Kubernetes example (examples/k8s/Dockerfile), checked
without a registry or a docker engine: the manifests parse; the image is
built from the project's own release tarball (make dist's name) with
./configure and make install; every program the manifests and the README
run is in the final image, python3 with rdzv's helper among them; the
build stage installs the Debian package of every library and header
configure.ac requires (and of those the programs it installs by hand
use), found through this machine's pkg-config and dpkg rather than a list
kept here; and runtime-packages.sh, which picks the image's libraries from
the built programs, names an installed package for every library the
programs built here load."""
import fnmatch
import glob
import os
import re
import shlex
import shutil
import subprocess

import rdzvtest as rt

BUILD = rt.top_builddir()
SRC = rt.top_srcdir()
K8S = os.path.join(SRC, "examples", "k8s")
# install [-m MODE ...] SRC DESTDIR/usr/bin/NAME: a program by hand.
INSTALL_RE = r"\binstall\s(?:[^&;]*?\s)?(\S+)\s+\S*/usr/s?bin/(\S+)"


def read(*path):
    with open(os.path.join(SRC, *path)) as f:
        return f.read()


def run(argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120,
                          **kw)


def make_var(name):
    """A variable of the build tree's Makefile, fully expanded."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}
    r = run(["make", "-s", "--no-print-directory", "-C", BUILD,
             "-f", "Makefile", "-f", "-", "print-" + name],
            input="print-%%:\n\t@echo $(%s)\n" % name, env=env)
    assert r.returncode == 0, r
    return r.stdout.strip().splitlines()[-1] if r.stdout.strip() else ""


# ---- the Dockerfile, as instructions grouped by stage ----

def dockerfile():
    """[(stage name, [(INSTRUCTION, text)])], continuation lines joined."""
    text = re.sub(r"\\\n", " ", read("examples", "k8s", "Dockerfile"))
    stages = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        ins, _, rest = line.partition(" ")
        ins = ins.upper()
        if ins == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", rest, re.I)
            stages.append((m.group(2) or m.group(1), [("FROM", rest)]))
        else:
            assert stages, "%s before FROM" % ins
            stages[-1][1].append((ins, rest))
    assert len(stages) >= 2, "expected a build stage and the image's"
    return stages


def runs(stage):
    return " && ".join(t for i, t in stage[1] if i == "RUN")


def apt_packages(stage):
    """The literal package names of the stage's apt-get install."""
    pkgs = []
    for m in re.finditer(r"apt-get install ([^&;|]*)", runs(stage)):
        for w in shlex.split(re.sub(r"\$\([^)]*\)", " ", m.group(1))):
            if re.match(r"^[a-z0-9][a-z0-9.+-]+$", w):
                pkgs.append(w)
    return pkgs


def package_version():
    m = re.search(r"AC_INIT\(\[([^]]+)\],\s*\[([^]]+)\]", read("configure.ac"))
    return m.group(1), m.group(2)


# ---- the manifests ----

def manifests():
    import yaml
    docs = []
    for path in sorted(glob.glob(os.path.join(K8S, "**", "*.yaml"),
                                 recursive=True)):
        with open(path) as f:
            for doc in yaml.safe_load_all(f):
                assert isinstance(doc, dict) and "kind" in doc, path
                docs.append((os.path.relpath(path, K8S), doc))
    return docs


def containers(doc):
    spec = doc.get("spec", {})
    pod = spec.get("template", {}).get("spec", spec)
    return pod.get("initContainers", []) + pod.get("containers", [])


def test_manifests_parse():
    try:
        docs = manifests()
    except ImportError:
        rt.skip("no python3-yaml to read the manifests")
    kinds = {d["kind"] for _, d in docs}
    assert {"Deployment", "Job", "StatefulSet"} <= kinds, kinds
    images = [c["image"] for _, d in docs for c in containers(d)]
    assert any("/rdzv:" in i for i in images), images


def programs_run():
    """{program: where} for what the manifests and README run in the image."""
    progs = {}
    for name, doc in manifests():
        for c in containers(doc):
            if "/rdzv:" not in c.get("image", ""):
                continue
            argv = c.get("command", []) + c.get("args", [])
            assert argv, (name, c["name"])
            progs[os.path.basename(argv[0])] = name
            if "--" in argv[1:]:
                # The training program rdzv-agent starts.
                prog = argv[argv.index("--", 1) + 1]
                progs[os.path.basename(prog)] = name + " (after --)"
    for m in re.finditer(r"kubectl exec \S+ -- (\S+)", read("examples", "k8s",
                                                            "README.md")):
        progs[m.group(1)] = "README.md (kubectl exec)"
    # The README's promise: a python script after --.
    if re.search(r"python script", read("examples", "k8s", "README.md")):
        progs["python3"] = "README.md (a python script after --)"
    return progs


def test_image_from_the_release_tarball():
    pkg, version = package_version()
    stages = dockerfile()
    build, image = stages[0], stages[-1]
    tarball = "%s-%s.tar.gz" % (pkg, version)
    copies = [t.split()[:-1] for i, t in build[1] if i == "COPY"]
    assert any(fnmatch.fnmatch(tarball, s) for c in copies for s in c), \
        "the build stage copies no %s (make dist's): %s" % (tarball, copies)
    r = runs(build)
    for step in ("tar xzf", "./configure", "make install DESTDIR="):
        assert step in r, "the build stage lacks %r: %s" % (step, r)
    destdir = re.search(r"make install DESTDIR=(\S+)", r).group(1)
    assert any(i == "COPY" and t.startswith("--from=%s %s" % (build[0],
               destdir)) for i, t in image[1]), \
        "the image does not copy the build stage's %s" % destdir
    # The manifests run the image of this version.
    for name, doc in manifests():
        for c in containers(doc):
            if "/rdzv:" in c.get("image", ""):
                assert c["image"].endswith(":" + version), (name, c["image"])


def test_image_has_every_program_run():
    try:
        progs = programs_run()
    except ImportError:
        rt.skip("no python3-yaml to read the manifests")
    stages = dockerfile()
    build, image = stages[0], stages[-1]
    have = {}
    # make install: the programs this tree installs.
    if "make install" in runs(build):
        for p in (make_var("bin_PROGRAMS") + " " +
                  make_var("sbin_PROGRAMS")).split():
            have[os.path.basename(p)] = "make install"
    # Programs the build stage installs by hand: each one this tree builds.
    built = set()
    for mk in glob.glob(os.path.join(SRC, "*", "local.mk")):
        with open(mk) as f:
            for m in re.finditer(r"^\w*_PROGRAMS\s*\+?=(.*)", f.read(), re.M):
                built |= set(m.group(1).split())
    for src, dst in re.findall(INSTALL_RE, runs(build)):
        assert src in built, "the Dockerfile installs %s, which this tree " \
            "does not build (%s)" % (src, sorted(built))
        have[dst] = "install " + src
    # The virtualenv first on the image's PATH: python3, with rdzv's helper
    # pip-installed from the tarball's python/.
    env = " ".join(t for i, t in image[1] if i == "ENV")
    for venv in re.findall(r"python3 -m venv (\S+)", runs(image)):
        if re.search(r"PATH=%s/bin:" % re.escape(venv), env):
            for p in ("python3", "python", "pip"):
                have[p] = "virtualenv " + venv
            pip = re.search(r"%s/bin/pip install (?:-\S+ )*(\S+)" %
                            re.escape(venv), runs(image))
            assert pip, "nothing pip-installed into %s" % venv
            copied = [t for i, t in image[1] if i == "COPY" and
                      t.split()[-1].rstrip("/") == pip.group(1).rstrip("/")]
            assert copied and "/python" in copied[0].split()[-2], \
                "%s is not the tarball's python/: %s" % (pip.group(1), copied)
            have["rdzv (python)"] = "pip install " + copied[0]
    missing = {p: why for p, why in progs.items() if p not in have}
    assert not missing, "run but not in the image: %s (the image has %s)" % (
        missing, sorted(have))
    if "python3" in progs:
        assert "rdzv (python)" in have, "python3 without rdzv's helper"
    for p in ("rdzvd", "rdzv-agent"):
        assert p in progs, "the manifests no longer run %s? %s" % (p, progs)


def pkg_config_modules(ac):
    """[(VAR, [module], required)] from configure.ac's PKG_CHECK_MODULES."""
    out = []
    for m in re.finditer(r"PKG_CHECK_MODULES\(\[(\w+)\],\s*\[([^]]*)\]"
                         r"(\s*,\s*\[)?", ac):
        mods = [w for w in m.group(2).split()
                if not re.match(r"^[<>=!]+$|^[0-9.]+$", w)]
        out.append((m.group(1), mods, m.group(3) is None))
    return out


def owner(path):
    """The Debian package that holds path (dpkg -S), or None."""
    r = run(["dpkg", "-S", path])
    if r.returncode != 0:
        return None
    return r.stdout.split(":", 1)[0].split(",")[0].strip()


def covered(pkgs):
    """pkgs and what they depend on directly (a metapackage such as
    libopenblas-dev brings the package that holds the files), as this
    machine's dpkg knows them."""
    out = set(pkgs)
    for p in pkgs:
        r = run(["dpkg-query", "-W", "-f", "${Depends}", p])
        if r.returncode == 0:
            for alt in re.split(r"[,|]", r.stdout):
                if alt.strip():
                    out.add(alt.split()[0].split(":")[0])
    return out


def test_build_stage_has_what_configure_requires():
    for tool in ("dpkg", "pkg-config"):
        if shutil.which(tool) is None:
            rt.skip("no %s to find the packages of configure's checks" % tool)
    ac = read("configure.ac")
    stages = dockerfile()
    have = set(apt_packages(stages[0]))
    deps = covered(have)
    mods = pkg_config_modules(ac)
    assert len(mods) >= 5, "configure.ac's checks not read: %s" % mods
    need = {}
    for var, names, required in mods:
        if required:
            for n in names:
                need[n] = "configure.ac " + var
    # What the programs installed by hand use, optional to configure.
    used = set()
    for src, _ in re.findall(INSTALL_RE, runs(stages[0])):
        canon = re.sub(r"[^A-Za-z0-9@]", "_", src)
        for mk in glob.glob(os.path.join(SRC, "*", "local.mk")):
            with open(mk) as f:
                for m in re.finditer(r"^%s_\w+\s*\+?=(.*(?:\\\n.*)*)" %
                                     re.escape(canon), f.read(), re.M):
                    used |= set(re.findall(r"\$\((\w+)_(?:CFLAGS|LIBS)\)",
                                           m.group(1)))
    for var, names, required in mods:
        if not required and var in used:
            for n in names:
                need[n] = "%s (%s)" % (var, "the example's")
    for h in re.findall(r"AC_CHECK_HEADER\(\[([^]]+)\],\s*\[[^]]*\],\s*"
                        r"\[AC_MSG_ERROR", ac):
        need["<%s>" % h] = "configure.ac AC_CHECK_HEADER"
    assert need, "nothing required read from configure.ac"
    missing = []
    for n, why in sorted(need.items()):
        if n.startswith("<"):
            path = os.path.join("/usr/include", n[1:-1])
        else:
            r = run(["pkg-config", "--variable=pcfiledir", n])
            assert r.returncode == 0, \
                "%s (%s) is not installed here: cannot tell its package" % (
                    n, why)
            path = os.path.join(r.stdout.strip(), n + ".pc")
        pkg = owner(path) or owner(os.path.realpath(path))
        assert pkg, "no package here holds %s (%s)" % (path, why)
        if pkg not in deps:
            missing.append("%s (%s, for %s)" % (pkg, path, why))
    assert not missing, "the Dockerfile's build stage lacks %s; it " \
        "installs %s" % (", ".join(missing), sorted(have))


def test_runtime_packages_of_the_built_programs():
    for tool in ("dpkg", "ldd"):
        if shutil.which(tool) is None:
            rt.skip("no %s to read the programs' libraries" % tool)
    script = os.path.join(K8S, "runtime-packages.sh")
    stages = dockerfile()
    # The build stage runs it on what it installed; the image installs
    # what it printed.
    m = re.search(r"runtime-packages\.sh [^>]*>\s*(\S+)", runs(stages[0]))
    assert m, "the build stage does not run runtime-packages.sh"
    out = m.group(1)
    assert any(i == "COPY" and out in t for i, t in stages[-1][1]), \
        "the image does not copy %s" % out
    assert re.search(r"apt-get install [^&]*\$\(cat \S*%s\)" %
                     re.escape(os.path.basename(out)), runs(stages[-1])), \
        "the image does not install the packages in %s" % out
    progs = []
    for p in ("rdzvd/rdzvd", "agent/rdzv-agent", "client/rdzvctl",
              "examples/ddp_mlp"):
        d, b = os.path.split(p)
        real = os.path.join(BUILD, d, ".libs", b)
        progs.append(real if os.path.exists(real) else os.path.join(BUILD, p))
    progs = [p for p in progs if os.path.exists(p)]
    progs += glob.glob(os.path.join(BUILD, "libworker", ".libs",
                                    "librdzvworker.so"))
    assert len(progs) >= 3, progs
    r = run(["sh", script, "--own", BUILD] + progs)
    assert r.returncode == 0, "runtime-packages.sh: %s%s" % (r.stdout,
                                                             r.stderr)
    pkgs = r.stdout.split()
    assert pkgs, "runtime-packages.sh named no package"
    for lib in ("libevent_core", "libjansson", "libssl"):
        o = owner("*/%s*.so.*" % lib)
        assert o in pkgs, "%s's package %s not in %s" % (lib, o, pkgs)
    r = run(["dpkg-query", "-W", "-f", "${Status}\n"] + pkgs)
    assert r.returncode == 0 and all(l.endswith(" installed")
                                     for l in r.stdout.splitlines()), r
    # A library no package holds is an error, not a silent gap.
    r = run(["sh", script, "/nonexistent/program"])
    assert r.returncode != 0 and "nonexistent" in r.stderr, r


if __name__ == "__main__":
    rt.main(globals())
