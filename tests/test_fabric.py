"""Fabric files: validation with one-line messages, symmetrisation, round trips."""

import json

import numpy as np
import pytest

from solver.fabric import Device, FabricError, fabric_from_json, load_fabric

GOOD = {
    "labels": ["Oregon", "Oregon", "Virginia", "Virginia"],
    "alpha_ms": [[0, 1, 35, 37], [1, 0, 36, 38], [34, 36, 0, 1], [37, 39, 1, 0]],
    "beta_gbps": [[0, 20, 1.2, 1.1], [20, 0, 1.1, 1.0], [1.3, 1.2, 0, 20], [1.2, 1.1, 20, 0]],
}


def write(tmp_path, doc, name="fabric.json"):
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def with_value(field, i, j, value):
    doc = json.loads(json.dumps(GOOD))
    doc[field][i][j] = value
    return doc


MALFORMED = [
    ("truncated", json.dumps(GOOD)[:-20], "invalid JSON at line 1"),
    ("not an object", "[1, 2]", "expected a JSON object"),
    ("missing field", {"labels": ["a"], "alpha_ms": [[0]]}, "missing field 'beta_gbps'"),
    ("ragged row", {**GOOD, "alpha_ms": [[0, 1, 2, 3], [1, 0, 2], [1, 2, 0, 3], [1, 2, 3, 0]]}, "alpha_ms[1]: 3 entries, expected 4"),
    ("too few rows", {**GOOD, "beta_gbps": GOOD["beta_gbps"][:3]}, "beta_gbps: 3 rows for 4 devices"),
    ("labels mismatch", {**GOOD, "labels": ["a", "b", "c"]}, "alpha_ms: 4 rows for 3 devices"),
    ("NaN literal", json.dumps(GOOD).replace("35", "NaN", 1), "invalid JSON: NaN is not a number JSON allows"),
    ("Infinity literal", json.dumps(GOOD).replace("35", "Infinity", 1), "invalid JSON: Infinity is not a number JSON allows"),
    ("string value", with_value("alpha_ms", 0, 2, "35"), 'alpha_ms[0][2]: expected a number or null, got "35"'),
    ("boolean value", with_value("beta_gbps", 0, 2, True), "beta_gbps[0][2]: expected a number or null, got true"),
    ("negative latency", with_value("alpha_ms", 2, 3, -1), "alpha_ms[2][3]: latency must be >= 0"),
    ("zero bandwidth", with_value("beta_gbps", 3, 1, 0), "beta_gbps[3][1]: bandwidth must be > 0"),
    ("negative bandwidth", with_value("beta_gbps", 1, 0, -2), "beta_gbps[1][0]: bandwidth must be > 0"),
    ("overflowing number", json.dumps(GOOD).replace("35", "1e400", 1), "invalid JSON: number 1e400 is out of range"),
    ("huge latency", with_value("alpha_ms", 0, 1, 1e300), "alpha_ms[0][1]: latency above"),
    ("huge bandwidth", with_value("beta_gbps", 0, 1, 1e30), "beta_gbps[0][1]: bandwidth above"),
    ("half-measured pair", with_value("alpha_ms", 0, 1, None), "pair [0][1]: alpha_ms and beta_gbps must both be measured or both null"),
    ("labels not strings", {**GOOD, "labels": [1, 2, 3, 4]}, "labels: expected a list of strings"),
    ("empty", {"labels": [], "alpha_ms": [], "beta_gbps": []}, "needs at least one device"),
    ("bad devices", {**GOOD, "devices": [{"host": "a"}] * 3}, "devices: expected a list of 4 entries"),
    ("bad gpu", {**GOOD, "devices": [{"host": "a", "gpu": -1}] * 4}, "devices[0].gpu"),
    ("huge gpu", {**GOOD, "devices": [{"host": "a", "gpu": 10**19 + g} for g in range(4)]},
     "devices[0].gpu: expected an index 0-65535"),
    ("one GPU twice", {**GOOD, "devices": [{"host": "a", "gpu": 0}, {"host": "a", "gpu": 1},
                                           {"host": "b", "gpu": 0}, {"host": "a", "gpu": 1}]},
     "devices[3]: a GPU 1 is also devices[1]"),
    ("one GPU twice, the host's name in another case", {**GOOD, "devices": [
        {"host": "host0", "gpu": 0}, {"host": "host0", "gpu": 1}, {"host": "Host0", "gpu": 0}, {"host": "b", "gpu": 0}]},
     "devices[2]: Host0 GPU 0 is also devices[0] (host0: host names ignore case)"),
    ("a login in a host name", {**GOOD, "devices": [{"host": "root@h1", "gpu": g} for g in range(4)]},
     "devices[0].host: a host name may not hold '@'"),
    ("a look-alike host name", {**GOOD, "devices": [{"host": "h\u043est", "gpu": g} for g in range(4)]},
     "devices[0].host: a host name must be ASCII (an international domain name in its xn-- form), "
     "got U+043E in 'h\\u043est'"),
    ("one CPU slot twice", {**GOOD, "devices": [{"host": "c", "gpu": None, "slot": 0}] * 2
                            + [{"host": "d"}, {"host": "d"}]}, "devices[1]: c slot 0 is also devices[0]"),
]


@pytest.mark.parametrize("name, doc, message", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_fabric_gives_one_line_naming_file_and_field(tmp_path, name, doc, message):
    path = write(tmp_path, doc)
    with pytest.raises(FabricError) as info:
        load_fabric(path)
    text = str(info.value)
    assert "\n" not in text
    assert text.startswith(str(path) + ": ")
    assert message in text


def test_missing_and_directory_paths(tmp_path):
    with pytest.raises(FabricError, match="no such fabric JSON file"):
        load_fabric(tmp_path / "nope.json")
    with pytest.raises(FabricError, match="is a directory"):
        load_fabric(tmp_path)


def test_nulls_are_unmeasured_pairs_never_numbers(tmp_path):
    doc = with_value("alpha_ms", 0, 3, None)
    doc["beta_gbps"][0][3] = None
    fabric = load_fabric(write(tmp_path, doc))
    assert fabric.missing_pairs() == [(0, 3)]
    assert np.isnan(fabric.transfer_s(1.0)[0, 3]) and np.isnan(fabric.transfer_s(1.0)[3, 0])
    saved = tmp_path / "again.json"
    fabric.save(saved)
    assert json.loads(saved.read_text())["alpha_ms"][0][3] is None


def test_symmetrisation_mean_latency_harmonic_bandwidth():
    fabric = fabric_from_json(GOOD)
    alpha, beta = fabric.symmetric()
    assert alpha[0, 2] == pytest.approx((35 + 34) / 2)
    assert beta[0, 2] == pytest.approx(2 / (1 / 1.2 + 1 / 1.3))
    t = fabric.transfer_s(0.25, messages=3)
    assert t[0, 2] == pytest.approx(3 * alpha[0, 2] / 1000 + 8 * 0.25 / beta[0, 2])
    assert (np.diag(t) == 0).all() and np.allclose(t, t.T)


def test_round_trip_keeps_devices_meta_and_extras(tmp_path):
    doc = {**GOOD, "devices": [{"host": f"h{i // 2}", "gpu": i % 2, "region": "r", "zone": None,
                               "network_group": None} for i in range(4)],
           "meta": {"torch": "2.13.0"}, "measured_at": "2026-11-29T00:00:00+00:00",
           "fit_r2": [[None, 0.99, 0.99, 0.98]] * 4}
    fabric = fabric_from_json(doc, "x")
    path = tmp_path / "out.json"
    fabric.save(path)
    again = load_fabric(path)
    assert again.devices[3] == Device("h1", 1, "r")
    assert again.meta == {"torch": "2.13.0"} and again.extras["fit_r2"] == doc["fit_r2"]
    assert again.sha256() == fabric.sha256()
    sub = again.subset([2, 0])
    assert sub.labels == ("Virginia", "Oregon")
    assert sub.extras["fit_r2"] == [[doc["fit_r2"][2][2], doc["fit_r2"][2][0]], [doc["fit_r2"][0][2], doc["fit_r2"][0][0]]]
