// docqa web page: upload documents, watch ingest progress, ask questions and stream answers.
// Plain ES2020, no dependencies. Model and document text is only ever set via textContent/Text nodes.
'use strict';

const POLL_MS = 500;

const state = {
  docs: [],            // documents as last seen from the server
  selectedId: null,    // id of the document questions go to
  uploadId: null,      // id of the latest upload, mirrored in #upload-status
  polling: new Set(),  // ids with an active ingest poll loop
  controller: null,    // AbortController of the answer being streamed, if any
  viewer: null,        // {id, text, pages} of the document shown in the viewer pane
  citations: [],       // citations of the latest answer about that document
};

// ---------------------------------------------------------------- small helpers

const $ = (id) => document.getElementById(id);

/** Create an element with an optional class and text content. */
function el(tag, className = '', text = '') {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text) node.textContent = text;
  return node;
}

const percent = (p) => Math.round(Math.min(Math.max(Number(p) || 0, 0), 1) * 100);
const show = (v) => (v === null || v === undefined || v === '' ? '–' : String(v));
const count = (v) => (typeof v === 'number' ? v.toLocaleString() : show(v));

function progressBar(pct) {
  const bar = el('progress');
  bar.max = 100;
  bar.value = pct;
  bar.title = `${pct}%`;
  return bar;
}

function numberInput(id, fallback, parse) {
  const value = parse($(id).value);
  return Number.isFinite(value) ? value : fallback;
}

// ---------------------------------------------------------------- HTTP

class ApiError extends Error {
  constructor(status, type, message) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.type = type || 'error';
  }
}

/** Turn a non-2xx response ({"error": {"type", "message"}}) into an ApiError. */
async function apiError(res) {
  let err = {};
  try {
    err = (await res.json()).error || {};
  } catch (_) { /* not JSON */ }
  return new ApiError(res.status, err.type, err.message || `${res.status} ${res.statusText}`);
}

async function api(path, options = {}) {
  const res = await fetch(path, options);
  if (!res.ok) throw await apiError(res);
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

const docUrl = (id) => `/v1/documents/${encodeURIComponent(id)}`;

// ---------------------------------------------------------------- health

async function loadHealth() {
  try {
    const health = await api('/health');
    $('model-name').textContent = show(health.model);
  } catch (_) {
    $('model-name').textContent = 'unavailable';
  }
}

// ---------------------------------------------------------------- document list

const selectedDoc = () => state.docs.find((d) => d.id === state.selectedId) || null;

async function refreshDocs() {
  try {
    state.docs = (await api('/v1/documents')).documents || [];
  } catch (err) {
    setUploadMessage(`Could not load documents: ${err.message}`, 'error');
    return;
  }
  if (!selectedDoc()) state.selectedId = null;
  renderDocs();
  // Resume polling for documents still ingesting (e.g. after a page reload).
  state.docs.filter((d) => d.status === 'ingesting').forEach((d) => startPolling(d.id));
}

/** Insert or merge a document (a 202 upload reply carries only id/name/status). */
function upsertDoc(doc) {
  const i = state.docs.findIndex((d) => d.id === doc.id);
  if (i === -1) state.docs.unshift(doc);
  else state.docs[i] = { ...state.docs[i], ...doc };
  renderDocs();
  if (doc.id === state.uploadId) renderUploadStatus(state.docs.find((d) => d.id === doc.id));
}

function removeDoc(id) {
  state.docs = state.docs.filter((d) => d.id !== id);
  if (state.selectedId === id) state.selectedId = null;
  if (state.uploadId === id) setUploadMessage('');
  renderDocs();
}

function renderDocs() {
  const list = $('doc-list');
  list.replaceChildren(...state.docs.map(renderDoc));
  if (!state.docs.length) list.append(el('li', 'empty', 'No documents yet. Upload one above.'));
  updateAskState();
}

function renderDoc(doc) {
  const item = el('li', `doc status-${doc.status}`);
  item.dataset.id = doc.id;
  item.tabIndex = 0;
  if (doc.id === state.selectedId) item.classList.add('selected');

  const head = el('div', 'doc-head');
  const remove = el('button', 'delete', 'Delete');
  remove.type = 'button';
  remove.title = `Delete ${doc.name}`;
  remove.addEventListener('click', (ev) => {
    ev.stopPropagation(); // don't also select the item
    deleteDoc(doc);
  });
  head.append(el('span', 'doc-name', show(doc.name)), remove);

  const meta = `${doc.status} · ${count(doc.pages)} pages · ${count(doc.tokens)} tokens`;
  item.append(head, el('div', 'doc-meta', meta));
  if (doc.status === 'ingesting') item.append(progressBar(percent(doc.progress)));
  if (doc.status === 'failed') item.append(el('div', 'doc-error', show(doc.error)));

  item.addEventListener('click', () => selectDoc(doc.id));
  item.addEventListener('keydown', (ev) => {
    if (ev.target === item && (ev.key === 'Enter' || ev.key === ' ')) {
      ev.preventDefault();
      selectDoc(doc.id);
    }
  });
  return item;
}

function selectDoc(id) {
  state.selectedId = id;
  renderDocs();
  showDocument(selectedDoc());
}

// ---------------------------------------------------------------- document viewer

/** Load a ready document's text into the viewer pane (once per document). */
async function showDocument(doc) {
  if (!doc || doc.status !== 'ready') {
    if (!doc) { state.viewer = null; renderViewer(); }
    return;
  }
  if (state.viewer && state.viewer.id === doc.id) return;
  $('viewer-name').textContent = `— ${doc.name}`;
  try {
    const body = await api(`${docUrl(doc.id)}/text`);
    if (state.selectedId !== doc.id) return; // the user moved on meanwhile
    state.viewer = { id: doc.id, text: body.text || '', pages: body.pages || [] };
    state.citations = [];
    renderViewer();
  } catch (err) {
    $('viewer').textContent = `Could not load the document text: ${err.message}`;
  }
}

/**
 * Render the document text with a marker at each page start and a <mark> on each cited span.
 * Citations come from the server sorted and non-overlapping; everything is set as text nodes.
 */
function renderViewer() {
  const view = state.viewer;
  const box = $('viewer');
  const list = $('citations');
  if (!view) {
    box.replaceChildren();
    list.replaceChildren();
    $('viewer-name').textContent = '';
    return;
  }
  const cuts = new Map(); // offset -> what starts there
  for (const p of view.pages) cuts.set(p.start, { ...(cuts.get(p.start) || {}), page: p.page });
  state.citations.forEach((c, i) => cuts.set(c.start, { ...(cuts.get(c.start) || {}), cite: i }));
  const offsets = [...cuts.keys()].sort((a, b) => a - b);
  const nodes = [];
  let pos = 0;
  let open = null; // the <mark> being filled, and where it ends
  const emit = (end) => {
    if (end <= pos) return;
    const text = document.createTextNode(view.text.slice(pos, end));
    if (open) open.mark.append(text); else nodes.push(text);
    pos = end;
    if (open && pos >= open.end) open = null;
  };
  for (const at of offsets) {
    while (open && open.end <= at) emit(open.end);
    emit(at);
    const cut = cuts.get(at);
    if (cut.page !== undefined && view.pages.length > 1) {
      const marker = el('span', 'page-marker', `Page ${cut.page}`);
      marker.dataset.page = cut.page;
      if (open) open.mark.append(marker); else nodes.push(marker);
    }
    if (cut.cite !== undefined) {
      const c = state.citations[cut.cite];
      const mark = el('mark', 'cite');
      mark.dataset.cite = cut.cite;
      mark.dataset.page = c.page;
      mark.title = c.page === c.page_end ? `page ${c.page}` : `pages ${c.page}–${c.page_end}`;
      nodes.push(mark);
      open = { mark, end: c.end };
    }
  }
  while (open) emit(open.end);
  emit(view.text.length);
  box.replaceChildren(...nodes);

  list.replaceChildren(...state.citations.map((c, i) => {
    const item = el('li');
    item.dataset.cite = i;
    const pages = c.page === c.page_end ? `p. ${c.page}` : `pp. ${c.page}–${c.page_end}`;
    const quote = c.text.length > 120 ? `${c.text.slice(0, 117)}…` : c.text;
    item.append(el('span', 'cite-page', pages), el('span', 'cite-text', `“${quote}”`));
    item.title = `characters ${c.start}–${c.end} (${c.source})`;
    item.addEventListener('click', () => focusCitation(i));
    return item;
  }));
  if (state.citations.length) focusCitation(0);
}

function focusCitation(i) {
  const marks = $('viewer').querySelectorAll('mark.cite');
  marks.forEach((m) => m.classList.toggle('focused', m.dataset.cite === String(i)));
  const mark = $('viewer').querySelector(`mark.cite[data-cite="${i}"]`);
  if (mark) mark.scrollIntoView({ block: 'center' });
}

async function deleteDoc(doc) {
  if (!window.confirm(`Delete "${doc.name}"?`)) return;
  try {
    await api(docUrl(doc.id), { method: 'DELETE' });
  } catch (err) {
    if (err.status !== 404) {
      setUploadMessage(`Delete failed: ${err.message}`, 'error');
      return;
    }
  }
  removeDoc(doc.id);
}

/** Poll one document every POLL_MS while it is ingesting. */
function startPolling(id) {
  if (state.polling.has(id)) return;
  state.polling.add(id);
  const tick = async () => {
    let doc;
    try {
      doc = await api(docUrl(id));
    } catch (err) {
      if (err.status === 404) {
        state.polling.delete(id);
        removeDoc(id);
      } else {
        setTimeout(tick, POLL_MS * 4); // transient failure: back off, keep trying
      }
      return;
    }
    upsertDoc(doc);
    if (doc.status === 'ingesting') setTimeout(tick, POLL_MS);
    else {
      state.polling.delete(id);
      if (doc.id === state.selectedId) showDocument(doc);
    }
  };
  setTimeout(tick, POLL_MS);
}

// ---------------------------------------------------------------- upload

function setUploadMessage(text, kind = '') {
  const box = $('upload-status');
  box.className = `status ${kind}`.trim();
  box.textContent = text;
}

function renderUploadStatus(doc) {
  if (!doc) return;
  if (doc.status === 'ingesting') {
    const pct = percent(doc.progress);
    setUploadMessage(`${doc.name}: ingesting ${pct}%`);
    $('upload-status').append(progressBar(pct));
  } else if (doc.status === 'ready') {
    setUploadMessage(`${doc.name}: ready (${count(doc.pages)} pages, ${count(doc.tokens)} tokens)`, 'ok');
  } else {
    setUploadMessage(`${doc.name}: failed: ${doc.error || 'unknown error'}`, 'error');
  }
}

async function onUpload(ev) {
  ev.preventDefault();
  const file = $('file').files[0];
  if (!file) {
    setUploadMessage('Choose a file first.', 'error');
    return;
  }
  const form = new FormData();
  form.append('file', file);
  if ($('password').value) form.append('password', $('password').value);

  $('upload').disabled = true;
  setUploadMessage(`Uploading ${file.name}…`);
  try {
    const res = await fetch('/v1/documents', { method: 'POST', body: form });
    if (!res.ok) throw await apiError(res);
    const doc = await res.json();
    $('file').value = '';
    $('password').value = '';
    $('password').classList.remove('needed');
    state.uploadId = doc.id;
    state.selectedId = doc.id; // questions go to the new document by default
    upsertDoc(doc);
    if (res.status === 200) setUploadMessage(`${doc.name} was already uploaded (${doc.status}).`, 'ok');
    if (doc.status === 'ingesting') startPolling(doc.id);
  } catch (err) {
    setUploadMessage(err.message, 'error');
    // Encrypted PDF without (or with a wrong) password: point the user at the password field.
    if (/password/i.test(`${err.type} ${err.message}`)) {
      $('password').classList.add('needed');
      $('password').focus();
      $('password').select();
    }
  } finally {
    $('upload').disabled = false;
  }
}

// ---------------------------------------------------------------- asking

function setAskStatus(text, kind = '') {
  $('ask-status').className = kind || 'muted';
  $('ask-status').textContent = text;
}

function updateAskState() {
  const doc = selectedDoc();
  const streaming = state.controller !== null;
  $('ask').disabled = streaming || !doc || doc.status !== 'ready';
  $('ask').title = !doc ? 'Select a document first' : doc.status !== 'ready' ? `Document is ${doc.status}` : '';
  $('stop').disabled = !streaming;
  $('question').disabled = streaming;
  $('selected-name').textContent = doc ? `— ${doc.name}${doc.status === 'ready' ? '' : ` (${doc.status})`}` : '(select a document)';
}

/** Parse one SSE frame ("event: X\ndata: Y" lines) into {event, data}; null if it has no data. */
function parseFrame(frame) {
  let event = 'message';
  const data = [];
  for (const line of frame.split('\n')) {
    if (!line || line.startsWith(':')) continue; // blank or comment (keep-alive)
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
  }
  if (!data.length) return null;
  try {
    return { event, data: JSON.parse(data.join('\n')) };
  } catch (_) {
    return { event, data: {} };
  }
}

/** Read an SSE response body, calling onEvent(event, data) per frame. Frames may span chunks. */
async function readEvents(res, onEvent) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for (;;) {
      const { value, done } = await reader.read();
      buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
      // Normalise CRLF/CR to LF. A trailing '\r' may be half of a CRLF split across chunks: hold it back.
      const heldCR = !done && buffer.endsWith('\r');
      if (heldCR) buffer = buffer.slice(0, -1);
      buffer = buffer.replace(/\r\n?/g, '\n');
      let end;
      while ((end = buffer.indexOf('\n\n')) !== -1) {
        const frame = parseFrame(buffer.slice(0, end));
        buffer = buffer.slice(end + 2);
        if (frame) onEvent(frame.event, frame.data);
      }
      if (heldCR) buffer += '\r';
      if (done) break;
    }
    const last = parseFrame(buffer); // a final frame without the trailing blank line
    if (last) onEvent(last.event, last.data);
  } finally {
    reader.cancel().catch(() => {}); // releases the connection if we stopped early
  }
}

async function ask() {
  const doc = selectedDoc();
  const question = $('question').value.trim();
  if (state.controller || !doc || doc.status !== 'ready') return;
  if (!question) {
    setAskStatus('Type a question first.', 'error');
    $('question').focus();
    return;
  }
  const body = {
    question,
    max_tokens: numberInput('max-tokens', 256, (v) => parseInt(v, 10)),
    temperature: numberInput('temperature', 0, parseFloat),
    verify16: $('verify16').checked,
    stream: true,
  };
  // Empty draft_tokens = let the server choose the window (adaptive); verify16 wins anyway.
  const draft = parseInt($('draft-tokens').value, 10);
  if (Number.isFinite(draft)) body.draft_tokens = draft;

  if (state.viewer && state.viewer.id === doc.id && state.citations.length) {
    state.citations = []; // the old answer's highlights
    renderViewer();
  } else if (!state.viewer || state.viewer.id !== doc.id) {
    showDocument(doc);
  }
  // One Text node receives every token: cheap appends, never parsed as HTML.
  const output = document.createTextNode('');
  $('answer').replaceChildren(output);
  $('stats').replaceChildren();
  state.controller = new AbortController();
  updateAskState();
  setAskStatus('Waiting for the first token…');

  let stats = null;
  let finished = false;
  try {
    const res = await fetch(`${docUrl(doc.id)}/answers`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' },
      body: JSON.stringify(body),
      signal: state.controller.signal,
    });
    if (!res.ok) throw await apiError(res);
    setAskStatus('Streaming…');
    await readEvents(res, (event, data) => {
      if (event === 'token') {
        output.appendData(data.text || '');
        $('answer').scrollTop = $('answer').scrollHeight;
      } else if (event === 'citations') {
        if (state.viewer && state.viewer.id === doc.id) {
          state.citations = data.citations || [];
          renderViewer();
        }
      } else if (event === 'stats') {
        stats = data;
      } else if (event === 'done') {
        finished = true;
      } else if (event === 'error') {
        const err = data.error || {};
        throw new ApiError(0, err.type, err.message || 'The server reported an error.');
      }
    });
    setAskStatus(finished ? 'Done.' : 'The stream ended unexpectedly.', finished ? 'ok' : 'error');
  } catch (err) {
    if (err.name === 'AbortError') setAskStatus('Stopped.');
    else setAskStatus(`Error: ${err.message}`, 'error');
  } finally {
    state.controller = null;
    updateAskState();
    if (stats) renderStats(stats);
  }
}

// "accepted/drafted" per draft source, e.g. "3/8 · 40/44".
function bySource(s) {
  const d = s.drafted_by_source || {};
  const a = s.accepted_by_source || {};
  return ['mtp', 'lookup'].map((k) => `${a[k] || 0}/${d[k] || 0}`).join(' · ');
}

function renderStats(s) {
  const drafted = Number(s.drafted_tokens) || 0;
  const accepted = Number(s.accepted_tokens) || 0;
  const rate = drafted > 0 ? ` (${((100 * accepted) / drafted).toFixed(1)}%)` : '';
  const tps = Number(s.decode_tokens_per_s);
  const ttft = Number(s.ttft_ms);
  const rows = [
    ['ttft', 'TTFT', Number.isFinite(ttft) ? `${Math.round(ttft)} ms` : '–'],
    ['tps', 'Decode speed', Number.isFinite(tps) ? `${tps.toFixed(1)} tok/s` : '–'],
    ['prompt', 'Prompt tokens', count(s.prompt_tokens)],
    ['completion', 'Completion tokens', count(s.completion_tokens)],
    ['drafts', 'Drafted / accepted', `${drafted} / ${accepted}${rate}`],
    ['verify', 'Verify steps', count(s.verify_steps)],
    ['per-step', 'Accepted / step', Number.isFinite(Number(s.mean_accepted_per_step))
      ? Number(s.mean_accepted_per_step).toFixed(2) : '–'],
    ['sources', 'MTP / lookup', bySource(s)],
    ['finish', 'Finish reason', show(s.finish_reason)],
  ];
  const nodes = [];
  for (const [key, label, value] of rows) {
    const dd = el('dd', '', value);
    dd.dataset.stat = key;
    nodes.push(el('dt', '', label), dd);
  }
  $('stats').replaceChildren(...nodes);
}

// ---------------------------------------------------------------- wiring

function init() {
  $('upload-form').addEventListener('submit', onUpload);
  $('ask-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    ask();
  });
  $('question').addEventListener('keydown', (ev) => {
    // Enter submits, Shift+Enter inserts a newline; leave IME composition alone.
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      ask();
    }
  });
  $('stop').addEventListener('click', () => state.controller && state.controller.abort());
  loadHealth();
  refreshDocs();
}

document.addEventListener('DOMContentLoaded', init);
