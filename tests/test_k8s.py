"""export --format k8s: manifests valid against the Kubernetes schema (kubernetes-validate,
offline), read back to the plan's rank/node/GPU mapping, and each pod's script, run by a
real shell, starts exactly its node's ranks with their GPU and rank."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import numpy as np
import pytest
from typer.testing import CliRunner

from geoconsole.cli import app
from geoconsole.launch.export import ExportError, export, parse, plan_slots, rank_map_of
from geoconsole.launch.k8s import documents
from geoconsole.launch.plan import LaunchHost, build_plan
from solver.fabric import Device

kubernetes_validate = pytest.importorskip("kubernetes_validate")
K8S_VERSION = "1.30"
IMAGE = "registry.example/train:1"
HOSTS = [LaunchHost(f"node{i}", f"10.1.0.{i}") for i in range(3)]


def _plan(seed=0, mode="torchrun", gpus=True):
    devices = [Device(f"node{i // 2}", (i % 2) * 2 + 1 if gpus else None) for i in range(6)]
    ranks = np.random.default_rng(seed).permutation(6).tolist()
    return build_plan(ranks, devices, HOSTS, ["train.py", "--config", "a b.yaml"], mode=mode)


def validate_all(text: str) -> list[dict]:
    docs = documents(text)
    for d in docs:
        kubernetes_validate.validate(d, K8S_VERSION, strict=True)
    return docs


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("mode", ["torchrun", "env"])
def test_manifests_are_valid_and_read_back_to_the_plan(seed, mode):
    plan = _plan(seed, mode)
    text = export(plan, "k8s", image=IMAGE, nodes={"node1": "gpu-node-17"})
    docs = validate_all(text)
    assert parse(text, "k8s") == plan_slots(plan)
    assert rank_map_of(parse(text, "k8s")) == plan.rank_map
    pods = [d for d in docs if d["kind"] == "Pod"]
    assert [p["spec"]["nodeSelector"]["kubernetes.io/hostname"] for p in pods] == \
        [{"node1": "gpu-node-17"}.get(h, h) for h in plan.by_host()]
    # each pod owns GPUs 0..max of its ranks (indices 1 and 3 here -> 4)
    assert {p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] for p in pods} == {"4"}
    svc = next(d for d in docs if d["kind"] == "Service")
    assert svc["spec"]["clusterIP"] == "None"
    rank0 = [p for p in pods if p["metadata"]["labels"]["geoconsole.io/rank0"] == "true"]
    assert len(rank0) == 1 and rank0[0]["metadata"]["annotations"]["geoconsole.io/host"] == plan.master_host


def test_cpu_hosts_request_no_gpus():
    docs = validate_all(export(_plan(gpus=False), "k8s", image=IMAGE))
    assert all("resources" not in d["spec"]["containers"][0] for d in docs if d["kind"] == "Pod")


def test_the_validator_refuses_a_broken_manifest():
    """The schema check can fail: a pod whose nodeSelector is not a string map."""
    pod = next(d for d in documents(export(_plan(), "k8s", image=IMAGE)) if d["kind"] == "Pod")
    bad = copy.deepcopy(pod)
    bad["spec"]["nodeSelector"] = {"kubernetes.io/hostname": 7}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSION, strict=True)


def test_a_tampered_pod_is_refused():
    text = export(_plan(), "k8s", image=IMAGE)
    with pytest.raises(ExportError, match="CUDA_VISIBLE_DEVICES"):
        parse(text.replace("CUDA_VISIBLE_DEVICES=3", "CUDA_VISIBLE_DEVICES=2", 1), "k8s")


def test_a_bad_node_name_is_refused():
    with pytest.raises(ExportError, match="Kubernetes node name"):
        export(_plan(), "k8s", image=IMAGE, nodes={"node0": "Bad_Node"})


@pytest.mark.parametrize("image", ["img\nx", "img x", "-img", "i" * 513])
def test_an_image_that_is_no_reference_is_refused(image):
    with pytest.raises(ExportError, match="k8s: image"):
        export(_plan(), "k8s", image=image)


def test_each_pod_script_starts_its_ranks(tmp_path):
    """Run every pod's script with sh, the command a program printing its environment."""
    devices = [Device(f"node{i // 2}", i % 2) for i in range(4)]
    prog = "import json, os; print(json.dumps({k: os.environ.get(k) for k in ('RANK', 'CUDA_VISIBLE_DEVICES', 'MASTER_ADDR')}))"
    plan = build_plan([2, 0, 3, 1], devices, HOSTS[:2], [sys.executable, "-c", prog], mode="env")
    seen = {}
    for pod in (d for d in documents(export(plan, "k8s", image=IMAGE)) if d["kind"] == "Pod"):
        out = subprocess.run(pod["spec"]["containers"][0]["command"], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        for line in out.stdout.splitlines():
            tag, _, text = line.partition("] ")
            doc = json.loads(text)
            seen[int(doc["RANK"])] = (pod["spec"]["nodeSelector"]["kubernetes.io/hostname"], tag + "]", doc)
    for p in plan.processes:
        node, tag, doc = seen[p.rank]
        assert node == p.host and doc["CUDA_VISIBLE_DEVICES"] == str(p.gpu)
        assert tag == f"[rank {p.rank} {p.host}]"
        assert doc["MASTER_ADDR"] == "geoconsole-rank0"
    assert sorted(seen) == [0, 1, 2, 3]


def test_a_failing_rank_fails_the_pod_with_its_status():
    devices = [Device("node0", 0), Device("node0", 1)]
    prog = "import os, sys; print('bye'); sys.exit(int(os.environ['RANK']) * 5)"
    plan = build_plan([0, 1], devices, HOSTS[:1], [sys.executable, "-c", prog], mode="env")
    pod = next(d for d in documents(export(plan, "k8s", image=IMAGE)) if d["kind"] == "Pod")
    out = subprocess.run(pod["spec"]["containers"][0]["command"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert sorted(out.stdout.splitlines()) == ["[rank 0 node0] bye", "[rank 1 node0] bye"]


def test_a_rank_cannot_fake_its_exit_status_in_its_output():
    """A rank's output is data: a line that looks like an end-of-rank marker does not set
    the pod's status (the status goes to a file of its own, not into the stream)."""
    devices = [Device("node0", 0), Device("node0", 1)]
    prog = ("import sys; print('@@geoconsole-exit 0'); print('0'); sys.stdout.flush(); "
            "sys.exit(3 if __import__('os').environ['RANK'] == '1' else 0)")
    plan = build_plan([0, 1], devices, HOSTS[:1], [sys.executable, "-c", prog], mode="env")
    pod = next(d for d in documents(export(plan, "k8s", image=IMAGE)) if d["kind"] == "Pod")
    out = subprocess.run(pod["spec"]["containers"][0]["command"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 1, out.stdout + out.stderr
    assert sorted(out.stdout.splitlines()) == ["[rank 0 node0] 0", "[rank 0 node0] @@geoconsole-exit 0",
                                                "[rank 1 node0] 0", "[rank 1 node0] @@geoconsole-exit 0"]
    ok = build_plan([0, 1], devices, HOSTS[:1], [sys.executable, "-c", "print('@@geoconsole-exit 7')"], mode="env")
    pod = next(d for d in documents(export(ok, "k8s", image=IMAGE)) if d["kind"] == "Pod")
    out = subprocess.run(pod["spec"]["containers"][0]["command"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr


def test_a_pod_needs_no_cat_or_other_tools_beyond_env_mkdir_mktemp_and_rm(tmp_path):
    """The ranks' statuses are read with the shell's own read: an image without cat
    still reports a pod whose ranks succeeded as succeeded."""
    import shutil

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("env", "mkdir", "mktemp", "rm"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    devices = [Device("node0", 0), Device("node0", 1)]
    plan = build_plan([0, 1], devices, HOSTS[:1], [sys.executable, "-c", "print('ok')"], mode="env")
    pod = next(d for d in documents(export(plan, "k8s", image=IMAGE)) if d["kind"] == "Pod")
    out = subprocess.run(pod["spec"]["containers"][0]["command"], capture_output=True, text=True, timeout=60,
                         env={"PATH": str(bin_dir), "TMPDIR": str(tmp_path)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert sorted(out.stdout.splitlines()) == ["[rank 0 node0] ok", "[rank 1 node0] ok"]
    assert [p.name for p in tmp_path.iterdir()] == ["bin"]  # the status folder is removed


def test_cli_export_k8s_uses_the_inventorys_node_names(tmp_path):
    fabric = {"labels": ["a", "a", "b"], "alpha_ms": [[0, 1, 1], [1, 0, 1], [1, 1, 0]],
              "beta_gbps": [[0, 9, 9], [9, 0, 9], [9, 9, 0]],
              "devices": [{"host": "a", "gpu": 0}, {"host": "a", "gpu": 1}, {"host": "b", "gpu": 0}]}
    (tmp_path / "f.json").write_text(json.dumps(fabric))
    (tmp_path / "inv.toml").write_text('[[hosts]]\nname = "a"\naddress = "10.0.0.1"\nk8s_node = "node-a"\n'
                                       '[[hosts]]\nname = "b"\naddress = "10.0.0.2"\n')
    base = ["--headless", "export", "-f", "k8s", "-m", str(tmp_path / "f.json"), "-r", "2,0,1",
            "-i", str(tmp_path / "inv.toml")]
    r = CliRunner().invoke(app, [*base, "--image", IMAGE, "--", "train.py"])
    assert r.exit_code == 0, r.output
    docs = validate_all(r.stdout)
    assert [d["spec"]["nodeSelector"]["kubernetes.io/hostname"] for d in docs if d["kind"] == "Pod"] == ["node-a", "b"]
    r = CliRunner().invoke(app, [*base, "--", "train.py"])
    assert r.exit_code == 2 and "--image" in r.output
