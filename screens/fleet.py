"""Fleet screen: the hosts, their connection state, GPUs, versions, labels and last error.

SSH work runs in async workers on the app's loop (asyncssh is asyncio-native), so the
table updates live while hosts connect. An unknown host key is never accepted silently:
the host shows "new host key" and ``k`` asks for confirmation with its fingerprint.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from geoconsole.session import Session
from screens.base import ConsoleScreen
from screens.messages import Activity
from screens.tables import TABLE_BINDINGS, TableFilter, TableTools
from screens.statusbar import StatusBar
from screens.tabs import ScreenTabs
from screens.dialogs import ConfirmDialog
from screens.widgets import ConsoleFooter
from solver.workload import DTFM_WORKLOAD

STATE_STYLES = {
    "connected": "green", "connecting": "yellow", "queued": "yellow", "failed": "bold red",
    "new host key": "bold magenta", "not connected": "dim", "demo": "cyan",
}


@dataclass
class HostRow:
    """What the table shows for one host."""

    name: str
    address: str
    state: str = "not connected"
    gpus: str = "-"
    versions: str = "-"
    labels: str = ""
    error: str = ""
    host: Any = None  # the inventory Host, when there is one
    key_error: Any = None  # the HostKeyError waiting for a confirmation


@dataclass(eq=False)
class FleetState:
    """Rows by host name, in inventory order."""

    rows: dict[str, HostRow] = field(default_factory=dict)


def session_for_inventory(path: Path) -> Session:
    """A fresh session on an inventory: no fabric until a sweep measures one."""
    from geoconsole.inventory import load_inventory

    load_inventory(path)  # validated now; InventoryError is a UserError: one line, exit code 2
    return Session(fabric=None, workload=DTFM_WORKLOAD, inventory=str(path), name=f"fleet {path.name}")


def _cells(r: HostRow) -> tuple[str, ...]:
    return (r.name, r.address, r.state, r.gpus, r.versions, r.labels, r.error)


def host_counts(states: dict[str, int]) -> str:
    """'hosts 3/4 connected, 1 failed' for the status bar."""
    total = sum(states.values())
    words = [f"{states[s]} {s}" for s in ("connecting", "queued", "failed", "new host key") if states.get(s)]
    return ", ".join([f"hosts {states.get('connected', 0)}/{total} connected", *words])


def _labels(obj: Any) -> str:
    parts = [getattr(obj, k, None) for k in ("region", "zone", "network_group")]
    return " / ".join(p or "-" for p in parts)


class FleetScreen(TableTools, ConsoleScreen):
    """Hosts of the inventory (or of the demo fabric) and their state."""

    BINDINGS = [
        Binding("c", "connect_all", "Connect"),
        Binding("r", "retry", "Retry host"),
        Binding("k", "accept_key", "Accept key"),
        *TABLE_BINDINGS,
    ]
    COMMANDS_ = (
        ("Connect all hosts", "Open SSH to every inventory host and discover GPUs", "connect_all"),
        ("Retry host", "Connect the selected host again", "retry"),
        ("Accept new host key", "Show the selected host's fingerprint and accept it", "accept_key"),
    )

    #: Seconds to resolve, connect and log in to one host; a host that takes longer is
    #: "failed" with the reason (never left "connecting").
    connect_timeout_s: float = 10.0

    def __init__(self) -> None:
        super().__init__()
        self.fleet = FleetState()
        self._inventory_path: str | None = None

    def compose(self) -> ComposeResult:
        yield ScreenTabs()
        yield Static(id="fleet-summary", markup=False)
        yield DataTable(id="fleet-table", cursor_type="row", zebra_stripes=True)
        yield TableFilter(id="fleet-filter")
        yield Static(id="fleet-details", classes="details", markup=False)
        yield StatusBar()
        yield ConsoleFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        for label, key in (("host", "host"), ("address", "address"), ("state", "state"), ("GPUs", "gpus"),
                           ("versions", "versions"), ("region / zone / group", "labels"), ("last error", "error")):
            table.add_column(label, key=key)
        super().on_mount()

    def show_session(self) -> None:
        s = self.session
        if s.inventory != self._inventory_path or not self.fleet.rows:
            self._inventory_path = s.inventory
            self.fleet = FleetState(self._initial_rows(s))
        self._redraw()

    def _initial_rows(self, s: Session) -> dict[str, HostRow]:
        rows: dict[str, HostRow] = {}
        if s.inventory:
            from geoconsole.inventory import InventoryError, load_inventory

            try:
                hosts = load_inventory(Path(s.inventory)).hosts
            except InventoryError as exc:
                self.notify(str(exc), severity="error")
                hosts = ()
            for h in hosts:
                rows[h.name] = HostRow(h.name, f"{h.address}:{h.port}", labels=_labels(h), host=h)
            return rows
        for d in s.devices():
            row = rows.setdefault(d.host, HostRow(d.host, d.host, state="demo", gpus="0", labels=_labels(d)))
            row.gpus = str(int(row.gpus) + 1)
        return rows

    def _redraw(self) -> None:
        table = self.query_one(DataTable)
        cursor = table.cursor_row
        table.clear()
        for r in self.shown_rows():
            table.add_row(  # Text: names, versions and labels are data, never markup
                Text(r.name), Text(r.address), Text(r.state, style=STATE_STYLES.get(r.state, "")), r.gpus,
                Text(r.versions), Text(r.labels), Text(r.error, style="red"), key=r.name,
            )
        if table.row_count:
            table.move_cursor(row=min(cursor, table.row_count - 1))
        states: dict[str, int] = {}
        for r in self.fleet.rows.values():
            states[r.state] = states.get(r.state, 0) + 1
        where = f"inventory {self.session.inventory}" if self.session.inventory else "built-in demo fabric (no SSH)"
        counts = ", ".join(f"{n} {state}" for state, n in states.items()) or "no hosts"
        total = len(self.fleet.rows)
        self.query_one("#fleet-summary", Static).update(f"{total} host{'s' if total != 1 else ''} from {where}: {counts}")
        if self.session.inventory:
            self.post_message(Activity("hosts", host_counts(states)))
        self._details()

    def redraw_table(self) -> None:
        self._redraw()

    def shown_rows(self) -> list[HostRow]:
        """The rows the filter keeps, in the chosen order."""
        return self.sort_rows([r for r in self.fleet.rows.values() if self.keep(_cells(r))], _cells)

    def on_data_table_row_highlighted(self) -> None:
        self._details()

    def _details(self) -> None:
        """The selected host in full: the last error does not fit its column."""
        row = self._selected()
        text = Text()
        if row is not None:
            text.append(f"{row.name} ({row.address}): {row.state}", style="bold")
            if row.versions != "-":
                text.append(f"   {row.versions}")
            if row.error:
                text.append(f"\n{row.error}", style="red")
        self.query_one("#fleet-details", Static).update(text)

    def _update(self, name: str, **changes: Any) -> None:
        self.fleet.rows[name] = replace(self.fleet.rows[name], **changes)
        self._redraw()

    def _selected(self) -> HostRow | None:
        shown = self.shown_rows()
        row = self.query_one(DataTable).cursor_row
        return shown[row] if 0 <= row < len(shown) else None

    # -- actions -----------------------------------------------------------------
    def action_connect_all(self) -> None:
        names = [r.name for r in self.fleet.rows.values() if r.host is not None]
        if not names:
            self.notify("the demo fabric has no hosts to connect: open with --inventory", severity="warning")
            return
        self.connect(names, accept_new=False)

    def action_retry(self) -> None:
        row = self._selected()
        if row is None or row.host is None:  # said, as c and k say why they do nothing
            self.notify("no inventory host selected to retry (the demo fabric has none)", severity="warning")
            return
        self.connect([row.name], accept_new=False)

    def action_accept_key(self) -> None:
        row = self._selected()
        if row is not None and row.key_error is None and "host key CHANGED" in (row.error or ""):
            self.notify("a changed host key is never accepted here: if the change is expected, remove the "
                        "host's old line from known_hosts, then r (retry)", severity="warning", timeout=10)
            return
        if row is None or row.key_error is None:
            self.notify("the selected host has no new host key waiting", severity="warning")
            return
        e = row.key_error
        body = (f"{row.name} ({row.address}) offers a host key not in known_hosts:\n\n"
                f"  {e.algorithm}  {e.fingerprint}\n\nCompare it with the host's own key before accepting.")

        def answer(yes: bool | None) -> None:
            if yes:
                self.connect([row.name], accept_new=True)

        self.app.push_screen(ConfirmDialog(f"Accept the host key of {row.name}?", body, yes="Accept"), answer)

    # -- SSH (async worker on the app's loop) ----------------------------------------
    @work(exclusive=False, exit_on_error=False, group="fleet", description="connect hosts")
    async def connect(self, names: list[str], accept_new: bool) -> None:
        from probes.ssh import SSHPool  # asyncssh: imported only when the fleet is used

        known = getattr(self.session, "known_hosts", None)
        options = {"accept_new": accept_new, "connect_timeout": self.connect_timeout_s}
        if known:
            options["known_hosts"] = known
        pool = SSHPool(**options)
        gate = asyncio.Semaphore(pool.max_connecting)  # the pool's own limit, seen by the rows
        try:
            await asyncio.gather(*(self._connect_one(pool, name, gate) for name in names))
        finally:
            await pool.close()

    async def _connect_one(self, pool: Any, name: str, gate: asyncio.Semaphore) -> None:
        """One host: "queued" while the pool's max_connecting others connect (40 hosts showed
        "connecting" at once and failed in waves of 10, each well after the timeout),
        "connecting" for its own handshake, then its outcome."""
        from probes.ssh import HostKeyError, SSHError

        row = self.fleet.rows[name]
        self._update(name, state="queued", error="", key_error=None)
        try:
            async with gate:
                self._update(name, state="connecting")
                ssh = await pool.session(row.host)
            gpus, versions, labels = await self._discover(ssh, row.host)
        except HostKeyError as exc:
            if exc.kind == "unknown":
                self._update(name, state="new host key", error=f"unknown key {exc.fingerprint} (k: review)", key_error=exc)
            else:
                self._update(name, state="failed", error=" ".join(exc.reason.split()))
            return
        except SSHError as exc:  # the row names the host: show the reason alone
            self._update(name, state="failed", error=" ".join(exc.reason.split()))
            return
        except Exception as exc:  # noqa: BLE001 - a row must never stay "connecting"
            self._update(name, state="failed", error=" ".join(f"{type(exc).__name__}: {exc}".split()))
            return
        self._update(name, state="connected", gpus=gpus, versions=versions, labels=labels)

    async def _discover(self, ssh: Any, host: Any) -> tuple[str, str, str | None]:
        """GPU summary, versions and labels from probes.discovery (the sweep's own)."""
        from probes.discovery import discover_host, peer_for

        hosts = [r.host for r in self.fleet.rows.values() if r.host is not None]
        k = next(i for i, h in enumerate(hosts) if h.name == host.name)
        info = await discover_host(ssh, host, peer=peer_for(hosts, k), timeout=30)
        gpus = f"{len(info.gpus)} x {info.gpus[0].name}" if info.gpus else "CPU"
        versions = ", ".join(
            f"{name} {value}" for name, value in
            (("python", info.python_version), ("torch", info.torch), ("nccl", info.nccl)) if value
        ) or "-"
        return gpus, versions, _labels(info)
