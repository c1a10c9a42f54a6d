"""The settings of the HTTP server: where it binds, who may call it (API key, hosts, origins), request
limits and timeouts, streaming heartbeats and the graceful shutdown. A part of
:class:`server.config.settings.Settings`; every field is documented in docs/settings.md.
"""

from __future__ import annotations

import ipaddress

from pydantic import Field
from pydantic_settings import BaseSettings


class HttpSettings(BaseSettings):
    """Bind address, access, request limits."""

    host: str = Field(default="127.0.0.1", description="Bind address.")
    port: int = Field(default=8000, ge=1, le=65535, description="Bind port.")
    max_upload_bytes: int = Field(default=64 * 1024**2, ge=1, description="Largest accepted upload (bytes).")
    max_json_bytes: int = Field(
        default=1024**2, ge=1024, description="Largest JSON (or any non-upload) request body, in bytes."
    )
    body_timeout_s: float = Field(
        default=30.0, gt=0, description="Longest wait for the next part of a request body before a 408."
    )
    body_deadline_s: float = Field(
        default=120.0,
        gt=0,
        description=(
            "Longest a whole request body may take to arrive, however steadily it trickles (a slow-loris client "
            "sends a byte before each DOCQA_BODY_TIMEOUT_S), before a 408. 120 s takes the largest upload "
            "(64 MiB) at about 4.5 Mbit/s; raise it for large uploads over slower links."
        ),
    )
    header_timeout_s: float = Field(
        default=15.0, gt=0, description="Longest a connection may take to send a request's headers."
    )
    api_key: str | None = Field(
        default=None,
        description="When set, every route but the page and /health needs `Authorization: Bearer <key>`.",
    )
    public_metrics: bool = Field(default=False, description="Serve /metrics without the API key.")
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Host names the server answers to besides the loopback ones (DNS-rebinding guard).",
    )
    cors_origins: list[str] = Field(
        default_factory=list, description="Origins allowed by CORS (default: none, CORS off)."
    )
    sse_heartbeat_s: float = Field(
        default=5.0, gt=0, description="Seconds between SSE heartbeats while a stream waits for its first token."
    )
    shutdown_timeout_s: float = Field(
        default=10.0, ge=0, description="On SIGTERM, how long answers in flight may take to finish."
    )

    @property
    def loopback(self) -> bool:
        """Bound to a loopback address: only this machine's own host names are accepted."""
        if self.host.lower() == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host.strip("[]")).is_loopback
        except ValueError:
            return False
