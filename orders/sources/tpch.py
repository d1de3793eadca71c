"""TPC-H input: generate the tables with ``tpchgen-cli`` and load them.

CUSTOMER -> customers, PART -> products, PARTSUPP.ps_availqty summed per part
-> inventory, ORDERS + LINEITEM -> the order stream that ``place`` consumes.
The load is one transaction ending with the stream's cursor row, whose
presence makes a second load a no-op; concurrent loads are serialised (a file
lock in the data dir, and the database's unique keys across machines).
"""

from __future__ import annotations

import csv
import shutil
import subprocess
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from datetime import date
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import Table, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from orders.domain.errors import TpchGenerationFailed
from orders.domain.models import (
    Customer,
    Inventory,
    Product,
    StreamCursor,
    TpchLineItem,
    TpchOrder,
)
from orders.sources.drafts import TPCH
from orders.sources.load_lock import LOCK_TIMEOUT_SECONDS, exclusive_lock
from workflows.columns import utcnow
from workflows.sql import dialect_of_factory
from workflows.uow import SessionFactory, UnitOfWork

TABLES = ("customer", "part", "partsupp", "orders", "lineitem")
_CHUNK = 10_000
LOCK_FILE = ".load.lock"
"""Name of the lock file in ``<data dir>/tpch`` held around generation and load."""


@dataclass(frozen=True)
class LoadResult:
    """What ``load_tpch`` found or loaded.

    Attributes:
        loaded: False when the data was already there (nothing done).
        scale: scale factor of the loaded data.
    """

    loaded: bool
    scale: float
    customers: int
    products: int
    orders: int
    lines: int

    def as_dict(self) -> dict[str, Any]:
        """Return the result as a JSON-ready dictionary."""
        return asdict(self)


def tpchgen_executable() -> str:
    """Return the path of ``tpchgen-cli``: beside the running Python, else on PATH.

    Raises:
        TpchGenerationFailed: the executable is not found.
    """
    beside = Path(sys.executable).parent / "tpchgen-cli"
    if beside.exists():
        return str(beside)
    found = shutil.which("tpchgen-cli")
    if found is None:
        raise TpchGenerationFailed(
            "tpchgen-cli not found; install the tpchgen-cli package (uv sync does)"
        )
    return found


def generate(out_dir: Path, scale: float, *, executable: str | None = None) -> Path:
    """Generate the TPC-H tables orderflow uses as CSV files in ``out_dir``.

    Args:
        out_dir: target folder (created); existing files are overwritten.
        scale: TPC-H scale factor (0.01 gives 15,000 orders in about a second).
        executable: ``tpchgen-cli`` path; default found by ``tpchgen_executable``.

    Returns:
        ``out_dir``, holding ``customer.csv``, ``part.csv``, ``partsupp.csv``,
        ``orders.csv`` and ``lineitem.csv``.

    Raises:
        TpchGenerationFailed: the tool is missing or fails (its stderr is included).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    command = [
        executable or tpchgen_executable(),
        "csv",
        "-s",
        str(scale),
        "-o",
        str(out_dir),
        "--overwrite",
        "--quiet",
    ]
    for table in TABLES:
        command += ["-T", table]
    try:
        completed = subprocess.run(command, capture_output=True, text=True, check=False)
    except OSError as exc:
        raise TpchGenerationFailed(f"cannot run {command[0]}: {exc}") from exc
    if completed.returncode != 0:
        raise TpchGenerationFailed(
            f"tpchgen-cli exited with {completed.returncode}: {completed.stderr.strip()}"
        )
    missing = [t for t in TABLES if not (out_dir / f"{t}.csv").exists()]
    if missing:
        raise TpchGenerationFailed(f"tpchgen-cli wrote no {', '.join(missing)} table")
    return out_dir


_LOADED = tuple(
    model.__table__ for model in (Customer, Product, Inventory, TpchOrder, TpchLineItem)
)


def load_tpch(
    session_factory: SessionFactory,
    data_dir: Path,
    scale: float = 0.01,
    *,
    executable: str | None = None,
    lock_timeout: float = LOCK_TIMEOUT_SECONDS,
    on_wait: Callable[[], None] | None = None,
) -> LoadResult:
    """Generate TPC-H at ``scale`` under ``data_dir/tpch`` and load it; no-op if loaded.

    Generation and load hold an exclusive lock, ``data_dir/tpch/.load.lock``: a
    second run on the same data dir waits for the first, then finds the stream
    loaded. Runs on other machines sharing one database are ordered by the
    database: the loser's transaction conflicts on rows the winner committed, is
    rolled back, and the run reports the winner's stream as already loaded.

    Args:
        session_factory: makes the session of the unit of work.
        data_dir: the application's data directory.
        scale: TPC-H scale factor.
        executable: ``tpchgen-cli`` path (default: found automatically).
        lock_timeout: seconds to wait for another load of ``data_dir``.
        on_wait: called once if another load holds the lock (before waiting).

    Returns:
        A ``LoadResult``; ``loaded`` is False when a stream was already loaded
        (whatever its scale) or another run loaded it meanwhile, and the counts
        are those in the database (the winner's scale, too).

    Raises:
        TpchGenerationFailed: generation failed.
        TpchLoadBusy: another load of ``data_dir`` held the lock past ``lock_timeout``.
        OSError: the lock file cannot be created.
        sqlalchemy.exc.SQLAlchemyError: the load failed; nothing is kept.
    """
    found = _already_loaded(session_factory)
    if found is not None:
        return found
    with exclusive_lock(data_dir / "tpch" / LOCK_FILE, lock_timeout, on_wait=on_wait):
        found = _already_loaded(session_factory)  # the run we waited for loaded it
        if found is not None:
            return found
        folder = generate(data_dir / "tpch" / f"sf{scale}", scale, executable=executable)
        result = _load(session_factory, folder, scale)
    if result.loaded:
        # a bulk load: PostgreSQL's planner gets the tables' statistics now, not when
        # autovacuum comes round (ADR 0020)
        dialect_of_factory(session_factory).analyze_never_analyzed(session_factory, _LOADED)
    return result


def _already_loaded(session_factory: SessionFactory) -> LoadResult | None:
    with UnitOfWork(session_factory) as uow:
        existing = uow.session.get(StreamCursor, TPCH)
        if existing is None:
            return None
        return _result(uow.session, False, float(existing.scale))


def _load(session_factory: SessionFactory, folder: Path, scale: float) -> LoadResult:
    try:
        with UnitOfWork(session_factory) as uow:
            session = uow.session
            _insert(session, Customer.__table__, _customers(folder))
            _insert(session, Product.__table__, _products(folder))
            _insert(session, Inventory.__table__, _inventory(folder))
            size = _insert(session, TpchOrder.__table__, _orders(folder))
            _insert(session, TpchLineItem.__table__, _lines(folder))
            session.add(
                StreamCursor(name=TPCH, position=0, size=size, scale=str(scale), loaded_at=utcnow())
            )
            uow.commit()
            return _result(session, True, scale)
    except IntegrityError:
        # another database client's load committed the same keys first (the unit of
        # work rolled this one back): its stream is the loaded one
        found = _already_loaded(session_factory)
        if found is None:
            raise
        return found


def _result(session: Session, loaded: bool, scale: float) -> LoadResult:
    def count(model: Any) -> int:
        return session.scalar(select(func.count()).select_from(model)) or 0

    return LoadResult(
        loaded, scale, count(Customer), count(Product), count(TpchOrder), count(TpchLineItem)
    )


def _insert(session: Session, table: Table, rows: Iterator[dict[str, Any]]) -> int:
    total = 0
    chunk: list[dict[str, Any]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) == _CHUNK:
            session.execute(table.insert(), chunk)
            total += len(chunk)
            chunk = []
    if chunk:
        session.execute(table.insert(), chunk)
        total += len(chunk)
    return total


def _read(folder: Path, table: str) -> Iterator[dict[str, str]]:
    with (folder / f"{table}.csv").open(newline="", encoding="utf-8") as handle:
        yield from csv.DictReader(handle)


def _customers(folder: Path) -> Iterator[dict[str, Any]]:
    for r in _read(folder, "customer"):
        yield {
            "id": int(r["c_custkey"]),
            "name": r["c_name"],
            "nation_key": int(r["c_nationkey"]),
            "market_segment": r["c_mktsegment"],
            "account_balance": Decimal(r["c_acctbal"]),
        }


def _products(folder: Path) -> Iterator[dict[str, Any]]:
    for r in _read(folder, "part"):
        yield {
            "id": int(r["p_partkey"]),
            "name": r["p_name"],
            "brand": r["p_brand"],
            "type": r["p_type"],
            "size": int(r["p_size"]),
            "container": r["p_container"],
            "retail_price": Decimal(r["p_retailprice"]),
        }


def _inventory(folder: Path) -> Iterator[dict[str, Any]]:
    available: dict[int, int] = defaultdict(int)
    for r in _read(folder, "partsupp"):
        available[int(r["ps_partkey"])] += int(r["ps_availqty"])
    for part, quantity in sorted(available.items()):
        yield {"part_id": part, "on_hand": quantity, "initial_on_hand": quantity, "version": 1}


def _orders(folder: Path) -> Iterator[dict[str, Any]]:
    rows = sorted(_read(folder, "orders"), key=lambda r: int(r["o_orderkey"]))
    for seq, r in enumerate(rows):
        yield {
            "order_key": int(r["o_orderkey"]),
            "seq": seq,
            "customer_id": int(r["o_custkey"]),
            "total_price": Decimal(r["o_totalprice"]),
            "order_date": date.fromisoformat(r["o_orderdate"]),
            "priority": r["o_orderpriority"],
        }


def _lines(folder: Path) -> Iterator[dict[str, Any]]:
    for r in _read(folder, "lineitem"):
        yield {
            "order_key": int(r["l_orderkey"]),
            "line_number": int(r["l_linenumber"]),
            "part_id": int(r["l_partkey"]),
            "supplier_key": int(r["l_suppkey"]),
            "quantity": int(Decimal(r["l_quantity"])),
            "extended_price": Decimal(r["l_extendedprice"]),
            "discount": Decimal(r["l_discount"]),
            "ship_date": date.fromisoformat(r["l_shipdate"]),
            "ship_mode": r["l_shipmode"],
        }
