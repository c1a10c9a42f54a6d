"""The settings of servers that share one data directory and database (a cluster, cluster/): storage
shared between servers, replica identity and cluster routing. A part of
:class:`server.config.settings.Settings`; every field is documented in docs/settings.md."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings


class SharedSettings(BaseSettings):
    """Storage shared between servers, replica identity and cluster routing."""

    database_url: str | None = Field(
        default=None,
        pattern=r"^postgres(ql)?://",
        description=(
            "postgresql://user:password@host:port/db: document metadata in PostgreSQL (psycopg 3, the `cluster` "
            "extra) instead of data_dir's SQLite file, for servers sharing one data directory."
        ),
    )
    replica_name: str | None = Field(
        default=None, description="This server's name in every answer's stats (`replica`). Unset: the host name."
    )
    ingest_lease_s: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Servers sharing the database and data directory: each ingestion is leased for this many seconds "
            "(renewed while it runs); one whose server died is resumed by another. Unset: the only server, "
            "which resumes every interrupted ingestion at start-up."
        ),
    )
    hot_docs: int | None = Field(
        default=None,
        ge=1,
        description=(
            "Documents kept hot in RAM at most (LRU, within snapshot_ram_bytes). Unset: as many as "
            "snapshot_ram_bytes holds; cluster readers: 2, and it is Ray Serve's max_num_models_per_replica."
        ),
    )
    debug_cluster_routing: Literal["document", "any"] = Field(
        default="document",
        validation_alias=AliasChoices("DOCQA_DEBUG_CLUSTER_ROUTING", "DOCQA_CLUSTER_ROUTING"),  # old name: deprecated
        description=(
            "Benchmark: cluster ingress (cluster/) routing. `document` routes each question to a replica holding "
            "its document (Ray Serve multiplexing); `any` to any replica, the plain load balancer bench/cluster.py "
            "compares against."
        ),
    )
    startup_sweep: bool = Field(
        default=True,
        description=(
            "At start-up remove document directories without a row and temp files of dead writers. Off for "
            "servers sharing a data directory, where another one may be writing."
        ),
    )
