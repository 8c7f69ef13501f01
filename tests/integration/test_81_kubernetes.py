"""Tier 81: the container image and the Kubernetes manifests (issue 6).

No Docker engine nor cluster is needed: the files are checked.

  docker/k8s        renders offline with `kubectl kustomize`; the rendered
                    objects: zkresp is a native sidecar, its probes hit the
                    real endpoints on its --metrics-port, the restricted Pod
                    Security Standard, the policy ConfigMap mounted where
                    --policy points (and the policy in it loads), the grace
                    period longer than --shutdown-grace, the ZooKeeper
                    StatefulSet with its headless Service and PDB
  docker/Dockerfile the runtime packages are exactly those `ldd build/zkresp`
                    maps to (dpkg -S), so the image cannot miss a library
  docker/compose    a 3-node ensemble and two sidecars
  docker/k8s-tls    the overlay with TLS to ZooKeeper (issue 16), rendered
                    with certificates from docker/tls/make-certs.sh: a
                    stunnel native sidecar before zkresp, its config and
                    certificates mounted, zkresp's --zk on the tunnel's
                    loopback ports, a ZooKeeper with only a TLS client port;
                    then the rendered tunnel config and ZooKeeper settings
                    run for real (ports and paths made local) and carry a
                    lock, and the rendered health check answers
  docker/compose.tls.yaml  the same for compose
"""

import os
import re
import shutil
import subprocess

import pytest
import yaml

import harness

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
K8S = os.path.join(ROOT, "docker", "k8s")
K8S_TLS = os.path.join(ROOT, "docker", "k8s-tls")
COMPOSE_TLS = os.path.join(ROOT, "docker", "compose.tls.yaml")
DOCKERFILE = os.path.join(ROOT, "docker", "Dockerfile")
COMPOSE = os.path.join(ROOT, "docker", "compose.yaml")
KUBECTL = shutil.which("kubectl")

# In debian:bookworm-slim already (Essential: yes): never installed on top.
BASE_IMAGE_PKGS = {"libc6"}


# ------------------------------------------------------------------ helpers

def args_of(container):
    """--name=value / --name value flags of a container -> {name: value}."""
    out = {}
    argv = list(container.get("command", [])[1:] if container.get("command") else []) + \
        list(container.get("args", []))
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            if "=" in a:
                k, v = a[2:].split("=", 1)
            else:
                k, v = a[2:], argv[i + 1] if i + 1 < len(argv) else ""
                i += 1
            out[k] = v
        i += 1
    return out


@pytest.fixture(scope="module")
def rendered():
    assert KUBECTL, "kubectl not found (Debian package kubernetes-client)"
    p = subprocess.run([KUBECTL, "kustomize", K8S], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 0, "kubectl kustomize failed: %s" % p.stderr.decode(errors="replace")
    docs = [d for d in yaml.safe_load_all(p.stdout) if d]
    assert docs, "kubectl kustomize rendered nothing"
    return docs


def one(docs, kind, name=None):
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, "expected one %s%s, found %d" % (kind, " " + name if name else "", len(found))
    return found[0]


def sidecar_of(deploy):
    spec = deploy["spec"]["template"]["spec"]
    found = [c for c in spec.get("initContainers", []) if c["name"] == "zkresp"]
    assert len(found) == 1, "no zkresp init container in %s" % deploy["metadata"]["name"]
    return spec, found[0]


def container_port(container, port):
    """A probe's port (number or name) as a number."""
    if isinstance(port, int):
        return port
    for p in container.get("ports", []):
        if p.get("name") == port:
            return p["containerPort"]
    raise AssertionError("port %r is not declared by container %s" % (port, container["name"]))


# ------------------------------------------------------------------ kustomize

def test_kustomize_renders_the_objects(rendered):
    kinds = sorted(d["kind"] for d in rendered)
    for k in ("ConfigMap", "Deployment", "StatefulSet", "Service", "PodDisruptionBudget"):
        assert k in kinds, "%s missing from the rendered manifests (%s)" % (k, kinds)


def test_zkresp_is_a_native_sidecar(rendered):
    deploy = one(rendered, "Deployment")
    spec, zk = sidecar_of(deploy)
    assert zk.get("restartPolicy") == "Always", "zkresp must be an init container with restartPolicy: Always"
    assert spec["containers"], "the pod has no application container"
    assert all(c["name"] != "zkresp" for c in spec["containers"])
    # The application talks to the sidecar's Redis port on loopback.
    a = args_of(zk)
    assert a.get("bind", "127.0.0.1").startswith("127."), "the Redis port must stay on loopback"


def test_probes_match_the_metrics_flags(rendered):
    _, zk = sidecar_of(one(rendered, "Deployment"))
    a = args_of(zk)
    port = int(a["metrics-port"])
    assert port > 0
    assert a.get("metrics-bind") == "0.0.0.0", "the kubelet probes the pod IP: --metrics-bind 0.0.0.0"
    expect = {"startupProbe": "/healthz", "livenessProbe": "/healthz", "readinessProbe": "/readyz"}
    for probe, path in expect.items():
        assert probe in zk, "%s missing" % probe
        get = zk[probe].get("httpGet")
        assert get, "%s must be an httpGet" % probe
        assert get["path"] == path, "%s path %r, want %r" % (probe, get["path"], path)
        assert container_port(zk, get["port"]) == port, "%s port differs from --metrics-port" % probe
    assert any(p["containerPort"] == port for p in zk.get("ports", [])), "the metrics port is not declared"
    res = zk.get("resources", {})
    assert res.get("requests") and res.get("limits", {}).get("memory"), "zkresp needs requests and a memory limit"


def _restricted(pod_spec, c, who):
    psc = pod_spec.get("securityContext", {})
    sc = c.get("securityContext", {})
    assert sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True, "%s: runAsNonRoot" % who
    uid = sc.get("runAsUser", psc.get("runAsUser"))
    assert uid is None or uid != 0, "%s: runAsUser 0" % who
    assert sc.get("readOnlyRootFilesystem") is True, "%s: readOnlyRootFilesystem" % who
    assert sc.get("allowPrivilegeEscalation") is False, "%s: allowPrivilegeEscalation" % who
    assert not sc.get("privileged"), "%s: privileged" % who
    assert sc.get("capabilities", {}).get("drop") == ["ALL"], "%s: capabilities drop ALL" % who
    assert not sc.get("capabilities", {}).get("add"), "%s: capabilities added" % who
    seccomp = sc.get("seccompProfile", psc.get("seccompProfile", {}))
    assert seccomp.get("type") == "RuntimeDefault", "%s: seccompProfile RuntimeDefault" % who


@pytest.mark.parametrize("kind", ["Deployment", "StatefulSet"])
def test_restricted_pod_security(rendered, kind):
    obj = one(rendered, kind)
    spec = obj["spec"]["template"]["spec"]
    assert not spec.get("hostNetwork") and not spec.get("hostPID") and not spec.get("hostIPC")
    for c in spec.get("initContainers", []) + spec["containers"]:
        _restricted(spec, c, "%s/%s" % (obj["metadata"]["name"], c["name"]))
    for v in spec.get("volumes", []):
        assert "hostPath" not in v, "hostPath volume %s" % v["name"]


def test_policy_configmap_is_mounted_where_policy_points(rendered, make_zkresp):
    spec, zk = sidecar_of(one(rendered, "Deployment"))
    policy = args_of(zk)["policy"]
    mdir, fname = os.path.split(policy)
    mounts = [m for m in zk.get("volumeMounts", []) if m["mountPath"].rstrip("/") == mdir]
    assert len(mounts) == 1, "nothing is mounted at %s (--policy %s)" % (mdir, policy)
    vol = [v for v in spec["volumes"] if v["name"] == mounts[0]["name"]]
    assert len(vol) == 1 and "configMap" in vol[0], "the policy mount is not a ConfigMap volume"
    cm = one(rendered, "ConfigMap", vol[0]["configMap"]["name"])
    items = vol[0]["configMap"].get("items")
    key = fname if not items else [i["key"] for i in items if i["path"] == fname][0]
    assert key in cm["data"], "ConfigMap %s has no %s" % (cm["metadata"]["name"], key)
    # And that policy loads: a zkresp started with it answers.
    d = harness.new_dir("k8s-policy")
    path = os.path.join(d, fname)
    with open(path, "w") as f:
        f.write(cm["data"][key])
    z = make_zkresp(extra=["--policy", path])
    with z.client() as c:
        assert c.cmd("SET", "lock", "t", "NX", "PX", "10000") == b"+OK\r\n"
    assert "policy=%s" % path in z.log_tail(400)


def test_zookeeper_credentials_come_from_a_secret(rendered, make_zk, make_zkresp):
    """Issue 16: --zk-auth-file points into a Secret volume the sidecar's
    user may read, the Secret holds user:password, and a zkresp given those
    credentials makes its nodes theirs alone."""
    spec, zk = sidecar_of(one(rendered, "Deployment"))
    auth = args_of(zk).get("zk-auth-file")
    assert auth, "the sidecar gets no ZooKeeper credentials (--zk-auth-file)"
    assert args_of(zk).get("zk-acl", "creator") == "creator"
    mdir, fname = os.path.split(auth)
    mounts = [m for m in zk.get("volumeMounts", []) if m["mountPath"].rstrip("/") == mdir]
    assert len(mounts) == 1 and mounts[0].get("readOnly"), "nothing read-only is mounted at %s" % mdir
    vol = [v for v in spec["volumes"] if v["name"] == mounts[0]["name"]]
    assert len(vol) == 1 and "secret" in vol[0], "the credentials mount is not a Secret volume"
    sv = vol[0]["secret"]
    mode = sv.get("defaultMode", 0o644)
    group = spec["securityContext"].get("fsGroup")
    assert not mode & 0o007, "the credentials are readable by everyone (mode %o)" % mode
    assert group is not None and mode & 0o040, "the sidecar's user cannot read its credentials"
    secret = one(rendered, "Secret", sv["secretName"])
    items = sv.get("items")
    key = fname if not items else [i["key"] for i in items if i["path"] == fname][0]
    import base64
    data = secret.get("stringData", {}).get(key)
    if data is None:
        data = base64.b64decode(secret["data"][key]).decode()
    user, _, password = data.strip().partition(":")
    assert user and password, "the Secret's %s is not user:password" % key
    zkd = make_zk()
    z = make_zkresp(zk_target=zkd, zk_auth=data.strip())
    with z.client() as c:
        assert c.cmd("SET", "lock", "t", "NX", "PX", "10000") == b"+OK\r\n"
    outsider = harness.kazoo_client(zkd, auth="")
    acls, _ = harness.kazoo_client(zkd, auth=data.strip()).get_acls(z.root)
    assert [(a.id.scheme, a.perms) for a in acls] == [("digest", 31)]
    from kazoo.exceptions import NoAuthError
    with pytest.raises(NoAuthError):
        outsider.get_children(z.root)


def test_grace_period_exceeds_shutdown_grace(rendered):
    spec, zk = sidecar_of(one(rendered, "Deployment"))
    grace_ms = int(args_of(zk).get("shutdown-grace", "5000"))
    assert spec["terminationGracePeriodSeconds"] * 1000 > grace_ms, \
        "terminationGracePeriodSeconds must exceed --shutdown-grace"


def test_zookeeper_ensemble(rendered):
    sts = one(rendered, "StatefulSet")
    assert sts["spec"]["replicas"] == 3
    svc = one(rendered, "Service", sts["spec"]["serviceName"])
    assert svc["spec"].get("clusterIP") == "None", "the StatefulSet's service must be headless"
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert all(labels.get(k) == v for k, v in svc["spec"]["selector"].items())
    pdb = one(rendered, "PodDisruptionBudget")
    assert all(labels.get(k) == v for k, v in pdb["spec"]["selector"]["matchLabels"].items())
    assert pdb["spec"].get("maxUnavailable") == 1 or pdb["spec"].get("minAvailable") == 2
    _, zk = sidecar_of(one(rendered, "Deployment"))
    hosts = [h.rsplit(":", 1)[0] for h in args_of(zk)["zk"].split(",")]
    want = ["%s-%d.%s" % (sts["metadata"]["name"], i, svc["metadata"]["name"]) for i in range(3)]
    assert hosts == want, "--zk %r does not name the ensemble's pods %r" % (hosts, want)


# ------------------------------------------------------------------ the image

def dockerfile_stages():
    stages, cur = [], None
    with open(DOCKERFILE) as f:
        text = f.read().replace("\\\n", " ")
    for line in text.splitlines():
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        word, _, rest = s.partition(" ")
        if word.upper() == "FROM":
            cur = {"from": rest.split()[0], "lines": []}
            stages.append(cur)
        elif cur is not None:
            cur["lines"].append((word.upper(), rest.strip()))
    return stages


def apt_installed(stage):
    pkgs = set()
    for word, rest in stage["lines"]:
        if word != "RUN":
            continue
        for cmd in re.split(r"&&|;", rest):
            t = cmd.split()
            if len(t) >= 2 and t[0] == "apt-get" and "install" in t:
                pkgs.update(x for x in t[t.index("install") + 1:] if not x.startswith("-"))
    return pkgs


def ldd_packages(binary):
    p = subprocess.run(["ldd", binary], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
    assert p.returncode == 0, p.stdout
    pkgs = {}
    for line in p.stdout.decode().splitlines():
        m = re.search(r"=>\s+(/\S+)", line) or re.match(r"\s*(/\S+)\s+\(", line)
        if not m:
            continue
        lib = m.group(1)
        cands = {lib, os.path.realpath(lib)}
        for c in list(cands):
            if c.startswith("/usr/"):
                cands.add(c[4:])
            else:
                cands.add("/usr" + c)
        owner = None
        for c in sorted(cands):
            q = subprocess.run(["dpkg", "-S", c], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            if q.returncode == 0:
                owner = q.stdout.decode().split(":", 1)[0].split(",")[0].strip()
                break
        assert owner, "no Debian package owns %s" % lib
        pkgs[owner] = lib
    return pkgs


DLOPENED = {"lua-cjson": "5.4/cjson.so"}


def test_runtime_packages_match_what_zkresp_links(tmp_path=None):
    binary = os.path.join(ROOT, "build", "zkresp")
    assert os.access(binary, os.X_OK), "build/zkresp missing"
    needed = ldd_packages(binary)
    assert "libzookeeper-mt2" in needed and "libuv1" in needed  # the mapping works
    stages = dockerfile_stages()
    assert len(stages) >= 2, "the Dockerfile must be multi-stage"
    runtime = stages[-1]
    installed = apt_installed(runtime)
    want = set(needed) - BASE_IMAGE_PKGS
    # Lua C modules zkresp loads at run time (package.cpath), not linked:
    # Debian's lua-cjson for the scripts' cjson (scripts/lua_cjson.lua).
    for pkg, module in DLOPENED.items():
        q = subprocess.run(["dpkg", "-L", pkg], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert q.returncode == 0 and module in q.stdout.decode(), "%s does not provide %s" % (pkg, module)
        want.add(pkg)
    missing = want - installed
    extra = installed - want
    assert not missing, "the runtime image misses %s (for %s)" % (
        sorted(missing), [needed[m] for m in sorted(missing)])
    assert not extra, "the runtime image installs %s, which build/zkresp does not link" % sorted(extra)


def test_dockerfile_layout():
    stages = dockerfile_stages()
    for s in stages:
        assert s["from"].startswith("debian:bookworm-slim"), "stage FROM %s" % s["from"]
    runtime = stages[-1]
    lines = runtime["lines"]
    users = [rest for w, rest in lines if w == "USER"]
    assert users and users[-1].split(":")[0] not in ("0", "root"), "the image must not run as root"
    uid = int(users[-1].split(":")[0])
    copies = [rest for w, rest in lines if w == "COPY"]
    assert any(c.endswith(" /usr/share/zkresp/scripts") for c in copies), "scripts not under /usr/share/zkresp/scripts"
    assert any(re.search(r" /etc/zkresp/\S*$", c) for c in copies), "no default policy under /etc/zkresp/"
    # The binary's own fallback scripts directory is where the image puts them.
    with open(os.path.join(ROOT, "sidecar", "config.c")) as f:
        assert '"/usr/share/zkresp/scripts"' in f.read()
    # The manifests run as the image's user.
    with open(os.path.join(K8S, "deployment.yaml")) as f:
        assert "runAsUser: %d" % uid in f.read()


def test_compose_has_an_ensemble_and_two_sidecars():
    with open(COMPOSE) as f:
        doc = yaml.safe_load(f)
    svcs = doc["services"]
    zks = {n: s for n, s in svcs.items() if "zookeeper" in str(s.get("image", ""))}
    assert len(zks) == 3, "want a 3-node ZooKeeper ensemble, got %s" % sorted(zks)
    ids = sorted(str(s["environment"]["ZOO_MY_ID"]) for s in zks.values())
    assert ids == ["1", "2", "3"]
    for s in zks.values():
        servers = s["environment"]["ZOO_SERVERS"].split()
        assert len(servers) == 3 and all(any(n in x for x in servers) for n in zks)
    sidecars = {n: s for n, s in svcs.items() if s.get("build")}
    assert len(sidecars) == 2
    for n, s in sidecars.items():
        assert s["build"]["dockerfile"] == "docker/Dockerfile"
        a = args_of({"args": s["command"]})
        assert sorted(h.split(":")[0] for h in a["zk"].split(",")) == sorted(zks)
        assert a.get("bind") == "127.0.0.1" or s["environment"].get("ZKRESP_REQUIREPASS"), \
            "%s: a non-loopback bind needs a password" % n
        # Issue 16: ZooKeeper credentials from a compose secret.
        auth = a.get("zk-auth-file")
        assert auth, "%s gets no ZooKeeper credentials" % n
        targets = {(x["target"] if isinstance(x, dict) else "/run/secrets/" + x):
                   (x["source"] if isinstance(x, dict) else x) for x in s.get("secrets", [])}
        assert auth in targets, "%s: --zk-auth-file %s is not a secret's target" % (n, auth)
        src = doc["secrets"][targets[auth]]["file"]
        m = re.match(r"\$\{[A-Z_]+:-(.+)\}$", src)
        path = os.path.join(os.path.dirname(COMPOSE), m.group(1) if m else src)
        with open(path) as f:
            user, _, password = f.read().strip().partition(":")
        assert user and password, "%s is not user:password" % path


# ------------------------------------------------------------------ TLS (issue 16)

@pytest.fixture(scope="module")
def rendered_tls():
    """docker/k8s-tls rendered from a copy of docker/k8s and docker/k8s-tls
    whose certs/ docker/tls/make-certs.sh has just filled."""
    assert KUBECTL, "kubectl not found (Debian package kubernetes-client)"
    d = harness.new_dir("k8s-tls")
    shutil.copytree(K8S, os.path.join(d, "k8s"))
    shutil.copytree(K8S_TLS, os.path.join(d, "k8s-tls"), ignore=shutil.ignore_patterns("certs"))
    p = subprocess.run([harness.MAKE_CERTS, os.path.join(d, "k8s-tls", "certs")], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=120)
    assert p.returncode == 0, p.stdout.decode(errors="replace")
    p = subprocess.run([KUBECTL, "kustomize", os.path.join(d, "k8s-tls")], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=120)
    assert p.returncode == 0, "kubectl kustomize docker/k8s-tls failed: %s" % p.stderr.decode(errors="replace")
    return [x for x in yaml.safe_load_all(p.stdout) if x]


def stunnel_conf(text):
    """stunnel.conf -> (global options, {service: options})."""
    glob, services, cur = {}, {}, None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith((";", "#")):
            continue
        if line.startswith("["):
            cur = services.setdefault(line.strip("[]"), {})
            continue
        k, _, v = line.partition("=")
        (cur if cur is not None else glob)[k.strip()] = v.strip()
    return glob, services


def secret_files(secret):
    import base64
    out = {k: base64.b64decode(v) for k, v in secret.get("data", {}).items()}
    out.update({k: v.encode() for k, v in secret.get("stringData", {}).items()})
    return out


def mounted_secret(spec, container, path):
    """(Secret volume source, the file's key) of the Secret mounted at
    path's directory in container, read-only."""
    mdir, fname = os.path.split(path)
    mounts = [m for m in container.get("volumeMounts", []) if m["mountPath"].rstrip("/") == mdir]
    assert len(mounts) == 1 and mounts[0].get("readOnly"), "%s: nothing read-only at %s" % (container["name"], mdir)
    vol = [v for v in spec["volumes"] if v["name"] == mounts[0]["name"]]
    assert len(vol) == 1 and "secret" in vol[0], "%s: %s is not a Secret volume" % (container["name"], mdir)
    sv = vol[0]["secret"]
    items = sv.get("items")
    key = fname if not items else [i["key"] for i in items if i["path"] == fname][0]
    mode = sv.get("defaultMode", 0o644)
    assert not mode & 0o007, "%s is readable by everyone (mode %o)" % (sv["secretName"], mode)
    assert spec["securityContext"].get("fsGroup") is not None and mode & 0o040, \
        "%s: the container's group cannot read %s" % (container["name"], sv["secretName"])
    return sv, key


def tunnel_of(rendered_tls):
    deploy = one(rendered_tls, "Deployment")
    spec = deploy["spec"]["template"]["spec"]
    inits = spec.get("initContainers", [])
    names = [c["name"] for c in inits]
    assert "zk-tunnel" in names and "zkresp" in names, names
    assert names.index("zk-tunnel") < names.index("zkresp"), \
        "the tunnel must start before zkresp and stop after it: %s" % names
    tunnel = inits[names.index("zk-tunnel")]
    zk = inits[names.index("zkresp")]
    assert tunnel.get("restartPolicy") == "Always", "the tunnel must be a native sidecar"
    # Its config: the ConfigMap file its argument names.
    conf_path = (tunnel.get("args") or tunnel.get("command"))[-1]
    mounts = [m for m in tunnel["volumeMounts"] if m["mountPath"] == conf_path
              or m["mountPath"].rstrip("/") == os.path.dirname(conf_path)]
    assert len(mounts) == 1, "stunnel's config %s is not mounted" % conf_path
    vol = [v for v in spec["volumes"] if v["name"] == mounts[0]["name"]][0]
    cm = one(rendered_tls, "ConfigMap", vol["configMap"]["name"])
    key = mounts[0].get("subPath") or os.path.basename(conf_path)
    return spec, tunnel, zk, cm["data"][key]


def test_tls_overlay_keeps_the_base_and_adds_a_tunnel(rendered, rendered_tls):
    spec, tunnel, zk, _ = tunnel_of(rendered_tls)
    # Everything of the base is still there.
    base = {(d["kind"], d["metadata"]["name"]) for d in rendered}
    assert base <= {(d["kind"], d["metadata"]["name"]) for d in rendered_tls}
    _restricted(spec, tunnel, "zk-tunnel")
    assert tunnel.get("resources", {}).get("limits", {}).get("memory"), "the tunnel needs a memory limit"
    assert not tunnel.get("ports"), "the tunnel listens on the pod's loopback only"
    assert tunnel["image"].split(":")[0].endswith("zkresp-stunnel")


def test_tls_zkresp_reaches_zookeeper_only_through_the_tunnel(rendered_tls):
    spec, tunnel, zk, conf = tunnel_of(rendered_tls)
    glob, services = stunnel_conf(conf)
    assert glob.get("foreground") == "yes" and glob.get("client") == "yes"
    assert glob.get("verifyChain") == "yes", "the tunnel must verify the server's chain"
    hosts = args_of(zk)["zk"].split(",")
    accepts = {s["accept"]: s for s in services.values()}
    assert len(hosts) == 3 and all(h.startswith("127.0.0.1:") for h in hosts), \
        "--zk %r must target the tunnel on localhost" % hosts
    assert sorted(hosts) == sorted(accepts), "--zk %r vs the tunnel's accept %r" % (hosts, sorted(accepts))
    sts = one(rendered_tls, "StatefulSet")
    svc = one(rendered_tls, "Service", sts["spec"]["serviceName"])
    want = {"%s-%d.%s" % (sts["metadata"]["name"], i, svc["metadata"]["name"]) for i in range(3)}
    for s in services.values():
        host, port = s["connect"].rsplit(":", 1)
        assert host in want and port == "2281", s
        assert s.get("checkHost", glob.get("checkHost")) == host, "the tunnel must check %s's name" % host
    # CA, certificate and key from the Secret mounted in the tunnel.
    secrets = {}
    for opt in ("CAfile", "cert", "key"):
        path = glob[opt]
        sv, key = mounted_secret(spec, tunnel, path)
        files = secret_files(one(rendered_tls, "Secret", sv["secretName"]))
        assert key in files, "Secret %s has no %s (for %s)" % (sv["secretName"], key, opt)
        secrets[opt] = files[key]
    assert b"BEGIN CERTIFICATE" in secrets["CAfile"] and b"PRIVATE KEY" in secrets["key"]
    # zkresp itself mounts no TLS material: it never speaks TLS.
    assert all("tls" not in m["mountPath"] for m in zk.get("volumeMounts", []))


def _zk_tls_settings(rendered_tls):
    sts = one(rendered_tls, "StatefulSet")
    spec = sts["spec"]["template"]["spec"]
    c = [x for x in spec["containers"] if x["name"] == "zookeeper"][0]
    env = {e["name"]: e.get("value", "") for e in c.get("env", [])}
    return spec, c, env


def test_tls_zookeeper_has_only_a_tls_client_port(rendered_tls):
    spec, c, env = _zk_tls_settings(rendered_tls)
    servers = env["ZOO_SERVERS"].split()
    assert len(servers) == 3 and not any(";" in x for x in servers), \
        "ZOO_SERVERS must carry no plaintext client port: %s" % servers
    extra = dict(x.split("=", 1) for x in env["ZOO_CFG_EXTRA"].split())
    assert "clientPort" not in extra
    assert extra["serverCnxnFactory"] == harness.NETTY_FACTORY
    assert extra["secureClientPort"] == "2281" and extra["ssl.clientAuth"] == "need"
    for k in ("ssl.keyStore.location", "ssl.keyStore.passwordPath", "ssl.trustStore.location",
              "ssl.trustStore.passwordPath"):
        sv, key = mounted_secret(spec, c, extra[k])
        assert key in secret_files(one(rendered_tls, "Secret", sv["secretName"])), (k, key)
    assert [p["containerPort"] for p in c["ports"] if p["containerPort"] in (2181, 2281)] == [2281]
    assert c["livenessProbe"]["tcpSocket"]["port"] == 2281
    for svc in (d for d in rendered_tls if d["kind"] == "Service"):
        if "zookeeper" in svc["metadata"].get("labels", {}).get("app.kubernetes.io/name", ""):
            assert 2181 not in [p["port"] for p in svc["spec"]["ports"]], svc["metadata"]["name"]


def test_tls_rendered_settings_carry_a_lock(rendered_tls, make_zkresp):
    """The rendered tunnel config and ZooKeeper settings, run: ZooKeeper
    with ZOO_CFG_EXTRA's TLS lines (paths into the rendered Secrets' files,
    a local port), stunnel with the rendered stunnel.conf (paths and ports
    made local, checkHost and everything else as rendered), zkresp with the
    rendered --zk (ports remapped): a lock works, and the rendered readiness
    check (zkServer.sh status with CLIENT_JVMFLAGS) finds the server."""
    d = harness.new_dir("k8s-tls-run")
    for sec in (x for x in rendered_tls if x["kind"] == "Secret"):
        for k, v in secret_files(sec).items():
            with open(os.path.join(d, k), "wb") as f:
                f.write(v)
    spec, c, env = _zk_tls_settings(rendered_tls)
    local = lambda s: re.sub(r"/(tls|etc/zk-tunnel/tls)/", d + "/", s)  # noqa: E731
    secure = harness.free_port()
    tls_lines = []
    for x in env["ZOO_CFG_EXTRA"].split():
        k, v = x.split("=", 1)
        if k == "secureClientPort":
            v = str(secure)
        elif k == "quorumListenOnAllIPs":
            continue
        tls_lines.append("%s=%s" % (k, local(v)))
    tls_lines.append("secureClientPortAddress=127.0.0.1")
    os.rename(os.path.join(d, "client.pem"), os.path.join(d, "zkresp-client.pem"))
    os.rename(os.path.join(d, "client.key"), os.path.join(d, "zkresp-client.key"))
    files = harness.TlsFiles(existing=d)
    srv = harness.ZkServer(tls=files, plaintext=False, secure_port=secure, tls_cfg=tls_lines).start()
    try:
        _, tunnel, zk, conf = tunnel_of(rendered_tls)
        conf = conf.replace("/etc/zk-tunnel/tls/client.", "/etc/zk-tunnel/tls/zkresp-client.")
        ports = {}

        def accept(m):
            ports[m.group(1)] = harness.free_port()
            return "accept = 127.0.0.1:%d" % ports[m.group(1)]
        conf = re.sub(r"accept\s*=\s*(\S+)", accept, conf)
        conf = re.sub(r"connect\s*=\s*\S+", "connect = 127.0.0.1:%d" % secure, conf)
        conf = local(conf)
        path = os.path.join(d, "stunnel.conf")
        with open(path, "w") as f:
            f.write(conf)
        st = harness.Proc("stunnel", [harness.STUNNEL, path], d).start()
        try:
            hosts = ["127.0.0.1:%d" % ports[h] for h in args_of(zk)["zk"].split(",")]
            z = make_zkresp(zk_target=",".join(hosts))
            with z.client() as cl:
                assert cl.cmd("SET", "lock", "t", "NX", "PX", "10000") == b"+OK\r\n"
                assert cl.cmd("DELIFEQ", "lock", "t") == b":1\r\n"
        finally:
            st.term(10)
        flags = local(env["CLIENT_JVMFLAGS"])
        probe = c["readinessProbe"]["exec"]["command"]
        assert probe == ["zkServer.sh", "status"], probe
        p = subprocess.run([harness.ZK_SERVER_SH, "status", srv.cfg],
                           env=dict(os.environ, CLIENT_JVMFLAGS=flags, ZOO_LOG_DIR=srv.dir),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
        assert p.returncode == 0 and b"Mode: standalone" in p.stdout, p.stdout.decode(errors="replace")
    finally:
        srv.close()


def _compose_merged():
    """compose.yaml with compose.tls.yaml on top, merged as `docker compose
    -f a -f b` does for what these files use: mappings merge, command is
    replaced, secrets and volumes are appended."""
    with open(COMPOSE) as f:
        doc = yaml.safe_load(f)
    with open(COMPOSE_TLS) as f:
        over = yaml.safe_load(f)
    doc.setdefault("secrets", {}).update(over.get("secrets", {}))
    for name, svc in over["services"].items():
        base = doc["services"].setdefault(name, {})
        for k, v in svc.items():
            if isinstance(v, dict) and isinstance(base.get(k), dict):
                base[k] = dict(base[k], **v)
            elif k in ("secrets", "volumes") and k in base:
                base[k] = base[k] + v
            else:
                base[k] = v
    return doc


def test_compose_tls_tunnel_beside_each_sidecar():
    doc = _compose_merged()
    svcs = doc["services"]
    zks = {n: s for n, s in svcs.items() if "zookeeper" in str(s.get("image", ""))}
    assert len(zks) == 3
    for n, s in zks.items():
        env = s["environment"]
        assert str(env["ZOO_MY_ID"]) == n[-1]
        assert not any(";" in x for x in env["ZOO_SERVERS"].split()), "%s keeps a plaintext client port" % n
        extra = dict(x.split("=", 1) for x in env["ZOO_CFG_EXTRA"].split())
        assert extra["serverCnxnFactory"] == harness.NETTY_FACTORY and extra["secureClientPort"] == "2281"
        assert extra["ssl.clientAuth"] == "need"
        targets = {x["target"] for x in s["secrets"] if isinstance(x, dict)}
        for k in ("ssl.keyStore.location", "ssl.keyStore.passwordPath", "ssl.trustStore.location"):
            assert extra[k] in targets, "%s: %s is not mounted" % (n, extra[k])
        assert "-Dzookeeper.client.secure=true" in env["CLIENT_JVMFLAGS"]
    sidecars = {n: s for n, s in svcs.items() if s.get("build", {}).get("dockerfile") == "docker/Dockerfile"}
    assert len(sidecars) == 2
    for n, s in sidecars.items():
        a = args_of({"args": s["command"]})
        hosts = a["zk"].split(",")
        assert all(h.startswith("127.0.0.1:") for h in hosts), "%s: --zk %s is not the tunnel" % (n, hosts)
        assert a.get("zk-auth-file"), "%s lost its credentials" % n
        tunnels = [t for t in svcs.values() if t.get("network_mode") == "service:" + n]
        assert len(tunnels) == 1, "%s has no tunnel in its network namespace" % n
        t = tunnels[0]
        conf = [v.split(":")[0] for v in t["volumes"] if v.split(":")[1] == "/etc/zk-tunnel/stunnel.conf"]
        assert len(conf) == 1
        with open(os.path.join(os.path.dirname(COMPOSE_TLS), conf[0])) as f:
            glob, services = stunnel_conf(f.read())
        assert glob.get("verifyChain") == "yes" and glob.get("client") == "yes"
        assert sorted(hosts) == sorted(x["accept"] for x in services.values())
        for x in services.values():
            host, port = x["connect"].rsplit(":", 1)
            assert host in zks and port == "2281" and x.get("checkHost") == host, x
        mounted = {"/run/secrets/" + (x if isinstance(x, str) else x["source"]): x for x in t["secrets"]}
        for opt in ("CAfile", "cert", "key"):
            assert glob[opt] in mounted, "the tunnel's %s %s is not a secret" % (opt, glob[opt])
    # Every secret file is one docker/tls/make-certs.sh writes.
    d = harness.new_dir("compose-tls")
    p = subprocess.run([harness.MAKE_CERTS, d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert p.returncode == 0, p.stdout
    for name, sec in doc["secrets"].items():
        if sec["file"].startswith("./tls/out/"):
            assert os.path.exists(os.path.join(d, os.path.basename(sec["file"]))), (name, sec)
