"""The one mechanism behind the engine's registries of named entries (the accountants, the models): entries by
name in the order they were registered, a name taken twice refused, an entry added for a `with` block only (a
test's throwaway one), and a lookup whose error lists what is registered. Standard library only, so every layer
of the engine may build a registry on it."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, TypeVar


class Named(Protocol):
    @property
    def name(self) -> str: ...


Entry = TypeVar("Entry", bound=Named)


class Registry(dict[str, Entry]):
    """A dict of entries by their `name`, in registration order. `kind` names an entry in errors ("accountant");
    `taken` is raised for a name registered twice, `unknown` for a lookup of a name never registered."""

    def __init__(self, *, kind: str, taken: type[Exception], unknown: type[Exception]):
        super().__init__()
        self.kind, self.taken, self.unknown = kind, taken, unknown

    def register(self, entry: Entry) -> Entry:
        """Add an entry (after those already registered); a name already taken is an error."""
        if entry.name in self:
            article = "an" if self.kind[0] in "aeiou" else "a"
            raise self.taken(f"{article} {self.kind} named {entry.name!r} is already registered")
        self[entry.name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Remove an entry (a test's throwaway one); an unknown name does nothing."""
        self.pop(name, None)

    @contextmanager
    def registered(self, entry: Entry) -> Iterator[Entry]:
        """`entry` registered for the duration of a `with` block, removed afterwards."""
        self.register(entry)
        try:
            yield entry
        finally:
            self.unregister(entry.name)

    def entry(self, name: str) -> Entry:
        """The entry registered as `name`."""
        try:
            return self[name]
        except KeyError:
            raise self.unknown(f"{self.kind} must be one of {', '.join(self)}; got {name!r}") from None
