"""A tiny stock-keeping library."""

from inventory.stock import Stock

__all__ = ["Stock"]
