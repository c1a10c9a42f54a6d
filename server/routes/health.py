"""GET /health: liveness plus what is loaded."""

from __future__ import annotations

from fastapi import APIRouter, Request

router = APIRouter()


@router.get("/health")
async def health(request: Request) -> dict:
    engine = getattr(request.app.state, "engine", None)
    if engine is None or not engine.ready.is_set():
        return {"status": "loading"}
    if engine.load_error:
        return {"status": "error", "error": engine.load_error}
    model = engine.model
    return {
        "status": "ok",
        "model": model.description,
        "model_path": str(model.path),
        "layout": engine.layout.kind,
        "n_ctx": engine.ctx.n_ctx,
        "document_budget": request.app.state.settings.document_budget,
        "queue_depth": engine.queue_depth,
        "n_seq_max": engine.n_answer_seqs,  # questions answered concurrently (continuous batching)
        "active_answers": engine.active_answers,
    }
