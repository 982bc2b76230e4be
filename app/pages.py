"""The dashboard's pages, in the order the navigation lists them: the one list `main.py` routes by. A page named
`name` is its script `app/views/<name>.py` (short: it reads like the page) and its parts in the package
`app/<name>/`; `tests/test_architecture.py` checks that every script has its package and an entry here, and the
reverse. A new page is those two and one line below."""

from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class PageEntry:
    name: str  # its script is views/<name>.py, its parts app/<name>/
    title: str  # in the navigation and the browser tab
    icon: str  # a Material Symbols icon, ":material/<name>:"
    default: bool = False  # the page the dashboard opens on (exactly one)

    @property
    def script(self) -> str:
        """The page's script, relative to `app/` (as `st.Page` takes it from `main.py`)."""
        return f"views/{self.name}.py"


PAGES: tuple[PageEntry, ...] = (
    PageEntry(name="plan", title="Plan", icon=":material/calculate:"),
    PageEntry(name="train", title="Train", icon=":material/model_training:", default=True),
    PageEntry(name="sweep", title="Sweep", icon=":material/grid_view:"),
    PageEntry(name="compare", title="Compare", icon=":material/compare_arrows:"),
    PageEntry(name="runs", title="Runs", icon=":material/list:"),
    PageEntry(name="data", title="Data", icon=":material/database:"),
)
