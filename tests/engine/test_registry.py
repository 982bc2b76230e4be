"""`engine.registry.Registry`: the mechanism behind the accountants' and the models' registries."""

from dataclasses import dataclass

import pytest

from engine.registry import Registry


@dataclass(frozen=True, kw_only=True)
class Thing:
    name: str
    size: int = 0


class UnknownThing(LookupError):
    pass


def things() -> Registry[Thing]:
    return Registry(kind="item", taken=ValueError, unknown=UnknownThing)


def test_entries_keep_their_registration_order_and_a_taken_name_is_refused_without_replacing_it():
    registry = things()
    first = registry.register(Thing(name="b", size=1))
    registry.register(Thing(name="a"))
    with pytest.raises(ValueError, match="an item named 'b' is already registered"):
        registry.register(Thing(name="b", size=2))
    assert list(registry) == ["b", "a"] and registry["b"] is first


def test_a_lookup_of_an_unknown_name_lists_what_is_registered():
    registry = things()
    registry.register(Thing(name="b"))
    registry.register(Thing(name="a"))
    with pytest.raises(UnknownThing, match=r"^item must be one of b, a; got 'c'$"):
        registry.entry("c")


def test_an_entry_registered_for_a_block_is_gone_after_it_even_when_the_block_raises():
    registry = things()
    with pytest.raises(RuntimeError), registry.registered(Thing(name="x")) as entry:
        assert registry.entry("x") is entry
        raise RuntimeError
    assert "x" not in registry
    registry.unregister("x")  # an unknown name does nothing
