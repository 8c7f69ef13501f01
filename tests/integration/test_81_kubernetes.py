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
