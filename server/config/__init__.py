"""Configuration: typed settings read from ``DOCQA_*`` (and ``DATA_DIR/settings.json``), settings
presets and the memory check, and the error classes with their HTTP status table. Imports nothing
else of server/."""
