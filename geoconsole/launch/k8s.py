"""Kubernetes manifests for a launch plan, and reading them back.

One Pod per node, pinned with ``nodeSelector: kubernetes.io/hostname``: the device plugin
does not let a pod pick GPU indices, so the pod on a node requests GPUs ``0..max`` of the
plan (``nvidia.com/gpu``: highest planned index + 1; give it whole nodes so the indices
mean the physical ones) and runs one process per planned GPU, each with its explicit
global rank, ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` and ``CUDA_VISIBLE_DEVICES`` as planned.

The pods use the host network (``hostNetwork: true``): the fabric was measured between
hosts, and the plan's interfaces and addresses are the hosts'. A headless Service selects
the pod of rank 0; its name is ``MASTER_ADDR`` (and torchrun's ``--master-addr``), resolved
in the pods through ``dnsPolicy: ClusterFirstWithHostNet``.

The output is a YAML stream of JSON documents (JSON is YAML; ``kubectl apply -f`` reads
it), so neither writing nor reading needs a YAML library. Each pod carries its ranks in
the annotation ``geoconsole.io/ranks`` (JSON: ``[rank, host, gpu, device]`` per rank), and
:func:`parse_k8s` checks them against the pod's own script and node.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any, Mapping

from geoconsole.launch.plan import LaunchPlan, Process

#: Kubernetes object and node names: DNS-1123 subdomains.
_DNS = re.compile(r"[a-z0-9](?:[-a-z0-9.]{0,251}[a-z0-9])?\Z")
_LABEL_NAME = re.compile(r"[a-z0-9](?:[-a-z0-9]{0,40}[a-z0-9])?\Z")
RANKS_ANNOTATION = "geoconsole.io/ranks"
HOSTNAME_LABEL = "kubernetes.io/hostname"


def _error(message: str) -> Exception:
    from geoconsole.launch.export import ExportError

    return ExportError(message)


def _rank_line(p: Process, master_addr: str, service: str, workdir: str | None) -> str:
    env = {k: (service if k == "MASTER_ADDR" and v == master_addr else v) for k, v in p.env}
    argv = [f"--master-addr={service}" if a == f"--master-addr={master_addr}" else a for a in p.argv]
    cmd = "env " + " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()) + " " + \
        " ".join(shlex.quote(a) for a in argv)
    if workdir:
        cmd = f"cd -- {shlex.quote(workdir)} && {cmd}"
    tag = shlex.quote(f"[rank {p.rank} {p.host}]")
    return (f'{{ ( {cmd} ) 2>&1; echo "$?" > "$st/{p.rank}"; }} | prefix {tag} &  # rank {p.rank}\n'
            'pids="$pids $!"')


#: prefix TAG: copy standard input, TAG and a space before each line (the text is data:
#: it is printed, never interpreted). The rank's exit status goes to a file of its own
#: in the pod's private folder ``$st``, not into the stream, where the rank's output
#: could have faked it (POSIX sh has no pipefail to take it from the pipeline).
_PREFIX = """\
prefix() {
    while IFS= read -r line || [ -n "$line" ]; do
        printf '%s %s\\n' "$1" "$line"
    done
}"""
#: The pod's private folder for the ranks' statuses (mktemp where the image has it); it
#: needs a writable $TMPDIR or /tmp (with a read-only root filesystem, an emptyDir there).
_STATUS_DIR = ('st=$(mktemp -d 2>/dev/null || { d="/tmp/geoconsole-status.$$"; mkdir -m 700 -- "$d" && echo "$d"; }) '
               '|| { echo "geoconsole: cannot create a status folder" >&2; exit 1; }')


def pod_script(plan: LaunchPlan, procs: list[Process], service: str) -> str:
    """What the pod runs: every rank of its node at once, output prefixed by rank and
    host; the pod ends when all have, failing when any failed (each rank's status read
    from its file with the shell's own ``read``: the image needs only sh, mkdir or
    mktemp, and rm); TERM (pod deletion) stops them all (the whole process group; the
    script ignores TERM while it waits)."""
    lines = [_PREFIX, _STATUS_DIR, 'pids=""',
             "trap 'trap \"\" TERM INT; kill -TERM 0 2>/dev/null; wait; rm -rf -- \"$st\"; exit 143' TERM INT"]
    lines += [_rank_line(p, plan.master_addr, service, plan.workdir) for p in procs]
    ranks = " ".join(str(p.rank) for p in procs)
    lines += ['for pid in $pids; do wait "$pid"; done', "status=0",
              f'for r in {ranks}; do s=; read -r s < "$st/$r" 2>/dev/null; [ "$s" = 0 ] || status=1; done',
              'rm -rf -- "$st"', 'exit "$status"']
    return "\n".join(lines) + "\n"


def image_problem(image: str) -> str | None:
    """What is wrong with a container image reference, or None."""
    if len(image) > 512 or image.startswith("-") or any(c.isspace() or not c.isprintable() for c in image):
        return ("a reference such as registry/repo:tag or repo@sha256:..., no whitespace or control "
                "characters, not starting with '-', at most 512 characters")
    return None


def name_problem(name: str) -> str | None:
    """What is wrong with a job name (the prefix of the Pod and Service names), or None."""
    return None if _LABEL_NAME.match(name) else "lowercase letters, digits and '-', at most 42 characters"


def export_k8s(plan: LaunchPlan, *, image: str | None, name: str = "geoconsole",
               nodes: Mapping[str, str] | None = None) -> str:
    """Manifests (Service + one Pod per node) for ``plan``; ``nodes`` maps host name to
    Kubernetes node name (the inventory's ``k8s_node``; else the host name)."""
    if not image:
        raise _error("k8s: needs the container image the ranks run in")
    if (problem := image_problem(image)) is not None:
        raise _error(f"k8s: image {image[:80]!r}: {problem}")
    if (problem := name_problem(name)) is not None:
        raise _error(f"k8s: name {name[:80]!r}: {problem}")
    nodes = nodes or {}
    service = f"{name}-rank0"
    by_host = plan.by_host()
    docs: list[dict[str, Any]] = [{
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": service, "labels": {"app.kubernetes.io/name": name}},
        "spec": {"clusterIP": "None", "publishNotReadyAddresses": True,
                 "selector": {"geoconsole.io/job": name, "geoconsole.io/rank0": "true"},
                 "ports": [{"name": "rendezvous", "port": plan.master_port, "protocol": "TCP"}]},
    }]
    for index, (host, procs) in enumerate(by_host.items()):
        node = nodes.get(host) or host
        if not _DNS.match(node):
            raise _error(f"k8s: host {host}: node name {node!r} is not a Kubernetes node name "
                         "(set k8s_node in the inventory)")
        gpus = [p.gpu for p in procs if p.gpu is not None]
        container: dict[str, Any] = {
            "name": "ranks", "image": image, "command": ["/bin/sh", "-c", pod_script(plan, procs, service)],
        }
        if gpus:
            count = str(max(gpus) + 1)
            container["resources"] = {"limits": {"nvidia.com/gpu": count}, "requests": {"nvidia.com/gpu": count}}
        ranks = json.dumps([[p.rank, p.host, p.gpu, p.device] for p in procs])
        docs.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": f"{name}-{index}",
                "labels": {"geoconsole.io/job": name,
                           "geoconsole.io/rank0": "true" if host == plan.master_host else "false"},
                "annotations": {RANKS_ANNOTATION: ranks, "geoconsole.io/host": host},
            },
            "spec": {"nodeSelector": {HOSTNAME_LABEL: node}, "restartPolicy": "Never",
                     "hostNetwork": True, "dnsPolicy": "ClusterFirstWithHostNet",
                     "containers": [container]},
        })
    head = (f"# Kubernetes manifests written by geoconsole export: {plan.world_size} ranks on "
            f"{len(by_host)} nodes; rank_map (fabric row -> global rank): "
            f"{' '.join(map(str, plan.rank_map))}\n")
    return head + "".join(f"---\n{json.dumps(d, indent=1)}\n" for d in docs)


def documents(text: str, source: str = "<k8s manifests>") -> list[dict[str, Any]]:
    """The JSON documents of a stream written by :func:`export_k8s`."""
    out, chunk = [], []
    for line in text.splitlines() + ["---"]:
        if line.strip() == "---":
            body = "\n".join(chunk).strip()
            chunk = []
            if body:
                try:
                    out.append(json.loads(body))
                except json.JSONDecodeError as exc:
                    raise _error(f"{source}: a document is not JSON: {exc.msg}") from None
        elif not line.startswith("#"):
            chunk.append(line)
    return out


def parse_k8s(text: str, source: str = "<k8s manifests>") -> list:
    """The rank slots of the manifests: each pod's annotated ranks, checked against its
    script (every rank's line sets its rank and ``CUDA_VISIBLE_DEVICES``) and its node."""
    from geoconsole.launch.export import RankSlot, _check_complete

    slots = []
    for doc in documents(text, source):
        if not isinstance(doc, dict) or doc.get("kind") != "Pod":
            continue
        meta, spec = doc.get("metadata") or {}, doc.get("spec") or {}
        where = f"{source}: pod {meta.get('name')}"
        try:
            ranks = json.loads((meta.get("annotations") or {}).get(RANKS_ANNOTATION, ""))
        except (json.JSONDecodeError, TypeError):
            raise _error(f"{where}: {RANKS_ANNOTATION}: expected a JSON list") from None
        try:
            script = spec["containers"][0]["command"][2]
        except (KeyError, IndexError, TypeError):
            raise _error(f"{where}: expected one container running /bin/sh -c SCRIPT") from None
        if not (spec.get("nodeSelector") or {}).get(HOSTNAME_LABEL):
            raise _error(f"{where}: not pinned to a node ({HOSTNAME_LABEL})")
        lines = {int(m.group(2)): m.group(1) for m in re.finditer(
            r"^\{ \( (.*) \) 2>&1; echo .*\} \| prefix .* &  # rank (\d+)$", script, re.M)}
        for item in ranks if isinstance(ranks, list) else [None]:
            ok = isinstance(item, list) and len(item) == 4 and isinstance(item[1], str) and all(
                isinstance(v, int) and not isinstance(v, bool) for v in (item[0], item[3])) and (
                item[2] is None or isinstance(item[2], int))
            if not ok:
                raise _error(f"{where}: {RANKS_ANNOTATION}: expected [rank, host, gpu, device] items")
            rank, host, gpu, device = item
            line = lines.get(rank)
            if line is None:
                raise _error(f"{where}: rank {rank} is annotated but its script does not start it")
            words = shlex.split(line)
            visible = next((w.split("=", 1)[1] for w in words if w.startswith("CUDA_VISIBLE_DEVICES=")), None)
            if visible != (None if gpu is None else str(gpu)):
                raise _error(f"{where}: rank {rank}: CUDA_VISIBLE_DEVICES {visible!r} differs from gpu {gpu}")
            if f"RANK={rank}" not in words and f"--node-rank={rank}" not in words:
                raise _error(f"{where}: rank {rank}: its command sets neither RANK nor --node-rank to {rank}")
            slots.append(RankSlot(rank, host, gpu, device))
    return _check_complete(slots, source)
