"""The engine thread and what runs on it: one thread owns the model and its contexts (every
``llama_decode``, ``seq_rm``, state save and restore). Jobs come in from the API on a queue; events
go back through the asyncio loop. Never imports FastAPI or Starlette."""
