"""How the CLI shows documents and answers to people (server/tools/remote.py): a split document's
parts, how its reading goes (the rate and the time left, or that it waits its turn), a document's
warnings (one line per message, its pages joined as the page joins them: "pages 1–2: read by OCR
..."), and a streamed answer with its citations and stats.
"""

from __future__ import annotations

import json

import click
import httpx

from server.engine.events import read_so_far
from server.tools.client import About, explain


def segment_lines(doc: dict, budget: int | None = None) -> list[str]:
    """A segmented document's note and parts, for people ([] for one answered whole)."""
    segments = doc.get("segments")
    if not segments:
        return []
    if budget and doc["tokens"] <= budget and doc.get("status") == "ready":  # split for a smaller context
        lines = [
            f"split into {len(segments)} parts when the server read fewer tokens at once: its {doc['tokens']:,} "
            f"tokens now fit in one piece; `docqa reingest {doc['id']}` reads it whole"
        ]
    else:
        limit = f", more than the {budget:,} tokens one piece may hold" if budget else ""
        lines = [
            f"split into {len(segments)} parts: the document has {doc['tokens']:,} tokens{limit}; "
            "each question is answered from the part(s) that match it best"
        ]
    for s in segments:
        label = s.get("label") or f"pages {s['pages'][0]}-{s['pages'][1]}"
        lines.append(f"  {label} ({s['tokens']:,} tokens)")
    return lines


def remaining(seconds: float) -> str:
    """ "about 40 s left", "about 3 min left": rounded as the page rounds it (web/js/progress.js)."""
    if seconds < 10:
        return "a few seconds left"
    if seconds < 60:
        return f"about {-(-int(seconds) // 5) * 5} s left"
    if seconds < 90:
        return "about 1 min left"
    if seconds < 3600:
        return f"about {round(seconds / 60)} min left"
    hours = int(seconds // 3600)
    return f"about {hours} h {round((seconds - hours * 3600) / 60)} min left"


def first(questions: int, documents: int) -> str:
    """What goes before a reading that waits: "2 questions are being answered first", "another
    document is read first", both joined by "and"; "next" when nothing is."""
    said = []
    if questions:
        said.append(f"{questions} question{'s are' if questions != 1 else ' is'} being answered")
    if documents:
        said.append("another document is read" if documents == 1 else f"{documents} documents are read")
    return f"{' and '.join(said)} first" if said else "next"


def reading_line(doc: dict) -> str:
    """How a document's reading goes (its ``reading``, server/engine/reading.py), for people: "waiting
    its turn (2 questions are being answered first)", with its place in the reading queue and the
    expected wait ("waiting its turn (2 documents are read first), about 3 min left"; "paused at
    1,234 of 5,678 tokens (a shorter document is read first), ..."), "1,234 of 5,678 tokens at 38.2
    tok/s, about 2 min left", with "the machine is busy (...)" when it is; "" when the server does not
    say."""
    r = doc.get("reading")
    if not r:
        return ""
    if r["waiting"]:
        ahead = r.get("documents_ahead") or 0
        if r.get("paused"):
            before = "a shorter document is" if ahead == 1 else f"{ahead} shorter documents are"
            line = f"paused at {r['tokens_done']:,} of {r['tokens_total']:,} tokens ({before} read first)"
        else:
            line = f"waiting its turn ({first(r.get('ahead') or 0, ahead)})"
        if r.get("seconds_left") is not None:
            line += f", {remaining(r['seconds_left'])}"
    else:
        line = f"{r['tokens_done']:,} of {r['tokens_total']:,} tokens"
        rate, left = r.get("tokens_per_s"), r.get("seconds_left")
        line += f" at {rate:.1f} tok/s, {remaining(left)}" if rate and left is not None else ", measuring the rate"
    return f"{line}; the machine is busy ({r['busy']})" if r.get("busy") else line


LIST_HEADER = "ID\tSTATUS\tPAGES\tTOKENS\tREAD\tFOLDER\tNAME"


def ago(seconds: float, now: float) -> str:
    """ "just now", "3 min ago", "2 h ago", "4 days ago": how long before ``now`` (unix seconds) the
    time ``seconds`` was, as the page says it (web/js/app.js ``ago``)."""
    s = max(0.0, now - seconds)
    if s < 60:
        return "just now"
    if s < 3600:
        return f"{int(s // 60)} min ago"
    if s < 86400:
        return f"{int(s // 3600)} h ago"
    days = int(s // 86400)
    return f"{days} day{'s' if days != 1 else ''} ago"


def list_row(doc: dict, now: float) -> str:
    """A document's line in ``docqa list`` (tab-separated, under :data:`LIST_HEADER`): for a document
    read from a watched folder (``source_path``), when its file was read and the folder; "-" for an
    upload. The name stays last: it may hold spaces."""
    state = "needs_reingest" if doc.get("needs_reingest") else doc["status"]  # server/service/refit.py
    path = doc.get("source_path")
    read = ago(doc["read_at"], now) if path and doc.get("read_at") else ("not read yet" if path else "-")
    folder = (path.rsplit("/", 1)[0] or "/") if path else "-"
    return f"{doc['id']}\t{state}\t{doc['pages']}\t{doc['tokens']}\t{read}\t{folder}\t{doc['name']}"


def page_list(numbers: list[int]) -> str:
    """ "page 3", "pages 2–4, 7": page numbers with runs joined (as the page writes them, web/js/app.js)."""
    runs: list[list[int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    text = ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in runs)
    return f"page {text}" if len(numbers) == 1 else f"pages {text}"


def warning_lines(warnings: list[dict]) -> list[str]:
    """A document's warnings (``[{page, message}]``) as lines, one per message: a message of several
    pages (OCR's "read by OCR ..." on each scanned page) is one line that names them,
    "pages 1–2: read by OCR ..."; a warning without a page is its message."""
    pages: dict[str, list[int]] = {}  # message -> its pages, in the order the messages first appear
    lines: list[str] = []
    for w in warnings:
        if not w.get("page"):
            lines.append(w["message"])
        else:
            pages.setdefault(w["message"], []).append(w["page"])
    return lines + [f"{page_list(numbers)}: {message}" for message, numbers in pages.items()]


def _where(c: dict) -> str:
    """A citation's place: its document in a collection, then its page(s), cell or slide."""
    pages = f"p. {c['page']}" if c["page"] == c["page_end"] else f"pp. {c['page']}-{c['page_end']}"
    pages = c.get("where") or pages  # a spreadsheet's cell, a deck's slide
    return (f"{c['document_name']}, " if c.get("document_name") else "") + pages


def _quote_line(quote: dict) -> str:
    """What a quote-first answer's quote (server/api/schemas.py ``QuotePublic``) is: the document's text
    that the model judged to answer the question, "[quote verified: p. 3, chars 120-180]"; or, for a
    refused answer, why, in one line, with where the passage that came closest is ("[The passage that
    came closest does not answer the question: p. 3, chars 120-180] (--direct answers without a
    quote)", the hint only where the model judged the passages: a question about the document as a
    whole has no one passage that answers it). The quote of a refused answer
    is never shown as a block quote (the stream sends a quote only once it stands)."""
    c = quote.get("citation")
    if quote.get("verified") and c:
        return f"[quote verified: {_where(c)}, chars {c['start']}-{c['end']}]"
    reason = (quote.get("reason") or "the quote is not a citation").rstrip(".")
    p = quote.get("passage")
    line = f"[{reason}: {_where(p)}, chars {p['start']}-{p['end']}]" if p else f"[{reason}]"
    # Only where the model judged the closest passages and none answered (``refusal``: spec/quote.py
    # REFUSALS): a question about the document as a whole. Not a number the document never has, nor no passage.
    judged = not quote.get("verified") and quote.get("refusal") == "not_answered"
    return f"{line} (--direct answers without a quote)" if judged else line


def print_answer(r: httpx.Response, about: About) -> None:
    event, text, stats = None, "", None
    for line in r.iter_lines():
        if line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = json.loads(line[6:])
            if event == "token":
                text += data["text"]
                click.echo(data["text"], nl=False)
            elif event == "partial":  # its document is still being read: the answer is from the part read
                click.echo(f"[{read_so_far(data)}]", err=True)
            elif event == "quote":  # a quote-first answer's passage, before the answer (as the page shows it)
                click.echo(f"> {data['text']}\n")
            elif event == "citations":
                if data["citations"]:
                    click.echo("", err=True)  # end the answer's line (stderr may not be a terminal)
                for c in data["citations"]:
                    quote = c["text"] if len(c["text"]) <= 100 else c["text"][:97] + "..."
                    click.echo(f"[{_where(c)}, chars {c['start']}-{c['end']}] {quote!r}", err=True)
                if quoted := data.get("quote"):  # verified and where, or why the answer is a refusal
                    click.echo(("" if data["citations"] else "\n") + _quote_line(quoted), err=True)
            elif event == "stats":
                stats = data
                click.echo("")
                # One token has no decode rate (it came with the first): "0.0 tok/s" read as a broken machine.
                rate = f"{data['decode_tokens_per_s']:.1f} tok/s, " if data["completion_tokens"] > 1 else ""
                click.echo(
                    f"[{data['completion_tokens']} token{'' if data['completion_tokens'] == 1 else 's'}, "
                    f"TTFT {data['ttft_ms']:.0f} ms, {rate}drafted/accepted "
                    f"{data['drafted_tokens']}/{data['accepted_tokens']}]",
                    err=True,
                )
                if data.get("busy"):  # runtime/system.py busy: slow because the machine is, not broken
                    click.echo(f"[the machine is busy ({data['busy']}): these times are slower than usual]", err=True)
                if data.get("finish_reason") == "repetition":  # spec/repetition.py
                    click.echo("[stopped: the answer began to repeat itself]", err=True)
                if data.get("segments") is not None:  # a long document: where the answer came from
                    spans = [s.get("label") or f"pages {s['pages'][0]}-{s['pages'][1]}" for s in data["segments"]]
                    click.echo(f"[answered from {' and '.join(spans) or 'no part of the document'}]", err=True)
            elif event == "error":
                error = data["error"]
                raise click.ClickException(explain(error.get("type", ""), error["message"], {}, about))
    if stats is not None and not text.strip():
        raise click.ClickException(
            f"the model wrote no answer ({stats['completion_tokens']} tokens, none of them text; finish reason "
            f"{stats['finish_reason']}); rephrase the question, or sample other words with --temperature 0.7"
        )
