"""A command line over a JSON file of stock levels."""

import json
from pathlib import Path

import click

from inventory.stock import Stock


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
def report(path: Path) -> None:
    stock = Stock()
    for item, count in json.loads(path.read_text()).items():
        stock.add(item, count)
    for item in stock.low():
        click.echo(f"low: {item}")
