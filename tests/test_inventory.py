"""Inventory: TOML, hostfile, ~/.ssh/config aliases, and one-line errors for bad entries."""

from __future__ import annotations

import textwrap

import pytest
from typer.testing import CliRunner

from geoconsole.cli import app
from geoconsole.inventory import InventoryError, load_inventory, read_ssh_config, ssh_config_for

SSH_CONFIG = textwrap.dedent("""\
    Host gpu-a
        HostName 10.1.0.5
        User trainer
        Port 2222
        IdentityFile ~/.ssh/gpu_key

    Host gpu-* !gpu-x
        User fallback
        Port 2200

    Host *
        User everyone
    """)


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_toml_with_defaults_and_labels(tmp_path):
    path = write(tmp_path, "hosts.toml", """\
        [defaults]
        user = "ubuntu"
        python = "/opt/venv/bin/python"
        region = "eu-west"

        [[hosts]]
        name = "a"
        address = "10.0.0.1"
        gpus = [0, 2]
        zone = "eu-west-1b"
        network_group = "rack-7"

        [[hosts]]
        address = "10.0.0.2"
        port = 2022
        user = "root"
        interface = "ens5"
        region = "us-east"
        """)
    inv = load_inventory(path, ssh_config=None)
    a, b = inv.hosts
    assert (a.name, a.address, a.port, a.user, a.python) == ("a", "10.0.0.1", 22, "ubuntu", "/opt/venv/bin/python")
    assert (a.gpus, a.region, a.zone, a.network_group) == ((0, 2), "eu-west", "eu-west-1b", "rack-7")
    assert (b.name, b.port, b.user, b.interface, b.gpus, b.region) == ("10.0.0.2", 2022, "root", "ens5", None, "us-east")
    filled = inv.with_labels(zone="z9", network_group="g1")
    assert filled.host("10.0.0.2").zone == "z9" and filled.host("a").zone == "eu-west-1b"


def test_hostfile_slots_and_comments(tmp_path):
    path = write(tmp_path, "hostfile", """\
        # DeepSpeed style
        worker-1 slots=4
        worker-2 slots=2   # trailing comment

        worker-3
        train@worker-4 slots=1   # Open MPI's user@host
        """)
    inv = load_inventory(path, ssh_config=None)
    assert [h.name for h in inv.hosts] == ["worker-1", "worker-2", "worker-3", "worker-4"]
    assert [h.gpus for h in inv.hosts] == [(0, 1, 2, 3), (0, 1), None, (0,)]
    assert inv.hosts[3].user == "train" and inv.hosts[3].address == "worker-4"


def test_ssh_config_alias_resolves_address_user_port_identity(tmp_path):
    config = write(tmp_path, "config", SSH_CONFIG)
    path = write(tmp_path, "hostfile", "gpu-a slots=1\ngpu-b slots=1\ngpu-x slots=1\n")
    inv = load_inventory(path, ssh_config=config)
    a, b, x = inv.hosts
    assert (a.name, a.address, a.user, a.port) == ("gpu-a", "10.1.0.5", "trainer", 2222)
    assert a.identity.endswith("/.ssh/gpu_key") and not a.identity.startswith("~")
    assert (b.address, b.user, b.port) == ("gpu-b", "fallback", 2200)
    assert (x.user, x.port) == ("everyone", 22)  # negated pattern skips the gpu-* block


def test_inventory_entry_beats_ssh_config(tmp_path):
    config = write(tmp_path, "config", SSH_CONFIG)
    path = write(tmp_path, "hosts.toml", '[[hosts]]\naddress = "gpu-a"\nport = 22\n')
    (host,) = load_inventory(path, ssh_config=config).hosts
    assert (host.name, host.address, host.port, host.user) == ("gpu-a", "10.1.0.5", 22, "trainer")


def test_ssh_config_first_value_wins_and_missing_file_is_empty(tmp_path):
    blocks = read_ssh_config(write(tmp_path, "c", SSH_CONFIG))
    assert ssh_config_for("gpu-a", blocks)["user"] == "trainer"
    assert read_ssh_config(tmp_path / "absent") == []


BAD_TOML = [
    ("[[hosts]]\naddress = 5\n", "hosts[0].address: expected a host address (text), got int"),
    ('[[hosts]]\naddress = "a"\nport = "ssh"\n', "hosts[0].port: expected an integer 1-65535"),
    ('[[hosts]]\naddress = "a"\nport = 70000\n', "hosts[0].port: expected an integer 1-65535"),
    ('[[hosts]]\naddress = "a"\ngpus = [0, -1]\n', "hosts[0].gpus: expected GPU indices 0-65535"),
    ('[[hosts]]\naddress = "a"\ngpus = [1, 1]\n', "hosts[0].gpus: repeated GPU index"),
    ('[[hosts]]\naddress = "a"\ngpus = "some"\n', "hosts[0].gpus: expected \"all\" or a list"),
    ('[[hosts]]\naddress = "a"\nadress = "b"\n', "hosts[0].adress: unknown field"),
    ('[[hosts]]\naddress = "a"\ninterface = "eth0; reboot"\n', "hosts[0].interface: expected a network interface name"),
    ('[[hosts]]\naddress = "a"\nregion = "eu\\nwest"\n', "hosts[0].region: no spaces or other whitespace allowed"),
    ('[[hosts]]\nport = 22\n', "hosts[0]: needs an address"),
    ('[[hosts]]\naddress = "root@10.0.0.1"\n', "hosts[0].address: a host address may not hold '@'"),
    ('[[hosts]]\naddress = "gpu-\u0430"\n', "hosts[0].address: a host address must be ASCII"),
    ('[[hosts]]\naddress = "a"\nuser = "r\u043eot"\n', "hosts[0].user: a user name must be ASCII"),
    ('[[hosts]]\naddress = "a"\n[[hosts]]\naddress = "a"\n', "duplicate host name 'a'"),
    ('[[hosts]]\nname = "NODE1"\naddress = "10.0.0.1"\n[[hosts]]\nname = "node1"\naddress = "10.0.0.1"\n',
     "duplicate host name 'node1' (also "),
    ('[defaults]\nuser = 3\n[[hosts]]\naddress = "a"\n', "defaults.user: expected a user name (text), got int"),
    ('[defaults]\nname = "x"\n[[hosts]]\naddress = "a"\n', "defaults.name: unknown field"),
    ('[hostz]\n', "unknown top-level key 'hostz'"),
    ('[defaults]\nuser = "u"\n', "no [[hosts]] entries"),
    ('[[hosts]\naddress = "a"\n', "invalid TOML"),
]


@pytest.mark.parametrize("text,expected", BAD_TOML, ids=[e for _, e in BAD_TOML])
def test_malformed_toml_entry_is_one_line_naming_the_field(tmp_path, text, expected):
    path = write(tmp_path, "bad.toml", text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path, ssh_config=None)
    message = str(info.value)
    assert expected in message and str(path) in message and "\n" not in message


BAD_HOSTFILE = [
    ("node1 slots=x\n", ":1: slots: expected a whole number 1-1024"),
    ("node1 slots=0\n", ":1: slots: expected a whole number 1-1024"),
    ("node1\nnode2 cpus=4\n", ":2: expected 'host slots=N', got 'cpus=4'"),
    ("node1 slots=2\nnode1 slots=1\n", "duplicate host name 'node1'"),
    ("# nothing\n\n", "no hosts"),
]


@pytest.mark.parametrize("text,expected", BAD_HOSTFILE, ids=[e for _, e in BAD_HOSTFILE])
def test_malformed_hostfile_line_is_named(tmp_path, text, expected):
    path = write(tmp_path, "hosts.txt", text)
    with pytest.raises(InventoryError) as info:
        load_inventory(path, ssh_config=None)
    assert expected in str(info.value) and str(path) in str(info.value)


@pytest.mark.parametrize("command", ["inventory", "probe"])
def test_cli_bad_inventory_exits_2_with_one_line(tmp_path, command):
    path = write(tmp_path, "bad.toml", '[[hosts]]\naddress = "a"\nport = "ssh"\n')
    args = ["--headless", command, "--inventory", str(path), "--ssh-config", str(write(tmp_path, "none", ""))]
    if command == "probe":
        args += ["--out", str(tmp_path / "f.json")]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines == [f"error: {path}: hosts[0].port: expected an integer 1-65535, got 'ssh'"]


def test_cli_missing_inventory_file(tmp_path):
    result = CliRunner().invoke(app, ["--headless", "inventory", "--inventory", str(tmp_path / "nope.toml")])
    assert result.exit_code == 2
    assert "nope.toml: no such inventory file" in result.output
    assert "Traceback" not in result.output


def test_includes_that_fan_out_are_cut_off_by_a_file_budget(tmp_path, monkeypatch):
    """Each level including every file of the next: 42 files read 3^14 times never ended."""
    import geoconsole.inventory as inventory

    monkeypatch.setattr(inventory, "MAX_SSH_CONFIG_FILES", 40)
    for level in range(6):
        folder = tmp_path / f"L{level}"
        folder.mkdir()
        for k in range(3):
            (folder / f"f{k}").write_text(f"Include {tmp_path}/L{level + 1}/*\n" if level < 5 else "Host q\n Port 22\n")
    (tmp_path / "root").write_text(f"Include {tmp_path}/L0/*\n")
    with pytest.raises(InventoryError, match=r"root: its Includes read more than 40 files in all \(at "):
        read_ssh_config(tmp_path / "root")


def test_an_equals_sign_inside_a_value_is_the_values(tmp_path):
    """``Key=value`` splits at the first '=' only when it follows the key: a HostName or
    IdentityFile holding '=' lost it."""
    blocks = read_ssh_config(write(tmp_path, "c", "Host a\n  IdentityFile ~/k=1\nHost b\n  Port=2222\n"))
    assert ssh_config_for("a", blocks)["identityfile"] == "~/k=1"
    assert ssh_config_for("b", blocks)["port"] == "2222"


def test_one_machine_under_two_names_is_refused(tmp_path):
    """nonexistent.invalid and NONEXISTENT.invalid under two names: probed and launched twice."""
    path = write(tmp_path, "h.toml", '[[hosts]]\nname = "a"\naddress = "gpu.example"\n'
                                     '[[hosts]]\nname = "b"\naddress = "GPU.example"\n')
    with pytest.raises(InventoryError, match="has the address GPU.example:22 of 'a'"):
        load_inventory(path, ssh_config=None)
    ok = write(tmp_path, "p.toml", '[[hosts]]\nname = "a"\naddress = "10.0.0.1"\n'
                                   '[[hosts]]\nname = "b"\naddress = "10.0.0.1"\nport = 2222\n')
    assert len(load_inventory(ok, ssh_config=None).hosts) == 2  # two sshds on one address: two hosts
    split = write(tmp_path, "s.toml", '[[hosts]]\nname = "a"\naddress = "10.0.0.1"\ngpus = [0, 1]\n'
                                      '[[hosts]]\nname = "b"\naddress = "10.0.0.1"\ngpus = [2, 3]\n')
    assert len(load_inventory(split, ssh_config=None).hosts) == 2  # one machine split by disjoint GPUs


@pytest.mark.parametrize("name, text", [("h.toml", '[[hosts]]\naddress = "a"\n'), ("hosts", "a slots=1\n")])
def test_a_byte_order_mark_is_named(tmp_path, name, text):
    path = tmp_path / name
    path.write_text("\ufeff" + text, encoding="utf-8")
    with pytest.raises(InventoryError, match=r"starts with a byte order mark \(U\+FEFF\)"):
        load_inventory(path, ssh_config=None)


def test_an_inventory_of_more_hosts_than_placed_is_refused_at_once(tmp_path):
    """A 20 MB hostfile (half a million hosts) was resolved host by host for 20 s before
    it was refused; now the host past MAX_HOSTS is named, without reading further."""
    from geoconsole.inventory import MAX_HOSTS, PRECOUNT_CHARS

    at_most = tmp_path / "hostfile"
    at_most.write_text("".join(f"w{i} slots=1\n" for i in range(MAX_HOSTS)))
    assert len(load_inventory(at_most, ssh_config=None).hosts) == MAX_HOSTS
    big = tmp_path / "big-hostfile"
    big.write_text("# header\n" + "".join(f"w{i} slots=1\n" for i in range(500_000)))
    with pytest.raises(InventoryError, match=rf"big-hostfile:{MAX_HOSTS + 2}: more than {MAX_HOSTS} hosts"):
        load_inventory(big, ssh_config=None)
    toml = tmp_path / "big.toml"
    # a large file is counted before it is parsed: a syntax error after its hosts is not reached
    pad = "#" * 120 + "\n"
    toml.write_text("".join(f'[[hosts]]\n{pad}address = "w{i}"\n' for i in range(MAX_HOSTS + 1)) + "not = = toml\n")
    assert len(toml.read_text()) > PRECOUNT_CHARS
    with pytest.raises(InventoryError, match=rf"big.toml: {MAX_HOSTS + 1} lines open \[\[hosts\]\] tables; at most {MAX_HOSTS} hosts"):
        load_inventory(toml, ssh_config=None)
    # a smaller one is parsed, then its tables counted
    toml.write_text("".join(f'[[hosts]]\naddress = "w{i}"\n' for i in range(MAX_HOSTS + 1)))
    with pytest.raises(InventoryError, match=rf"big.toml: {MAX_HOSTS + 1} \[\[hosts\]\] entries; at most {MAX_HOSTS}"):
        load_inventory(toml, ssh_config=None)


def test_hosts_headers_inside_a_toml_string_are_not_counted_as_hosts(tmp_path):
    """A TOML inventory whose multi-line string holds more ``[[hosts]]`` lines than
    MAX_HOSTS was refused by the count made before parsing, naming 8,193 entries it did
    not have; a file under PRECOUNT_CHARS is parsed first, and the error names the
    field at fault."""
    from geoconsole.inventory import MAX_HOSTS

    path = tmp_path / "notes.toml"
    text = "[[hosts]]\n" * (MAX_HOSTS + 1)
    path.write_text(f'[[hosts]]\naddress = "w0"\nregion = """\n{text}"""\n')
    with pytest.raises(InventoryError, match=r"notes.toml: hosts\[0\]\.region: at most 63 characters"):
        load_inventory(path, ssh_config=None)
