"""Checks the deploy/ manifests: each object through the Kubernetes client's models (a
round trip must give back exactly the object: nothing unknown, misspelled or mistyped),
then the fields cni-rs-agent and the README rely on. Run by scripts/check-manifests.sh."""

import sys

import yaml
from kubernetes.client import ApiClient

MODELS = {
    ("v1", "ServiceAccount"): "V1ServiceAccount",
    ("rbac.authorization.k8s.io/v1", "ClusterRole"): "V1ClusterRole",
    ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding"): "V1ClusterRoleBinding",
    ("apps/v1", "DaemonSet"): "V1DaemonSet",
}
NAME, NAMESPACE = "cni-rs", "kube-system"
HOST_PATHS = {  # host path -> where cni-rs-agent expects it (its defaults)
    "/opt/cni/bin": "/host/opt/cni/bin",
    "/etc/cni/net.d": "/host/etc/cni/net.d",
    "/var/lib/cni": "/host/var/lib/cni",
    "/proc/sys/net": "/host/proc/sys/net",
}
HEALTH_PORT = 9277  # cni-rs-agent's --health-listen default

errors = []


def check(cond, what):
    if not cond:
        errors.append(what)


def through_schema(doc, where):
    """The object as the models understand it; a difference is a schema error."""
    model = MODELS.get((doc.get("apiVersion"), doc.get("kind")))
    if model is None:
        errors.append(f"{where}: unexpected {doc.get('apiVersion')}/{doc.get('kind')}")
        return None
    client = ApiClient()
    try:
        obj = client._ApiClient__deserialize(doc, model)
    except (ValueError, TypeError) as e:
        errors.append(f"{where}: {model}: {e}")
        return None
    back = client.sanitize_for_serialization(obj)
    if back != doc:
        errors.append(f"{where}: fields the {model} schema does not know or types it "
                      f"does not accept: {diff(doc, back)}")
    return obj


def diff(a, b, path=""):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in a:
            if k not in b:
                return f"{path}.{k}"
            d = diff(a[k], b[k], f"{path}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            d = diff(x, y, f"{path}[{i}]")
            if d:
                return d
        return None
    return None if a == b else f"{path} ({a!r} vs {b!r})"


def quantity_mi(q):
    units = {"Ki": 1 / 1024, "Mi": 1, "Gi": 1024}
    for unit, factor in units.items():
        if q.endswith(unit):
            return float(q[: -len(unit)]) * factor
    return float(q) / (1 << 20)


def check_rbac(objs):
    sa = objs.get("ServiceAccount")
    check(sa and sa.metadata.name == NAME and sa.metadata.namespace == NAMESPACE,
          f"ServiceAccount {NAMESPACE}/{NAME}")
    role = objs.get("ClusterRole")
    if role is None:
        errors.append("ClusterRole missing")
        return
    rules = [(r.api_groups, r.resources, sorted(r.verbs), r.resource_names,
              r.non_resource_ur_ls) for r in role.rules or []]
    # Nodes for routes; Pods, Namespaces and NetworkPolicies for NetworkPolicy; read only.
    read = ["get", "list", "watch"]
    check(rules == [([""], ["nodes", "pods", "namespaces"], read, None, None),
                    (["networking.k8s.io"], ["networkpolicies"], read, None, None)],
          f"ClusterRole: get/list/watch on nodes, pods, namespaces and networkpolicies "
          f"and nothing else, got {rules}")
    binding = objs.get("ClusterRoleBinding")
    if binding:
        check((binding.role_ref.kind, binding.role_ref.name) == ("ClusterRole", role.metadata.name),
              "ClusterRoleBinding binds the ClusterRole")
        check([(s.kind, s.name, s.namespace) for s in binding.subjects]
              == [("ServiceAccount", NAME, NAMESPACE)],
              "ClusterRoleBinding's only subject is the ServiceAccount")
    else:
        errors.append("ClusterRoleBinding missing")


def check_daemonset(ds):
    check(ds.metadata.namespace == NAMESPACE, "DaemonSet in kube-system")
    check(ds.spec.update_strategy.type == "RollingUpdate", "updateStrategy RollingUpdate")
    labels = ds.spec.template.metadata.labels or {}
    check(all(labels.get(k) == v for k, v in ds.spec.selector.match_labels.items()),
          "selector matches the pod template's labels")
    pod = ds.spec.template.spec
    check(pod.service_account_name == NAME, "serviceAccountName cni-rs")
    check(pod.host_network is True, "hostNetwork: true")
    check(pod.priority_class_name == "system-node-critical", "priorityClassName system-node-critical")
    tolerates_all = any(t.operator == "Exists" and t.key is None and t.effect is None
                        for t in pod.tolerations or [])
    for key, effect in [("node-role.kubernetes.io/control-plane", "NoSchedule"),
                        ("node.kubernetes.io/not-ready", "NoSchedule"),
                        ("node.kubernetes.io/not-ready", "NoExecute"),
                        ("node.kubernetes.io/network-unavailable", "NoSchedule")]:
        check(tolerates_all or any(t.key == key and t.effect in (effect, None)
                                   for t in pod.tolerations or []),
              f"tolerates {key}:{effect}")
    check(len(pod.containers) == 1, "one container")
    c = pod.containers[0]
    env = {e.name: e for e in c.env or []}
    node = env.get("NODE_NAME")
    check(node is not None and node.value_from is not None
          and node.value_from.field_ref.field_path == "spec.nodeName",
          "NODE_NAME from the downward API (spec.nodeName)")
    req = (c.resources.requests or {}) if c.resources else {}
    check("cpu" in req and "memory" in req, "resource requests for cpu and memory")
    check(quantity_mi(req.get("memory", "0")) <= 64, "small memory request (<= 64Mi)")
    cpu = req.get("cpu", "0")
    check((float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)) <= 0.1,
          "small cpu request (<= 100m)")
    sc = c.security_context
    check(sc is not None and not sc.privileged, "not privileged")
    caps = sc.capabilities if sc else None
    check(caps is not None and caps.drop == ["ALL"] and caps.add == ["NET_ADMIN"],
          "capabilities: drop ALL, add NET_ADMIN only")
    for name, probe, path in [("readinessProbe", c.readiness_probe, "/readyz"),
                              ("livenessProbe", c.liveness_probe, "/healthz")]:
        get = probe.http_get if probe else None
        check(get is not None and get.path == path and get.port == HEALTH_PORT
              and get.host == "127.0.0.1",
              f"{name}: GET http://127.0.0.1:{HEALTH_PORT}{path}")
    volumes = {v.name: v for v in pod.volumes or []}
    mounts = {m.name: m.mount_path for m in c.volume_mounts or []}
    for host, inside in HOST_PATHS.items():
        vol = [n for n, v in volumes.items() if v.host_path and v.host_path.path == host]
        check(len(vol) == 1 and mounts.get(vol[0]) == inside,
              f"hostPath {host} mounted at {inside}")
    read_only = {m.mount_path for m in c.volume_mounts or [] if m.read_only}
    check(not read_only & set(HOST_PATHS.values()),
          f"host paths the agent writes are mounted read-write: {read_only}")


def main(paths):
    objs, daemonsets = {}, []
    for path in paths:
        with open(path) as f:
            for i, doc in enumerate(yaml.safe_load_all(f)):
                if doc is None:
                    continue
                obj = through_schema(doc, f"{path}#{i}")
                if obj is None:
                    continue
                objs[doc["kind"]] = obj
                if doc["kind"] == "DaemonSet":
                    daemonsets.append(obj)
    check_rbac(objs)
    check(len(daemonsets) == 1, "one DaemonSet")
    for ds in daemonsets:
        check_daemonset(ds)
    for e in errors:
        print(f"check-manifests: {e}", file=sys.stderr)
    if errors:
        sys.exit(1)
    print(f"check-manifests: {len(objs)} objects in {len(paths)} files: ok")


if __name__ == "__main__":
    main(sys.argv[1:])
