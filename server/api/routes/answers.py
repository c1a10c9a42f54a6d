"""POST /v1/documents/{id}/answers: JSON, or Server-Sent Events when ``stream`` is true."""

from __future__ import annotations

from fastapi import APIRouter, Request

from server.api.answering import answer_params
from server.api.deps import DocumentDep, EngineDep, SettingsDep, StoreDep
from server.api.responses import respond
from server.api.schemas import AnswerRequest, AnswerResponse
from server.service.questions import check_answerable, submit

router = APIRouter(prefix="/v1")


@router.post("/documents/{doc_id}/answers", response_model=AnswerResponse)
async def answer(
    doc: DocumentDep, req: AnswerRequest, request: Request, store: StoreDep, engine: EngineDep, settings: SettingsDep
):
    while_reading = check_answerable(doc, engine, settings)
    params = answer_params(req, settings, engine)
    stream, position = await submit(engine, store, settings, doc, req.question, params, while_reading=while_reading)
    return await respond(stream, position, req, request, settings)
