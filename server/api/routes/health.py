"""GET /health: liveness, what is loaded, and what the llama.cpp build can do here."""

from __future__ import annotations

from fastapi import APIRouter, Request

from runtime.omp import described as omp_wait
from runtime.system import system_info
from server.api.deps import selftest_of, services_of, watch_of
from spec.sources import BY_NAME

router = APIRouter()


@router.get("/health")
async def health(request: Request) -> dict:
    services = services_of(request.app)
    engine = services.engine if services is not None else None
    if engine is None or not engine.ready.is_set():
        return {"status": "loading"}
    if engine.load_error:
        return {"status": "error", "error": engine.load_error}
    model = engine.model
    selftest = selftest_of(request.app)
    return {
        "status": "ok",
        "model": model.description,
        "model_file": model.path.name,  # the name only: paths stay in the server's log
        "layout": engine.layout.kind,
        "n_ctx": engine.n_ctx,
        "n_ctx_train": model.n_ctx_train,  # the context the model was trained for (n_ctx beyond it may degrade)
        "document_budget": engine.settings.document_budget,
        "queue_depth": engine.queue_depth,
        "n_seq_max": engine.settings.n_seq_max,  # questions answered concurrently (continuous batching)
        "active_answers": engine.active_answers,
        "watched_folders": len(engine.settings.watch),  # how many (DOCQA_WATCH); the paths stay private
        # The watched folders that are unavailable (their documents kept, marked "folder unavailable"): each
        # one's place in DOCQA_WATCH (1-based) and why, without its path.
        "watched_folders_unavailable": _unavailable(request),
        "cpu_repack": model.extra_bufts,
        # Each draft source (spec/sources.py): whether it drafts here, and why not.
        "drafters": [
            {"name": name, "active": why is None, "about": BY_NAME[name].about, **({"why_not": why} if why else {})}
            for name, why in engine.loaded.drafters.items()
        ],  # llama.cpp's extra CPU buffer types (off after an AMX fallback)
        "selftest": {"status": selftest.status, "note": selftest.note} if selftest else {"status": "not run"},
        # The weight layout measured at the first start (server/engine/layout.py): which, and by what rates.
        "weight_layout": selftest.layout.as_dict() if selftest and selftest.layout else None,
        # DOCQA_CPU_REPACK=pair: documents read by a second instance with plain weights, and its memory cost.
        "reader": engine.loaded.reader,
        "omp_wait": omp_wait(),  # how llama.cpp's threads wait between operations (runtime/omp.py)
        "system_info": system_info(),
    }


def _unavailable(request: Request) -> list[dict]:
    watch = watch_of(request.app)
    if watch is None:
        return []
    missing = watch.missing
    return [{"folder": i + 1, "why": missing[root]} for i, root in enumerate(watch.roots) if root in missing]
