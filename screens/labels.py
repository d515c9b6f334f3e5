"""Labels screen: region, zone and network group per GPU, edited several rows at once."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.validation import ValidationResult, Validator
from textual.widgets import Button, DataTable, Input, Label, Static

from screens.adapters import LABEL_FIELDS, validate_label
from screens.base import ConsoleScreen
from screens.dialogs import ConfirmDialog
from screens.fields import Field
from screens.statusbar import StatusBar
from screens.tabs import ScreenTabs
from screens.heatmap_view import row_order
from screens.messages import SessionChanged
from screens.tables import TABLE_BINDINGS, TableFilter, TableTools
from screens.widgets import ConsoleFooter, StageLocality

#: Typed into a field, clears that label on the marked rows (empty leaves it unchanged).
CLEAR = "-"


def _cell(label, per_gpu: bool) -> Text:
    """A label value with its source dimmed; '*' marks a per-GPU override."""
    if label is None:
        return Text("")
    text = Text(label.value + ("*" if per_gpu else ""))
    text.append(f" {label.source}", style="dim")
    return text


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


class LabelValidator(Validator):
    def __init__(self, field: str) -> None:
        super().__init__()
        self.field = field

    def validate(self, value: str) -> ValidationResult:
        if value.strip() in ("", CLEAR):
            return self.success()
        why = validate_label(self.field, value)
        return self.failure(why) if why else self.success()


#: space and h share one footer entry.
MARK = Binding.Group("Mark row/host")


class LabelsScreen(TableTools, ConsoleScreen):
    """Mark rows, type labels, apply: the current solution goes stale at once."""

    COMMANDS_ = (
        ("Mark row", "Mark the cursor row for the next edit (space)", "mark"),
        ("Mark host", "Mark every GPU of the cursor row's host (h)", "mark_host"),
        ("Unmark all", "Clear the marks (u)", "unmark"),
        ("Apply labels", "Set the form's labels on the marked rows", "apply"),
        ("Suggest network groups", "Preview the measurement's network groups, then accept them (g)", "suggest"),
        ("Undo label change", "Put back the labels as they were before the last edit (z)", "undo"),
    )
    BINDINGS = [
        Binding("space", "mark", "Mark row", group=MARK),
        Binding("h", "mark_host", "Mark host", group=MARK),
        Binding("u", "unmark", "Unmark", tooltip="Unmark every row"),
        Binding("g", "suggest", "Suggest groups"),
        Binding("z,ctrl+z", "undo", "Undo", key_display="z"),
        *TABLE_BINDINGS,
    ]

    def __init__(self) -> None:
        super().__init__()
        self.marked: set[int] = set()
        self.order: list[int] = []
        #: (session, labels and fabric before, fabric after, what) per edit, newest last: ``z``
        #: puts one back while its session and the fabric it left are still current.
        self.undo_stack: list[tuple[object, object, object, object, str]] = []
        #: The device row the cursor follows through the next redraw (after Apply).
        self.keep_cursor_on: int | None = None

    def compose(self) -> ComposeResult:
        yield ScreenTabs()
        with Horizontal(id="labels-body"):
            with Vertical(id="labels-left"):
                yield DataTable(id="labels-table", cursor_type="row", zebra_stripes=True)
                yield TableFilter(id="labels-filter")
            with Vertical(id="labels-form"):
                yield Static("Set on the marked rows, else the cursor row (empty: unchanged, '-': clear). A whole host marked: set per host; else per GPU (*).")
                for field in LABEL_FIELDS:
                    yield Label(field.replace("_", " "))
                    yield Field(placeholder=field, id=f"set-{field}", validators=[LabelValidator(field)], compact=True)
                yield Static("", id="labels-error", classes="error", markup=False)
                yield Button("Apply", id="apply", variant="primary", compact=True)
                yield Static(id="labels-marked", markup=False)
                yield StageLocality(id="labels-locality")
        yield StatusBar()
        yield ConsoleFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("", "host", "gpu", "region", "zone", "network group")
        super().on_mount()

    def show_session(self) -> None:
        s = self.session
        if getattr(self, "_shown", None) is not s:  # another session loaded: marks were rows of the last
            self._shown = s
            self.marked.clear()
        devices = s.devices()
        table = self.query_one(DataTable)
        cursor = table.cursor_row
        table.clear()
        self.order = row_order(devices, s.fabric.labels) if s.fabric is not None else []
        cells = self._row_cells(devices)
        self.order = self.sort_rows([r for r in self.order if self.keep(cells(r))], cells)
        for row in self.order:
            d = devices[row]
            resolved = s.labels.resolve(d.host, d.gpu)
            table.add_row(
                "●" if row in self.marked else " ",
                Text(d.host), "-" if d.gpu is None else str(d.gpu),  # Text: a name is data, never markup
                *(_cell(resolved[f], d.gpu is not None and (d.host, d.gpu) in s.labels.gpus
                        and f in s.labels.gpus[(d.host, d.gpu)]) for f in LABEL_FIELDS),
                key=str(row),
            )
        keep = self.keep_cursor_on
        if keep is not None and keep in self.order:  # after Apply: stay on the edited row
            cursor, self.keep_cursor_on = self.order.index(keep), None
        if self.order:
            table.move_cursor(row=min(cursor, len(self.order) - 1))
        self._show_marked()
        sol = s.current
        self.query_one(StageLocality).show(
            None if sol is None else sol.rank_map,
            sol.workload.d_pp if sol else 1,
            devices,
            s.is_stale(sol),
        )

    def redraw_table(self) -> None:
        self.show_session()

    def _row_cells(self, devices):
        """The plain text of a row's cells (for the filter and the sort)."""
        def cells(row: int) -> tuple[str, ...]:
            d = devices[row]
            return ("●" if row in self.marked else "", d.host, "" if d.gpu is None else str(d.gpu),
                    d.region or "", d.zone or "", d.network_group or "")

        return cells

    def _show_marked(self) -> None:
        """How many rows Apply sets: the marked ones, else the cursor row, named (with none
        marked, Apply set the cursor row while the form said '0 rows marked')."""
        row = self._cursor_device_row() if not self.marked else None
        text = (f"{_rows(len(self.marked))} marked" if self.marked else
                "no row marked: Apply sets the cursor row" +
                ("" if row is None else f" ({self.session.devices()[row].name})"))
        self.query_one("#labels-marked", Static).update(text)

    def on_data_table_row_highlighted(self) -> None:
        if not self.marked:
            self._show_marked()

    def _cursor_device_row(self) -> int | None:
        table = self.query_one(DataTable)
        if not self.order:
            return None
        return self.order[table.cursor_row]

    def action_mark(self) -> None:
        row = self._cursor_device_row()
        if row is None:
            return
        self.marked ^= {row}
        table = self.query_one(DataTable)
        self.show_session()
        table.move_cursor(row=min(table.cursor_row + 1, len(self.order) - 1))

    def action_mark_host(self) -> None:
        row = self._cursor_device_row()
        if row is None:
            return
        devices = self.session.devices()
        self.marked |= {i for i, d in enumerate(devices) if d.host == devices[row].host}
        self.show_session()

    def action_unmark(self) -> None:
        self.marked.clear()
        self.show_session()

    def on_input_changed(self, event: Input.Changed) -> None:
        """Refuse invalid values inline, as they are typed."""
        result = event.validation_result
        why = "; ".join(result.failure_descriptions) if result is not None and not result.is_valid else ""
        self.query_one("#labels-error", Static).update(why)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "apply":
            self.apply()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.apply()

    def action_apply(self) -> None:
        self.apply()

    def _remember(self, before: tuple[object, object], what: str) -> None:
        """Record an edit just made (``before``: the labels and fabric it replaced)."""
        s = self.session
        self.undo_stack.append((s, *before, s.fabric, what))
        del self.undo_stack[:-20]

    def action_undo(self) -> None:
        """Put back the labels (and the labelled fabric) from before the last edit, while
        the fabric is still the one that edit left: after another session was loaded, a
        device left out, a sweep or a refresh, undo would put an older fabric (and labels)
        back under newer solutions (a session that then saved did not load again)."""
        s = self.session
        if self.undo_stack and (self.undo_stack[-1][0] is not s or self.undo_stack[-1][3] is not s.fabric):
            self.undo_stack.clear()  # everything older rests on a fabric that is gone too
        if not self.undo_stack:
            self.notify("nothing to undo", severity="warning")
            return
        _session, labels, fabric, _after, what = self.undo_stack.pop()
        self.session.labels, self.session.fabric = labels, fabric
        self.post_message(SessionChanged(f"undone: {what}"))

    def action_suggest(self) -> None:
        """Preview the network groups the measurement suggests; accept them after a yes.

        The suggestion is computed on a copy of the session, so nothing changes until the
        operator agrees; operator labels are never replaced, and ``z`` undoes it.
        """
        import copy

        error = self.query_one("#labels-error", Static)
        trial = copy.copy(self.session)
        try:
            summary = trial.accept_suggested_groups()
        except ValueError as exc:
            error.update(" ".join(str(exc).split()))
            return
        error.update("")
        changed = [(b, a) for b, a in zip(self.session.devices(), trial.devices()) if b.network_group != a.network_group]
        if not changed:
            self.notify(summary)
            return
        lines = [f"  {b.name}: {b.network_group or '-'} -> {a.network_group or '-'}" for b, a in changed[:6]]
        if len(changed) > 6:
            lines.append(f"  ... and {len(changed) - 6} more")
        body = "\n".join([f"{summary}; {_rows(len(changed))} change:", *lines, "z undoes it afterwards."])

        def answer(yes: bool | None) -> None:
            if yes:
                before = (self.session.labels, self.session.fabric)
                self.session.labels, self.session.fabric = trial.labels, trial.fabric
                self._remember(before, "suggested network groups")
                self.post_message(SessionChanged(summary))

        self.app.push_screen(ConfirmDialog("Accept the suggested network groups?", body, yes="Accept"), answer)

    def apply(self) -> None:
        """Apply the form to the marked rows (the cursor row if none is marked)."""
        error = self.query_one("#labels-error", Static)
        changes: dict[str, str | None] = {}
        for field in LABEL_FIELDS:
            value = self.query_one(f"#set-{field}", Input).value.strip()
            if value == CLEAR:
                changes[field] = None
            elif value:
                why = validate_label(field, value)
                if why:
                    error.update(why)
                    return
                changes[field] = value
        rows = sorted(self.marked) or ([self._cursor_device_row()] if self.order else [])
        if not changes or not rows:
            error.update("nothing to apply: type a value and mark rows")
            return
        s = self.session
        before = (s.labels, s.fabric)
        cursor_device = self._cursor_device_row()
        try:
            s.edit_labels(rows, changes)
        except ValueError as exc:  # LabelError is a ValueError
            error.update(" ".join(str(exc).split()))
            return
        error.update("")
        self._remember(before, f"labels on {_rows(len(rows))}")
        for field in LABEL_FIELDS:
            self.query_one(f"#set-{field}", Input).value = ""
        self.marked.clear()
        self.keep_cursor_on = cursor_device
        self.post_message(SessionChanged(f"labels set on {_rows(len(rows))} (z: undo)"))
