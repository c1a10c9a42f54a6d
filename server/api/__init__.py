"""The HTTP API: the FastAPI app and its lifespan, the middleware every request passes, request and
response schemas, the routes, and answer streaming. Routes validate, tokenize off the event loop,
submit a job to the engine and stream its events; they never touch a llama.cpp object."""
