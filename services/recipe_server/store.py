"""The recipe server's datastore: published recipes, the log's leaves and its signed tree heads.

All SQL of the service is here. A publication is one transaction: it re-checks the recipe key,
appends the leaf at the next index, and stores the recipe and the signed tree head of the new
size together, so the log, the recipes and the heads never disagree, and a head exists for
every tree size (devices may ask for proofs against any of them).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from services.common.db import Database, Migration, Row, Tx
from services.common.problems import InternalError
from shared.b64url import b64url_encode
from shared.recipe.log import SignedTreeHead, root_hash

__all__ = [
    "KeyConflictError",
    "PendingTask",
    "RecipeRecord",
    "RecipeStore",
    "StoreCounts",
    "StoredHead",
]

MIGRATIONS = [
    Migration(
        1,
        "recipe log",
        [
            "CREATE TABLE log_leaves ( leaf_index {bigint} PRIMARY KEY, leaf_hash {blob} NOT NULL)",
            "CREATE TABLE tree_heads ("
            " tree_size {bigint} PRIMARY KEY, timestamp_ms {bigint} NOT NULL,"
            " root_hash {blob} NOT NULL, key_id {text} NOT NULL, signature {blob} NOT NULL)",
            "CREATE TABLE recipes ("
            " recipe_id {text} NOT NULL, version {bigint} NOT NULL,"
            " draft_hash {blob} NOT NULL, analysis_id {text} NOT NULL, analyst {text} NOT NULL,"
            " task_id {text} NOT NULL, canonical {blob} NOT NULL, key_id {text} NOT NULL,"
            " signature {blob} NOT NULL, leaf_index {bigint} NOT NULL UNIQUE,"
            " created_at {bigint} NOT NULL, PRIMARY KEY (recipe_id, version))",
        ],
    ),
    Migration(
        2,
        "pending tasks",
        [
            # The task a publication is creating, written before the task is: a retry after a
            # failure between task creation and the log append finds it and reuses the task
            # (and the exact recipe bytes its digest covers) instead of creating another.
            "CREATE TABLE pending_tasks ("
            " recipe_id {text} NOT NULL, version {bigint} NOT NULL,"
            " draft_hash {blob} NOT NULL, task_id {text} NOT NULL, canonical {blob} NOT NULL,"
            " created_at {bigint} NOT NULL, PRIMARY KEY (recipe_id, version))",
        ],
    ),
]


class KeyConflictError(InternalError):
    """The recipe id and version are taken by a different draft."""


@dataclass(frozen=True)
class RecipeRecord:
    recipe_id: str
    version: int
    draft_hash: bytes
    analysis_id: str
    analyst: str
    task_id: str
    canonical: bytes
    key_id: str
    signature: bytes
    leaf_index: int
    created_at: int


@dataclass(frozen=True)
class PendingTask:
    """A task being created for a recipe not yet logged, with that recipe's canonical bytes."""

    recipe_id: str
    version: int
    draft_hash: bytes
    task_id: str
    canonical: bytes
    created_at: int


@dataclass(frozen=True)
class StoredHead:
    tree_size: int
    timestamp_ms: int
    root: bytes
    key_id: str
    signature: bytes

    def signed(self) -> SignedTreeHead:
        return SignedTreeHead(
            tree_size=self.tree_size,
            timestamp=self.timestamp_ms,
            root_hash=b64url_encode(self.root),
            key_id=self.key_id,
            signature=b64url_encode(self.signature),
        )


#: Signs a tree head: (tree_size, timestamp_ms, root) -> (key_id, signature).
HeadSigner = Callable[[int, int, bytes], tuple[str, bytes]]


@dataclass(frozen=True)
class StoreCounts:
    recipes_by_analyst: dict[str, int]
    tasks: int
    pending_tasks: int
    log_size: int


def _record(row: Row) -> RecipeRecord:
    return RecipeRecord(
        recipe_id=str(row["recipe_id"]),
        version=int(row["version"]),
        draft_hash=bytes(row["draft_hash"]),
        analysis_id=str(row["analysis_id"]),
        analyst=str(row["analyst"]),
        task_id=str(row["task_id"]),
        canonical=bytes(row["canonical"]),
        key_id=str(row["key_id"]),
        signature=bytes(row["signature"]),
        leaf_index=int(row["leaf_index"]),
        created_at=int(row["created_at"]),
    )


def _head(row: Row) -> StoredHead:
    return StoredHead(
        tree_size=int(row["tree_size"]),
        timestamp_ms=int(row["timestamp_ms"]),
        root=bytes(row["root_hash"]),
        key_id=str(row["key_id"]),
        signature=bytes(row["signature"]),
    )


_RECIPE_COLUMNS = (
    "recipe_id, version, draft_hash, analysis_id, analyst, task_id, canonical, key_id,"
    " signature, leaf_index, created_at"
)


class RecipeStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    def migrate(self) -> int:
        return self.db.migrate(MIGRATIONS)

    # --- reads -----------------------------------------------------------------------------

    def get(self, recipe_id: str, version: int | None = None) -> RecipeRecord | None:
        """A recipe by id and version (the highest version if None)."""

        def body(tx: Tx) -> RecipeRecord | None:
            if version is None:
                row = tx.query_one(
                    f"SELECT {_RECIPE_COLUMNS} FROM recipes WHERE recipe_id = :id"
                    " ORDER BY version DESC LIMIT 1",
                    {"id": recipe_id},
                )
            else:
                row = tx.query_one(
                    f"SELECT {_RECIPE_COLUMNS} FROM recipes WHERE recipe_id = :id AND version = :v",
                    {"id": recipe_id, "v": version},
                )
            return _record(row) if row else None

        return self.db.run("recipe_get", body)

    def all_recipes(self) -> list[RecipeRecord]:
        def body(tx: Tx) -> list[RecipeRecord]:
            rows = tx.query(f"SELECT {_RECIPE_COLUMNS} FROM recipes ORDER BY leaf_index")
            return [_record(r) for r in rows]

        return self.db.run("recipe_list", body)

    def leaf_hashes(self, tree_size: int | None = None) -> list[bytes]:
        def body(tx: Tx) -> list[bytes]:
            rows = tx.query(
                "SELECT leaf_hash FROM log_leaves WHERE leaf_index < :n ORDER BY leaf_index",
                {"n": tree_size if tree_size is not None else 2**62},
            )
            return [bytes(r["leaf_hash"]) for r in rows]

        return self.db.run("log_leaves", body)

    def latest_head(self) -> StoredHead | None:
        def body(tx: Tx) -> StoredHead | None:
            row = tx.query_one("SELECT * FROM tree_heads ORDER BY tree_size DESC LIMIT 1")
            return _head(row) if row else None

        return self.db.run("head_latest", body)

    def head(self, tree_size: int) -> StoredHead | None:
        def body(tx: Tx) -> StoredHead | None:
            row = tx.query_one("SELECT * FROM tree_heads WHERE tree_size = :n", {"n": tree_size})
            return _head(row) if row else None

        return self.db.run("head_get", body)

    def counts(self) -> StoreCounts:
        """What the metrics read: recipes by analyst, distinct tasks, pending tasks, log size."""

        def body(tx: Tx) -> StoreCounts:
            analysts = tx.query(
                "SELECT analyst, COUNT(*) AS n FROM recipes GROUP BY analyst ORDER BY analyst"
            )
            tasks = tx.query_one("SELECT COUNT(DISTINCT task_id) AS n FROM recipes")
            pending = tx.query_one("SELECT COUNT(*) AS n FROM pending_tasks")
            size = tx.query_one("SELECT MAX(tree_size) AS n FROM tree_heads")
            return StoreCounts(
                {str(r["analyst"]): int(r["n"]) for r in analysts},
                int(tasks["n"]) if tasks else 0,
                int(pending["n"]) if pending else 0,
                int(size["n"] or 0) if size else 0,
            )

        return self.db.run("recipe_counts", body)

    def leaf_index_of(self, leaf_hash: bytes) -> int | None:
        def body(tx: Tx) -> int | None:
            row = tx.query_one(
                "SELECT leaf_index FROM log_leaves WHERE leaf_hash = :h ORDER BY leaf_index"
                " LIMIT 1",
                {"h": leaf_hash},
            )
            return int(row["leaf_index"]) if row else None

        return self.db.run("leaf_by_hash", body)

    def pending(self, recipe_id: str, version: int) -> PendingTask | None:
        def body(tx: Tx) -> PendingTask | None:
            row = tx.query_one(
                "SELECT recipe_id, version, draft_hash, task_id, canonical, created_at"
                " FROM pending_tasks WHERE recipe_id = :id AND version = :v",
                {"id": recipe_id, "v": version},
            )
            if row is None:
                return None
            return PendingTask(
                recipe_id=str(row["recipe_id"]),
                version=int(row["version"]),
                draft_hash=bytes(row["draft_hash"]),
                task_id=str(row["task_id"]),
                canonical=bytes(row["canonical"]),
                created_at=int(row["created_at"]),
            )

        return self.db.run("pending_get", body)

    # --- writes ----------------------------------------------------------------------------

    def put_pending(self, pending: PendingTask, replaces: str | None) -> None:
        """Record the task about to be created for a recipe key, replacing the pending task
        `replaces` (None: there must be none). `KeyConflictError` if the key is published or
        its pending task is not `replaces` (a concurrent publication got there first)."""

        def body(tx: Tx) -> None:
            key = {"id": pending.recipe_id, "v": pending.version}
            if tx.query_one(
                "SELECT version FROM recipes WHERE recipe_id = :id AND version = :v", key
            ):
                raise KeyConflictError
            row = tx.query_one(
                "SELECT task_id FROM pending_tasks WHERE recipe_id = :id AND version = :v", key
            )
            if (None if row is None else str(row["task_id"])) != replaces:
                raise KeyConflictError
            tx.execute("DELETE FROM pending_tasks WHERE recipe_id = :id AND version = :v", key)
            tx.execute(
                "INSERT INTO pending_tasks"
                " (recipe_id, version, draft_hash, task_id, canonical, created_at)"
                " VALUES (:recipe_id, :version, :draft_hash, :task_id, :canonical, :created_at)",
                dict(pending.__dict__),
            )

        self.db.run("pending_put", body)

    def ensure_empty_head(self, sign: HeadSigner, now_ms: int) -> None:
        """Sign the empty tree's head once, so that `GET /log/sth` always has an answer."""

        def body(tx: Tx) -> None:
            if tx.query_one("SELECT tree_size FROM tree_heads WHERE tree_size = 0"):
                return
            root = root_hash([])
            kid, sig = sign(0, now_ms, root)
            tx.execute(
                "INSERT INTO tree_heads (tree_size, timestamp_ms, root_hash, key_id, signature)"
                " VALUES (0, :t, :r, :k, :s)",
                {"t": now_ms, "r": root, "k": kid, "s": sig},
            )

        self.db.run("head_init", body)

    def append(
        self,
        record: RecipeRecord,
        leaf_hash: bytes,
        sign: HeadSigner,
        now_ms: int,
    ) -> tuple[RecipeRecord, bool]:
        """Log and store a recipe; (stored record, created). `record.leaf_index` is ignored.

        If the recipe key already exists with the same draft, that record is returned
        (created False); with another draft, `KeyConflictError`.
        """

        def body(tx: Tx) -> tuple[RecipeRecord, bool]:
            row = tx.query_one(
                f"SELECT {_RECIPE_COLUMNS} FROM recipes WHERE recipe_id = :id AND version = :v",
                {"id": record.recipe_id, "v": record.version},
            )
            if row is not None:
                existing = _record(row)
                if existing.draft_hash != record.draft_hash:
                    raise KeyConflictError
                return existing, False
            hashes = [
                bytes(r["leaf_hash"])
                for r in tx.query("SELECT leaf_hash FROM log_leaves ORDER BY leaf_index")
            ]
            index = len(hashes)
            hashes.append(leaf_hash)
            last = tx.query_one("SELECT MAX(timestamp_ms) AS t FROM tree_heads")
            # Heads of larger trees must not be older (devices check it).
            timestamp = max(now_ms, int(last["t"]) if last and last["t"] is not None else 0)
            root = root_hash(hashes)
            kid, sig = sign(index + 1, timestamp, root)
            tx.execute(
                "INSERT INTO log_leaves (leaf_index, leaf_hash) VALUES (:i, :h)",
                {"i": index, "h": leaf_hash},
            )
            tx.execute(
                "INSERT INTO tree_heads (tree_size, timestamp_ms, root_hash, key_id, signature)"
                " VALUES (:n, :t, :r, :k, :s)",
                {"n": index + 1, "t": timestamp, "r": root, "k": kid, "s": sig},
            )
            stored = RecipeRecord(**{**record.__dict__, "leaf_index": index})
            # The task is now the logged recipe's: no longer pending (same transaction).
            tx.execute(
                "DELETE FROM pending_tasks WHERE recipe_id = :id AND version = :v",
                {"id": record.recipe_id, "v": record.version},
            )
            tx.execute(
                f"INSERT INTO recipes ({_RECIPE_COLUMNS}) VALUES (:recipe_id, :version,"
                " :draft_hash, :analysis_id, :analyst, :task_id, :canonical, :key_id,"
                " :signature, :leaf_index, :created_at)",
                dict(stored.__dict__),
            )
            return stored, True

        return self.db.run("recipe_publish", body)
