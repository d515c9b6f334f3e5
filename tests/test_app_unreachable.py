"""The console's Fleet screen with hosts that cannot be reached (no emulated fleet needed):
each row ends "failed" with its reason within the connect timeout, never "connecting"."""

from __future__ import annotations

import contextlib
import socket

from support import wait_until, demo_app




def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.asynccontextmanager
async def connecting_all(tmp_path, inventory_text: str):
    """The console on an inventory of ``inventory_text``, its Fleet screen connecting
    every host (c) with a 2 s connect timeout: ``(screen, pilot)``."""
    inventory = tmp_path / "hosts.toml"
    inventory.write_text(inventory_text)
    app = demo_app(inventory=inventory)
    app.session.known_hosts = str(tmp_path / "known_hosts")
    async with app.run_test(size=(160, 40)) as pilot:
        screen = app.screen
        screen.connect_timeout_s = 2
        await pilot.press("c")
        yield screen, pilot


async def test_each_unreachable_host_fails_with_its_reason(tmp_path):
    closed = free_port()
    with socket.socket() as mute:  # accepts TCP, never sends an SSH banner
        mute.bind(("127.0.0.1", 0))
        mute.listen(8)
        async with connecting_all(tmp_path, '[[hosts]]\nname = "ghost"\naddress = "ghost.invalid"\n\n'
                                  f'[[hosts]]\nname = "closed"\naddress = "127.0.0.1"\nport = {closed}\n\n'
                                  f'[[hosts]]\nname = "mute"\naddress = "127.0.0.1"\n'
                                  f'port = {mute.getsockname()[1]}\n') as (screen, pilot):
            rows = screen.fleet.rows
            await wait_until(lambda: all(r.state == "failed" for r in rows.values()), 20)
            assert rows["ghost"].error.startswith("name does not resolve: ghost.invalid")
            assert rows["closed"].error == f"connection refused at 127.0.0.1:{closed} (no SSH server listening)"
            assert rows["mute"].error.endswith("timed out after 2 s")
            await pilot.pause()
            assert "3 hosts from inventory" in str(screen.query_one("#fleet-summary").render())
            assert "3 failed" in str(screen.query_one("#fleet-summary").render())
            details = str(screen.query_one("#fleet-details").render())
            assert "ghost" in details and "failed" in details and "name does not resolve" in details


async def test_a_known_hosts_folder_fails_every_host_with_one_line(tmp_path):
    inventory = tmp_path / "hosts.toml"
    inventory.write_text(f'[[hosts]]\nname = "a"\naddress = "127.0.0.1"\nport = {free_port()}\n')
    (tmp_path / "kh").mkdir()
    app = demo_app(inventory=inventory)
    app.session.known_hosts = str(tmp_path / "kh")
    async with app.run_test(size=(160, 40)) as pilot:
        screen = app.screen
        await pilot.press("c")
        row = lambda: screen.fleet.rows["a"]  # noqa: E731
        await wait_until(lambda: row().state == "failed", 20)
        assert row().error == f"known_hosts: {tmp_path / 'kh'}: is a directory, expected a known_hosts file"


async def test_hosts_past_the_handshake_limit_show_queued_not_connecting(tmp_path):
    """With 12 silent hosts all 12 showed "connecting" though 10 connect at once, so the
    last ones failed long after the timeout they seemed to be counting."""
    from probes.ssh import MAX_CONNECTING

    with contextlib.ExitStack() as stack:
        ports = []
        for _ in range(MAX_CONNECTING + 2):  # one silent listener per host: one address:port each
            mute = stack.enter_context(socket.socket())
            mute.bind(("127.0.0.1", 0))
            mute.listen(4)
            ports.append(mute.getsockname()[1])
        async with connecting_all(tmp_path, "".join(f'[[hosts]]\nname = "m{k}"\naddress = "127.0.0.1"\n'
                                                    f'port = {port}\n\n' for k, port in enumerate(ports))) as (screen, _):
            rows = screen.fleet.rows
            states = lambda: [r.state for r in rows.values()]  # noqa: E731
            await wait_until(lambda: states().count("connecting") == MAX_CONNECTING, 10)
            assert states().count("queued") == 2
            await wait_until(lambda: all(s == "failed" for s in states()), 20)


async def test_a_long_host_name_and_its_error_show_in_full_in_the_details(tmp_path):
    """A 250-character name wraps to four lines at 80 columns: the panel (three lines
    high before) grows to show the error under it."""
    closed = free_port()
    name = "n" + "x" * 249
    inventory = tmp_path / "hosts.toml"
    inventory.write_text(f'[[hosts]]\nname = "{name}"\naddress = "127.0.0.1"\nport = {closed}\n')
    app = demo_app(inventory=inventory)
    app.session.known_hosts = str(tmp_path / "known_hosts")
    async with app.run_test(size=(80, 24)) as pilot:
        screen = app.screen
        await pilot.press("c")
        await wait_until(lambda: screen.fleet.rows[name].state == "failed", 20)
        await pilot.pause()
        panel = screen.query_one("#fleet-details")
        lines = panel.render().wrap(panel.content_size.width)
        assert "connection refused" in lines[-1].plain
        assert len(lines) > 3 and panel.content_size.height >= len(lines)
