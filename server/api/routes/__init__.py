"""The routes, one module per resource: documents, answers, the OpenAI-compatible chat, health."""
