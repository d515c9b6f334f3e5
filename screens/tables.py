"""Filter (``/``) and sort (``s``, or a click on a column header) for the console's tables.

A screen with one ``DataTable`` mixes in :class:`TableTools`, adds :data:`TABLE_BINDINGS`
to its bindings, yields a :class:`TableFilter` and, when it redraws its table, keeps the
rows that :meth:`TableTools.keep` accepts, in the order of :meth:`TableTools.sort_rows`.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence, TypeVar

from rich.text import Text
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Input

from screens.fields import Field

T = TypeVar("T")

TABLE_BINDINGS = [
    Binding("slash", "filter", "Filter", key_display="/"),
    Binding("s", "sort", "Sort"),
]


class TableFilter(Field):
    """The filter line under a table: hidden until ``/``; Enter or Escape go back to the
    table (the filter stays), an empty filter shows every row."""

    DEFAULT_CSS = "TableFilter { display: none; }"

    class Applied(Message):
        """The filter text changed."""

        def __init__(self, value: str) -> None:
            super().__init__()
            self.value = value

    def __init__(self, **kwargs) -> None:
        kwargs.setdefault("placeholder", "filter: words every shown row contains (Enter: back to the table)")
        kwargs.setdefault("compact", True)
        super().__init__(**kwargs)

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()  # the screen's own field handlers (validation) are not for this one
        self.post_message(self.Applied(event.value))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_leave()

    def action_leave(self) -> None:
        self.display = bool(self.value)
        self.screen.query_one(DataTable).focus()


class TableTools:
    """Filter and sort state of a screen's table (a mixin for ConsoleScreen subclasses)."""

    filter_text: str = ""
    sort_column: int | None = None
    sort_reverse: bool = False

    def redraw_table(self) -> None:  # pragma: no cover - overridden
        """Redraw the table with the current filter and sort."""

    def keep(self, cells: Iterable[object]) -> bool:
        """True when every word of the filter occurs in one of ``cells`` (case-insensitive)."""
        words = self.filter_text.lower().split()
        text = " ".join(str(c) for c in cells).lower()
        return all(w in text for w in words)

    def sort_rows(self, rows: Sequence[T], cells: Callable[[T], Sequence[object]]) -> list[T]:
        """``rows`` ordered by the sort column (numbers as numbers), stable otherwise."""
        if self.sort_column is None:
            return list(rows)

        def key(row: T):
            value = str(cells(row)[self.sort_column])
            return (0, float(value), "") if _is_number(value) else (1, 0.0, value.lower())

        return sorted(rows, key=key, reverse=self.sort_reverse)

    def action_filter(self) -> None:
        field = self.query_one(TableFilter)  # type: ignore[attr-defined]
        field.display = True
        field.focus()

    def action_sort(self) -> None:
        """Sort by the next column (after the last one: the original order again)."""
        columns = len(self.query_one(DataTable).columns)  # type: ignore[attr-defined]
        nxt = 0 if self.sort_column is None else self.sort_column + 1
        self.sort_column, self.sort_reverse = (nxt if nxt < columns else None), False
        self._announce_sort()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        """A click on a header sorts by it; a second click reverses."""
        if self.sort_column == event.column_index:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column, self.sort_reverse = event.column_index, False
        self._announce_sort()

    def on_table_filter_applied(self, message: TableFilter.Applied) -> None:
        self.filter_text = message.value
        self.redraw_table()

    def _announce_sort(self) -> None:
        table = self.query_one(DataTable)  # type: ignore[attr-defined]
        if self.sort_column is None:
            words = "original order"
        else:
            label = list(table.columns.values())[self.sort_column].label.plain.rstrip(" ▲▼") or "mark"
            words = f"sorted by {label}{' (reversed)' if self.sort_reverse else ''}"
        self.notify(words, timeout=2)  # type: ignore[attr-defined]
        for i, column in enumerate(table.columns.values()):  # ▲ / ▼ after the sorted header
            arrow = (" ▼" if self.sort_reverse else " ▲") if i == self.sort_column else ""
            column.label = Text(column.label.plain.rstrip(" ▲▼") + arrow)
        self.redraw_table()  # clears the table's render caches: the new headers show


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
