"""docqa HTTP server: FastAPI routes over one engine thread that owns the model context."""
