"""``python -m server``: serve the web page and the API (server/api/serve.py)."""

from server.api.serve import main

if __name__ == "__main__":
    main()
