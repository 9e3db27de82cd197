import pytest

from inventory import Stock


def test_low_lists_items_at_or_below_threshold() -> None:
    stock = Stock()
    stock.add("bolts", 10)
    stock.add("nuts", 1)
    assert stock.low() == ["nuts"]


def test_remove_more_than_stocked_fails() -> None:
    stock = Stock()
    stock.add("bolts", 1)
    with pytest.raises(ValueError):
        stock.remove("bolts", 2)
