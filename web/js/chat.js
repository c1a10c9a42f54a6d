// The conversation about each document (or several asked together: a collection, model
// "collection:<id>", docs/collections.md). Every question goes to POST /v1/chat/completions with
// model "doc:<id>" and the earlier turns, streaming: the server restores the document's saved state
// and prefills only the conversation. Answers are rendered as Markdown (marked), sanitized by
// DOMPurify before they touch the DOM; questions and notes are plain text.

import { ApiError, openStream, readEvents } from './api.js';
import { $, el } from './dom.js';
import { count, errorNode, plural, show } from './messages.js';
import { reveal, showCitations } from './viewer.js';

// document id -> [turn]; turn: {question, answer, citations, stats, status, error, node}
// status: waiting | streaming | done | stopped | error
const threads = new Map();
const active = { controller: null, docId: null };

// Each conversation is kept in this browser (localStorage, one key per document) when a turn ends, so
// that a reload keeps it (issue 51); "New conversation" and deleting the document remove it, and so
// does the list when the document is gone from the server (keepOnly). The server keeps none.
const STORE = 'docqa.thread.';
const KEPT = ['question', 'answer', 'citations', 'quote', 'partial', 'stats', 'status', 'unquoted'];

function load(docId) {
  try {
    const turns = JSON.parse(localStorage.getItem(STORE + docId) || '[]');
    if (!Array.isArray(turns)) return [];
    return turns.filter((t) => t && typeof t.question === 'string' && typeof t.answer === 'string').map((t) => ({
      question: t.question, answer: t.answer, citations: Array.isArray(t.citations) ? t.citations : [],
      quote: t.quote || null, partial: t.partial || null, stats: t.stats || null, unquoted: t.unquoted === true,
      status: ['done', 'stopped'].includes(t.status) ? t.status : 'error',
      error: t.error ? new ApiError(0, t.error.type || 'network', t.error.message || '') : null, node: null,
    }));
  } catch (_) {
    return []; // storage disabled or damaged: a conversation of this page only
  }
}

function save(docId) {
  const turns = (threads.get(docId) || []).filter((t) => t.status !== 'waiting' && t.status !== 'streaming');
  try {
    if (!turns.length) localStorage.removeItem(STORE + docId);
    else {
      localStorage.setItem(STORE + docId, JSON.stringify(turns.map((t) => ({
        ...Object.fromEntries(KEPT.map((k) => [k, t[k]])),
        error: t.error ? { type: t.error.type, message: t.error.message } : null,
      }))));
    }
  } catch (_) { /* storage full or disabled: kept on this page only */ }
}

/** Drop the kept conversations of documents no longer on the server (`ids`: those listed). A
 * conversation about several documents together ("group:<a>+<b>") goes with any of them. */
export function keepOnly(ids) {
  const known = new Set(ids);
  try {
    for (const key of Object.keys(localStorage)) {
      if (!key.startsWith(STORE)) continue;
      const id = key.slice(STORE.length);
      const members = id.startsWith('group:') ? id.slice(6).split('+') : [id];
      if (!members.every((m) => known.has(m))) {
        localStorage.removeItem(key);
        threads.delete(id);
      }
    }
  } catch (_) { /* storage disabled */ }
}
// What shows an answer's citations: `(threadId, citations)`; app.js sets it (a collection's citations
// name their document, which the viewer then opens).
let cite = showCitations;
export function setCiteHandler(fn) {
  cite = fn;
}

export const streaming = () => active.controller !== null;

export function threadOf(docId) {
  if (!threads.has(docId)) threads.set(docId, load(docId));
  return threads.get(docId);
}

/** The citations of the latest answer, for the viewer ([] when it has none: an older answer's
 * highlight would point at text the latest answer did not quote). */
export function latestCitations(docId) {
  const turns = threadOf(docId);
  return turns.length ? turns[turns.length - 1].citations : [];
}

export function stop() {
  if (active.controller) active.controller.abort();
}

/** "New conversation": drop the document's turns (stopping its answer if one is streaming). */
export function clearThread(docId) {
  if (active.docId === docId) stop();
  threads.set(docId, []);
  save(docId);
}

/** A deleted document: stop its answer and drop its conversation, here and in the browser's storage. */
export function forget(docId) {
  if (active.docId === docId) stop();
  threads.set(docId, []);
  save(docId);
  threads.delete(docId);
}

// ---------------------------------------------------------------- Markdown

// Answers may quote a hostile document: no images (they would load URLs the document chose), no
// forms, styles or embedded content. Links open in a new tab without access to this page.
const PURIFY = {
  FORBID_TAGS: ['img', 'picture', 'source', 'video', 'audio', 'iframe', 'object', 'embed', 'svg', 'math',
    'form', 'input', 'button', 'textarea', 'select', 'style'],
  FORBID_ATTR: ['style'],
};
let purifyHooked = false;

function renderMarkdown(node, text) {
  const { marked, DOMPurify } = window;
  if (!marked || !DOMPurify) { // the vendored scripts failed to load: plain text is still correct
    node.textContent = text;
    return;
  }
  if (!purifyHooked) {
    DOMPurify.addHook('afterSanitizeAttributes', (n) => {
      if (n.tagName === 'A') {
        n.setAttribute('target', '_blank');
        n.setAttribute('rel', 'noopener noreferrer');
      }
    });
    purifyHooked = true;
  }
  let html;
  try {
    html = marked.parse(text, { gfm: true, breaks: true, async: false });
  } catch (err) { // marked recurses per nesting level: ~1,800 nested '>' throw RangeError (marked issue 1462)
    node.textContent = text;
    return;
  }
  node.innerHTML = DOMPurify.sanitize(html, PURIFY);
}

// Tokens arrive faster than frames: re-render each changed answer at most once per frame.
const dirty = new Set();
function flush() {
  for (const turn of dirty) updateTurn(turn);
  dirty.clear();
}
function scheduleRender(turn) {
  dirty.add(turn);
  if (dirty.size === 1) requestAnimationFrame(flush);
}

// ---------------------------------------------------------------- rendering

function turnNode(turn, docId) {
  const item = el('li', 'turn');
  const question = el('div', 'question');
  question.append(el('span', 'who', 'You'), el('p', '', turn.question));
  const answer = el('div', 'answer markdown');
  const note = el('div', 'turn-note');
  const meta = el('div', 'turn-meta');
  item.append(question, answer, note, meta);
  turn.node = { item, answer, note, meta, docId };
  fillTurn(turn);
  return item;
}

// Following the newest answer (three-panel layout, where the thread scrolls in its own box): the
// thread is kept scrolled to its end as the answer grows, when the statistics appear under it (which
// shrinks its box: the answer ended below the panel's edge while the status said "Done.", issue 51) and
// when the window is resized, unless the reader scrolled up; scrolling back to the end follows again.
const follow = { on: true, top: 0 };
let shownThread = null; // the conversation the thread shows

function toEnd() {
  const thread = $('thread');
  if (!follow.on || thread.scrollHeight <= thread.clientHeight) return;
  thread.scrollTop = thread.scrollHeight;
  follow.top = thread.scrollTop;
}

function watchThread() {
  const thread = $('thread');
  thread.addEventListener('scroll', () => {
    const atEnd = thread.scrollHeight - thread.scrollTop - thread.clientHeight < 40;
    if (atEnd) follow.on = true;
    else if (thread.scrollTop < follow.top - 2) follow.on = false; // the reader scrolled up
    follow.top = thread.scrollTop;
  });
  if (window.ResizeObserver) new ResizeObserver(toEnd).observe(thread);
}
watchThread();

/** Re-render a turn that is on screen (its document is shown). */
function updateTurn(turn) {
  if (!turn.node || !turn.node.item.isConnected) return;
  fillTurn(turn);
  toEnd();
}

function fillTurn(turn) {
  const node = turn.node;
  node.item.className = `turn ${turn.status}`;
  node.item.setAttribute('aria-busy', String(turn.status === 'waiting' || turn.status === 'streaming'));
  renderMarkdown(node.answer, turn.answer);
  const note = [];
  if (turn.status === 'waiting') note.push(el('p', 'muted', 'Waiting for the answer…'));
  if (turn.status === 'stopped') note.push(el('p', 'muted', 'Stopped.'));
  if (turn.status === 'error') note.push(errorNode(turn.error));
  if (turn.status === 'done' && !turn.answer.trim()) {
    const n = turn.stats ? turn.stats.completion_tokens : null;
    note.push(el('p', 'empty-answer',
      `The model stopped at once and wrote no answer${Number.isFinite(n) ? ` (${plural(n, 'completion token')}, no text)` : ''}. `
      + 'Try rephrasing the question, or set a temperature above 0 so that the model samples other words.'));
  }
  node.note.replaceChildren(...note);
  const meta = [];
  // A quote-first answer: its quote (the block quote above the answer) is the document's own words and
  // the model judged that it answers the question; only then is it cited. A refused answer shows no
  // quote, only why, in one line (and where the passage that came closest is).
  if (turn.quote && turn.status === 'done') {
    const closest = turn.quote.passage;
    meta.push(turn.quote.verified
      ? el('span', 'quote-check ok', '✓ Quote checked: the document\u2019s own words, and they answer the question')
      : el('span', 'quote-check muted', `${turn.quote.reason || 'No passage of the document answers this.'}`
        + (closest ? ` (${closest.where || `p. ${closest.page}`})` : '')));
    // A question about the document as a whole (what it is about, its tone, a choice among options)
    // has no one passage that answers it, so quote-first refuses it: the latest such turn may be asked
    // again without the quote, in its place (the refusal is not sent back as the conversation).
    const turns = threadOf(node.docId);
    if (askAgain && !active.controller && refusedByJudgment(turn) && turns[turns.length - 1] === turn) {
      const again = el('button', 'answer-again secondary', 'Answer without a quote');
      again.type = 'button';
      again.title = 'The model answers from the whole document; no passage is checked against the answer.';
      again.addEventListener('click', () => {
        if (turns[turns.length - 1] !== turn) return;
        // The page's checks, then the refused turn goes; focus to Stop, the button being gone with it.
        if (askAgain(turn.question, () => turns.pop())) $('stop').focus();
      });
      meta.push(again);
    }
  }
  if (turn.unquoted && turn.status === 'done') {
    meta.push(el('span', 'quote-check muted', 'Answered without a quote: no passage was checked against it.'));
  }
  // One button per quoted document (a collection's answer may quote two), each naming it then.
  const byDoc = new Map();
  for (const c of turn.citations) {
    const key = c.document_id || '';
    if (!byDoc.has(key)) byDoc.set(key, []);
    byDoc.get(key).push(c);
  }
  for (const [docId, cites] of byDoc) {
    const pages = [...new Set(cites.flatMap((c) => (c.page_end > c.page ? [c.page, c.page_end] : [c.page])))]
      .sort((a, b) => a - b);
    const named = cites[0].document_name ? `${cites[0].document_name} · ` : '';
    const wheres = [...new Set(cites.map((c) => c.where).filter(Boolean))]; // cells or slides, where named
    const place = wheres.length ? wheres.join(', ') : `p. ${pages.join(', ')}`;
    const quotes = el('button', 'turn-cites secondary',
      `${named}${cites.length === 1 ? '1 quote' : `${cites.length} quotes`} · ${place}`);
    quotes.type = 'button';
    quotes.title = `Highlight the quoted text in ${cites[0].document_name || 'the document'}`;
    quotes.addEventListener('click', async () => {
      await cite(node.docId, cites);
      reveal(); // the highlight itself in view, at every width (viewer.js)
    });
    meta.push(quotes);
  }
  const where = answeredFrom(turn.stats);
  if (where) meta.push(el('span', 'turn-segments muted', where));
  if (turn.partial) meta.push(el('span', 'turn-partial warn', readSoFar(turn.partial)));
  node.meta.replaceChildren(...meta);
}

/** The line an answer from the part of a document read so far gets (the server's words:
 * server/engine/events.py read_so_far). */
export function readSoFar(p) {
  if (p.unread && p.unread.length) { // a collection's documents still being read, left out of the answer
    const names = p.unread.map((d) => `${d.document_name} (${Math.round(d.share * 100)}% read)`).join(', ');
    return `Not read yet: ${names}; this answer comes from the collection's other documents.`;
  }
  const { first, last } = p.pages;
  const share = `${Math.round(p.share * 100)}%`;
  const whole = first === 1 ? `${last}` : `${first}–${last}`;
  const where = last > first ? `pages ${first}–${p.read_through.page} of ${whole} (${share})` : `${share} of the document`;
  return `Read so far: ${where}; the rest is not read yet, and this answer comes from the part read.`;
}

/** "answered from pages X–Y" ("… from part 2 of 3, characters A–B" in a text without pages) for an
 * answer from a long document's segment(s), else ''. The server names each segment (its `label`). */
function answeredFrom(stats) {
  const segments = stats && stats.segments;
  if (!segments || !segments.length) return '';
  const span = ([a, b]) => (a === b ? `page ${a}` : `pages ${a}–${b}`);
  return `answered from ${segments.map((s) => s.label || span(s.pages)).join(' and ')}`;
}

/** `doc` is in its reading and may be asked already: the server answers from the part read so far
 * (docs/api.md, Asking while a document is read). Some of a whole document is read, or the first part
 * of one read in parts; never a collection. */
export function askableWhileReading(doc) {
  if (!doc || doc.status !== 'ingesting' || doc.group) return false;
  const progress = Number(doc.progress) || 0;
  if (!doc.segments || !doc.segments.length) return progress > 0;
  const total = doc.segments.reduce((n, s) => n + s.tokens, 0);
  return progress >= doc.segments[0].tokens / Math.max(1, total);
}

/** Show the conversation about `doc` (or an invitation) and the stats of its latest answer. */
export function renderThread(doc) {
  const list = $('thread');
  const turns = doc ? threadOf(doc.id) : [];
  if (!doc) {
    list.replaceChildren(el('li', 'thread-empty', 'Upload or select a document, then ask about it.'));
  } else if (!turns.length) {
    const text = {
      ready: doc.group
        ? `Ask ${doc.docs.length} documents together: ${doc.name}. Each question is answered from the one (or two) that best match it.`
        : `Ask a question about ${doc.name}. Follow-up questions continue the conversation.`,
      ingesting: askableWhileReading(doc)
        ? `${doc.name} is being read. You can ask already: an answer comes from the part read so far, and says how far that is.`
        : doc.group
          ? `${doc.name} is being prepared; questions can be asked once it is ready.`
          : `${doc.name} is being prepared; you can ask as soon as its first part is read.`,
    }[doc.status] || `${doc.name} could not be prepared, so there is nothing to ask about. Delete it and upload it again.`;
    list.replaceChildren(el('li', 'thread-empty', text));
  } else {
    list.replaceChildren(...turns.map((t) => turnNode(t, doc.id)));
  }
  // The latest answer's statistics only: one that was stopped (or is still being written) has none
  // yet, and an earlier answer's numbers would read as its own.
  const latest = turns[turns.length - 1];
  renderStats(latest ? latest.stats : null);
  if (shownThread !== (doc ? doc.id : null) || (latest && latest.status === 'waiting')) follow.on = true; // new, or asked
  shownThread = doc ? doc.id : null;
  toEnd(); // after the statistics: they take the thread's room
}

// Statistics whose values are long ("1,248 / 1,107 (89%)", a part's characters): a row of their own,
// so that the value stays on its label's line.
const WIDE = new Set(['busy', 'drafts', 'sources', 'segments']);
const SOURCE_NAMES = { history: 'earlier answers', lookup: 'lookup', mtp: 'MTP', draft: 'draft model' };

function renderStats(s) {
  const box = $('stats');
  if (!s) {
    box.replaceChildren();
    return;
  }
  const fixed = (v, digits) => (Number.isFinite(Number(v)) ? Number(v).toFixed(digits) : '–');
  const drafted = Number(s.drafted_tokens) || 0;
  const accepted = Number(s.accepted_tokens) || 0;
  const rate = drafted > 0 ? ` (${Math.round((100 * accepted) / drafted)}%)` : '';
  const d = s.drafted_by_source || {};
  const a = s.accepted_by_source || {};
  // Every source the server names (spec/sources.py), in its order; those that drafted nothing are left out.
  const bySource = Object.keys(d).filter((k) => Number(d[k]) > 0)
    .map((k) => `${SOURCE_NAMES[k] || k} ${count(d[k])} / ${count(a[k] || 0)}`);
  // [key, label, value, explanation]; every pair of draft figures reads drafted / accepted.
  const rows = [
    ['ttft', 'TTFT', `${fixed(s.ttft_ms, 0)} ms`, 'time to first token'],
    ['tps', 'Decode', s.completion_tokens > 1 ? `${fixed(s.decode_tokens_per_s, 1)} tok/s` : '–', 'answer tokens per second (none for a one-token answer)'],
    ['prefill', 'Prefilled tokens', count(s.prompt_tokens), 'the question and conversation, evaluated for this answer'],
    ['cached', 'Cached tokens', count(s.cached_tokens), 'the document, restored from its saved state'],
    ['completion', 'Completion tokens', count(s.completion_tokens), 'tokens the model wrote'],
    ['drafts', 'Drafted / accepted', `${count(drafted)} / ${count(accepted)}${rate}`, 'draft tokens proposed / verified and kept'],
    ['sources', 'Drafted / accepted by source', bySource.join(' · ') || 'no drafts', 'earlier answers (history), prompt lookup in the document, the model\'s MTP head, a separate draft model'],
    ['verify', 'Verify steps', count(s.verify_steps), 'decode calls that verified a draft'],
    ['per-step', 'Accepted / step', fixed(s.mean_accepted_per_step, 2), 'accepted draft tokens per verify step'],
    ['finish', 'Finish reason', show(s.finish_reason), 'stop: the model ended; length: max tokens reached; repetition: stopped where the answer began to repeat itself'],
  ];
  if (s.busy) { // runtime/system.py busy: a slow answer on a busy machine, not a broken one
    rows.unshift(['busy', 'Machine busy', `${s.busy}: these times are slower than usual`,
      'the 1-minute load average is at least the number of cores: other work shares them']);
  }
  if (s.segments) {
    rows.push(['segments', 'Segments', answeredFrom(s) || 'none matched the question',
      'a long document is kept in segments; the question was answered from the best-matching one(s)']);
  }
  box.replaceChildren(...rows.map(([key, label, value, why]) => {
    const stat = el('div', `${WIDE.has(key) ? 'stat wide' : 'stat'}${key === 'busy' ? ' warn' : ''}`);
    const dt = el('dt', '', label);
    dt.title = why;
    const dd = el('dd', '', value);
    dd.dataset.stat = key;
    stat.append(dt, dd);
    return stat;
  }));
}

// ---------------------------------------------------------------- asking

/** The conversation so far, as chat messages: answered turns only (failed ones are left out). */
function history(turns) {
  return turns
    .filter((t) => t.status !== 'error' && t.answer.trim())
    .flatMap((t) => [{ role: 'user', content: t.question }, { role: 'assistant', content: t.answer }]);
}

// The page's way to ask a refused turn's question again without the quote (app.js, with its own checks
// and the settings on screen): askAgain(question, before) -> whether it was asked, `before` run just
// before it is.
let askAgain = null;

/** Set how a refused answer is asked again without a quote (see `askAgain`); null: not offered. */
export function onAskAgain(fn) {
  askAgain = fn;
}

/** Whether `turn` was refused because the model judged that none of the passages closest to the
 * question answers it (the server's `quote.refusal` is `not_answered`): the one refusal that an answer
 * from the whole document may help. Not a number the document never has, no passage at all, or a
 * document still being read (`partial`: a direct answer has no more of it). */
function refusedByJudgment(turn) {
  const q = turn.quote;
  return Boolean(q && !q.verified && q.refusal === 'not_answered' && !turn.partial && !turn.unquoted);
}

/**
 * Ask `question` about `doc` with decoding `params` ({max_tokens, temperature, verify16, draft_tokens?});
 * `doc.model`, when set, is the model asked (a collection's "collection:<id>"), else "doc:<id>".
 * ui: {status(text, kind), changed(), isShown(docId)}.
 */
export async function ask(doc, question, params, ui) {
  const turns = threadOf(doc.id);
  const messages = [...history(turns), { role: 'user', content: question }];
  const turn = {
    question, answer: '', citations: [], quote: null, partial: null, stats: null, status: 'waiting', error: null,
    node: null,
  };
  if (params.mode === 'direct') turn.unquoted = true;
  turns.push(turn);
  active.controller = new AbortController();
  active.docId = doc.id;
  if (ui.isShown(doc.id)) cite(doc.id, []); // the earlier answer's quotes are not this one's
  ui.changed();
  ui.status('Waiting for the first token…');

  let finished = false;
  try {
    const body = { model: doc.model || `doc:${doc.id}`, messages, stream: true, ...params };
    const res = await openStream('/v1/chat/completions', body, active.controller.signal);
    await readEvents(res, (event, data) => {
      if (event === 'queued') {
        ui.status(`Waiting in line (${count(data.position)} ahead)…`);
        return;
      }
      if (event !== 'message') return; // events this page does not know are ignored
      if (data === '[DONE]') {
        finished = true;
        return;
      }
      if (!data || typeof data !== 'object') return;
      if (data.error) throw new ApiError(0, data.error.type, data.error.message);
      if (typeof data.queue_position === 'number' && data.queue_position > 0 && turn.status === 'waiting') {
        ui.status(`Waiting in line (${count(data.queue_position)} ahead)…`); // the first chunk says where
      }
      const choice = (data.choices || [])[0];
      if (data.partial) { // the document is still being read: the answer comes from the part read so far
        turn.partial = data.partial;
        scheduleRender(turn);
        return; // its line is shown beside the answer, not in it (nor sent back as the conversation)
      }
      const text = choice && choice.delta ? choice.delta.content : ''; // the first chunk carries only the role
      if (text) {
        if (turn.status === 'waiting') ui.status('Writing…');
        turn.status = 'streaming';
        turn.answer += text;
        scheduleRender(turn);
      }
      if (Array.isArray(data.citations)) turn.citations = data.citations;
      if (data.quote) turn.quote = data.quote;
      if (data.docqa) turn.stats = data.docqa;
    });
    if (!finished) throw new ApiError(0, 'network', 'the answer stream ended before its last chunk');
    turn.status = 'done';
  } catch (err) {
    turn.status = err.name === 'AbortError' ? 'stopped' : 'error';
    turn.error = err;
  } finally {
    active.controller = null;
    active.docId = null;
    dirty.delete(turn);
    save(doc.id); // kept in this browser: a reload shows it again
    ui.changed(); // re-renders the thread and stats if this document is shown
    if (ui.isShown(doc.id)) cite(doc.id, turn.citations);
    if (turn.status === 'done') {
      if (turn.stats && turn.stats.finish_reason === 'repetition') {
        ui.status('Done: stopped where the answer began to repeat itself.', 'warn');
      } else if (turn.answer.trim()) ui.status('Done.', 'ok');
      else ui.status('The model gave no answer.', 'warn');
    } else if (turn.status === 'stopped') {
      ui.status('Stopped.');
    } else {
      ui.status('Not answered; see the message above.', 'error');
    }
  }
}
