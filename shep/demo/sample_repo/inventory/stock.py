"""Stock levels per item."""


class Stock:
    def __init__(self) -> None:
        self._levels: dict[str, int] = {}

    def add(self, item: str, count: int) -> None:
        if count <= 0:
            raise ValueError("count must be positive")
        self._levels[item] = self._levels.get(item, 0) + count

    def remove(self, item: str, count: int) -> None:
        if self._levels.get(item, 0) < count:
            raise ValueError(f"not enough {item}")
        self._levels[item] -= count

    def low(self, threshold: int = 2) -> list[str]:
        return sorted(item for item, level in self._levels.items() if level <= threshold)
