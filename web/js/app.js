// docqa web page: upload documents, watch them being prepared, and hold a conversation about each,
// or about several checked together (together.js: a collection, docs/collections.md).
// Plain ES2020 modules, no build step. Model and document text reaches the DOM only as text nodes,
// or as Markdown sanitized by DOMPurify (chat.js).

import { api, ApiError, apiKey, hooks, setApiKey, upload } from './api.js';
import * as chat from './chat.js';
import { $, el, percent, progressBar } from './dom.js';
import { download, fileName, toMarkdown } from './export.js';
import { count, errorNode, plural, readFormats, show } from './messages.js';
import { readingWords, remaining, Progress } from './progress.js';
import * as together from './together.js';
import * as viewer from './viewer.js';

const { showCitations, showDocument, shownId } = viewer;
const LAST_DOC = 'docqa.lastDoc'; // localStorage: the document selected last, selected again on load

const state = {
  docs: [], // documents as last seen from the server
  selectedId: null, // the document the Ask and Document panels show
  uploadId: null, // the latest upload, mirrored in #upload-status
  polling: new Set(), // ids with an active ingest poll loop
  progress: new Map(), // id -> Progress (progress.js): the rate of a document being prepared, its ETA
  budget: null, // GET /health document_budget: the most tokens a document may have
  model: null, // GET /health model, for the export
  shown: null, // "id:status" the panels were last rendered for
  loaded: false, // the list was shown once (the first load selects a document)
  watching: null, // the interval that reads the list again while the server watches folders
};

const WATCH_REFRESH_MS = 10000; // how often the list is read again while the server watches folders
const docUrl = (id) => `/v1/documents/${encodeURIComponent(id)}`;
const pickedDoc = () => state.docs.find((d) => d.id === state.selectedId) || null;
/** What the Ask panel asks: the documents checked together (two or more), else the selected one. */
const selectedDoc = () => together.group(state.docs) || pickedDoc();

// ---------------------------------------------------------------- health and API key

async function loadHealth() {
  try {
    const health = await api('/health');
    if (health.status === 'loading') {
      $('model-name').textContent = 'loading…';
      setTimeout(loadHealth, 1000);
      return;
    }
    $('model-name').textContent = show(health.model);
    $('model-name').title = show(health.model_file);
    state.budget = health.document_budget || null;
    state.model = health.model || null;
    renderDocs(); // the notes on split documents name the budget
    // Watched folders (DOCQA_WATCH) add, change and remove documents on their own: follow the list.
    if (health.watched_folders && !state.watching) state.watching = setInterval(refreshDocs, WATCH_REFRESH_MS);
  } catch (_) {
    $('model-name').textContent = 'unavailable';
  }
}

/** The file field's formats, as the server reads them (GET /v1/formats, ingest/formats.py). */
async function loadFormats() {
  try {
    const { formats } = await api('/v1/formats');
    const suffixes = formats.flatMap((f) => f.suffixes);
    $('file').accept = suffixes.join(',');
    $('file-formats').textContent = `File (${suffixes.join(', ')})`;
    readFormats(formats);
  } catch (_) { /* the field takes any file: the server names what it reads when it refuses one */ }
}

function setKeyStatus(text, kind = '') {
  $('key-status').className = `key-status ${kind}`.trim();
  $('key-status').textContent = text;
  $('api-key').classList.toggle('needed', kind === 'error');
}

function onUnauthorized() {
  setKeyStatus(apiKey() ? 'This server needs an API key; the one entered was not accepted.' : 'This server needs an API key.', 'error');
  $('api-key').focus();
}

function applyKey() {
  setApiKey($('api-key').value.trim());
  setKeyStatus('');
  refreshDocs();
}

// ---------------------------------------------------------------- document list

async function refreshDocs() {
  try {
    state.docs = (await api('/v1/documents')).documents || [];
  } catch (err) {
    const item = el('li', 'empty');
    item.append(errorNode(err, { budget: state.budget }));
    $('doc-list').replaceChildren(item);
    return;
  }
  together.keep(state.docs);
  chat.keepOnly(state.docs.map((d) => d.id)); // conversations kept in this browser about deleted documents go
  if (!pickedDoc()) state.selectedId = state.loaded ? null : firstChoice();
  state.loaded = true;
  renderDocs();
  showSelected();
  // Resume polling for documents still being prepared (e.g. after a page reload).
  state.docs.filter((d) => d.status === 'ingesting').forEach((d) => startPolling(d.id));
}

/** On load: the document selected last in this browser, else the first ready one, else the first. */
function firstChoice() {
  let last = null;
  try {
    last = localStorage.getItem(LAST_DOC);
  } catch (_) { /* storage disabled */ }
  const pick = state.docs.find((d) => d.id === last) || state.docs.find((d) => d.status === 'ready') || state.docs[0];
  return pick ? pick.id : null;
}

/** Insert or merge a document. */
function upsertDoc(doc) {
  const i = state.docs.findIndex((d) => d.id === doc.id);
  if (i === -1) state.docs.unshift(doc);
  else state.docs[i] = { ...state.docs[i], ...doc };
  renderDocs();
  if (doc.id === state.selectedId) showSelected();
  if (doc.id === state.uploadId) renderUploadStatus(state.docs.find((d) => d.id === doc.id));
}

function removeDoc(id) {
  state.docs = state.docs.filter((d) => d.id !== id);
  together.keep(state.docs);
  chat.forget(id);
  if (state.selectedId === id) state.selectedId = null;
  if (state.uploadId === id) setUploadMessage('');
  renderDocs();
  showSelected();
}

function statusWord(doc) {
  if (doc.status === 'ready' && doc.needs_reingest) return 'must be read again';
  if (doc.status !== 'ingesting') return doc.status;
  if (doc.reading) return readingWords(doc.reading, percent(doc.progress));
  const tracked = state.progress.get(doc.id); // a server that does not say: the rate measured here
  const eta = tracked ? tracked.eta() : null;
  return `preparing ${percent(doc.progress)}%${eta === null ? '' : ` · ${remaining(eta)}`}`;
}

/** The few words the Ask panel gives a document that is not ready, under its heading: the list has the
 * whole line (statusWord); this is one short state without parentheses ("waiting: 3rd in line · about
 * 4 min left"). The whole line in the heading was cut mid-parenthesis beside a long name, and said the
 * same thing a third time (issue 51). */
function shortState(doc) {
  if (doc.status === 'failed') return 'could not be prepared';
  if (doc.status !== 'ingesting') return doc.status;
  const r = doc.reading;
  const pct = percent(doc.progress);
  let words = `preparing ${pct}%`;
  let left = null;
  if (r) {
    left = r.seconds_left;
    if (r.paused) words = `paused at ${pct}%`;
    else if (r.waiting) words = r.position > 1 ? `waiting: ${ordinal(r.position)} in line` : 'waiting its turn';
  } else {
    const tracked = state.progress.get(doc.id); // a server that does not say: the rate measured here
    left = tracked ? tracked.eta() : null;
  }
  return left === null || left === undefined ? words : `${words} · ${remaining(left)}`;
}

/** 1st, 2nd, 3rd, 4th, … 11th, 12th, 13th, 21st. */
function ordinal(n) {
  const tens = n % 100;
  const suffix = tens >= 11 && tens <= 13 ? 'th' : { 1: 'st', 2: 'nd', 3: 'rd' }[n % 10] || 'th';
  return `${n}${suffix}`;
}

/** Why and how a long document was split: "In 3 parts: 40,123 tokens, more than …"; one split when
 * the server read less at once, which now fits whole, says so (issue 39 item 11: "3,922 tokens, more
 * than the 31,744 the model reads at once"), and the list offers to read it again (rereadButton). */
function splitNote(doc) {
  const parts = doc.segments;
  if (!Array.isArray(parts) || parts.length < 2) return '';
  if (fitsWhole(doc)) {
    return `In ${parts.length} parts, split when the server read fewer tokens at once: its `
      + `${plural(doc.tokens, 'token')} now fit in one piece. Read it again to answer from all of it.`;
  }
  const limit = state.budget ? `, more than the ${count(state.budget)} the model reads at once` : ', more than the model reads at once';
  return `In ${parts.length} parts: ${plural(doc.tokens, 'token')}${limit}. `
    + 'Each question is answered from the part (or two) that best matches it.';
}

/** A document split into parts whose whole text now fits what the model reads at once. */
const fitsWhole = (doc) => Array.isArray(doc.segments) && doc.segments.length > 1
  && doc.status === 'ready' && Number(state.budget) > 0 && doc.tokens <= state.budget;

/** "Re-read": POST /v1/documents/{id}/reingest, then follow its reading (server/service/refit.py). */
function rereadButton(doc) {
  const button = el('button', 'reread secondary', 'Re-read');
  button.type = 'button';
  button.title = `Read ${doc.name} again at this server's size`;
  button.addEventListener('click', async (ev) => {
    ev.stopPropagation(); // don't also select the item
    button.disabled = true;
    try {
      await api(`${docUrl(doc.id)}/reingest`, { method: 'POST' });
      upsertDoc(await api(docUrl(doc.id)));
      startPolling(doc.id);
    } catch (err) {
      button.disabled = false;
      setUploadError(err);
    }
  });
  return button;
}

function renderDocs() {
  const list = $('doc-list');
  list.replaceChildren(...state.docs.map(renderDoc));
  // Not "no documents" before the list has been read: it may yet say that a key is needed.
  const empty = state.loaded ? 'No documents yet. Upload one above.' : 'Reading the list of documents…';
  if (!state.docs.length) list.append(el('li', 'empty', empty));
  together.renderNote(state.docs, () => {
    together.clear();
    renderDocs();
    showSelected();
  });
  updateAskState();
}

/** "read 3 min ago", from unix seconds. */
function ago(seconds) {
  const s = Math.max(0, Date.now() / 1000 - seconds);
  if (s < 60) return 'read just now';
  if (s < 3600) return `read ${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `read ${Math.floor(s / 3600)} h ago`;
  return `read ${plural(Math.floor(s / 86400), 'day')} ago`;
}

/**
 * A watched file's document: when it was read and its folder ("read 3 min ago · ~/docs"; a long folder is
 * cut), or "folder unavailable · ~/docs" while its folder is gone (the document is kept and still answers).
 */
function sourceLine(doc) {
  const path = doc.source_path;
  const folder = path.slice(0, path.lastIndexOf('/')) || '/';
  const when = doc.folder_unavailable ? 'folder unavailable' : (doc.read_at ? ago(doc.read_at) : 'not read yet');
  const line = el('div', `doc-source${doc.folder_unavailable ? ' unavailable' : ''}`, `${when} · ${folder}`);
  line.title = `${path}${doc.read_at ? `\nread ${new Date(doc.read_at * 1000).toLocaleString()}` : ''}`
    + `${doc.folder_unavailable ? `\nfolder unavailable: ${doc.folder_unavailable}; the document is kept` : ''}`;
  return line;
}

function renderDoc(doc) {
  const item = el('li', `doc status-${doc.status}`);
  item.dataset.id = doc.id;
  item.tabIndex = 0;
  const group = together.group(state.docs);
  if (group ? together.has(doc.id) : doc.id === state.selectedId) item.classList.add('selected');

  const head = el('div', 'doc-head');
  if (doc.status === 'ready') {
    head.append(together.checkbox(doc, () => {
      renderDocs();
      showSelected();
    }));
  }
  const name = el('span', 'doc-name', show(doc.name));
  name.title = doc.name; // long names are cut with an ellipsis
  // "×", not "Delete": beside the checkbox in a 260 px list every pixel is the name's (issue 39 item 8).
  const remove = el('button', 'delete secondary', '×');
  remove.type = 'button';
  remove.title = `Delete ${doc.name}`;
  remove.setAttribute('aria-label', `Delete ${doc.name}`);
  remove.addEventListener('click', (ev) => {
    ev.stopPropagation(); // don't also select the item
    deleteDoc(doc);
  });
  head.append(name, remove);

  item.append(head, el('div', 'doc-meta', `${statusWord(doc)} · ${plural(doc.pages, 'page')} · ${plural(doc.tokens, 'token')}`));
  if (doc.source_path) item.append(sourceLine(doc));
  if (doc.status === 'ingesting') item.append(progressBar(percent(doc.progress), `Preparing ${doc.name}`));
  const split = splitNote(doc);
  if (split) {
    const note = el('div', 'doc-split', split);
    note.title = doc.segments.map((p) => p.label || `pages ${p.pages[0]}–${p.pages[1]}`).join('\n');
    item.append(note);
  }
  if (doc.status === 'ready' && doc.needs_reingest) {
    // Read for a larger context than this server's (DOCQA_N_CTX lowered): it cannot be asked until read again.
    const note = el('div', 'doc-reread', `Must be read again before it can be asked: ${doc.needs_reingest}. `);
    note.append(rereadButton(doc));
    item.append(note);
  } else if (fitsWhole(doc)) {
    item.append(rereadButton(doc));
  }
  if (doc.status === 'failed') item.append(errorNode(new ApiError(0, 'document_failed', doc.error || 'unknown error')));
  if (Array.isArray(doc.warnings) && doc.warnings.length) {
    const warnings = el('ul', 'doc-warnings');
    warnings.setAttribute('aria-label', `Warnings about ${doc.name}`);
    for (const line of warningLines(doc.warnings)) warnings.append(el('li', '', line));
    item.append(warnings);
  }

  item.addEventListener('click', () => selectDoc(doc.id));
  item.addEventListener('keydown', (ev) => {
    if (ev.target === item && (ev.key === 'Enter' || ev.key === ' ')) {
      ev.preventDefault();
      selectDoc(doc.id);
    }
  });
  return item;
}

/**
 * A document's warnings as lines, one per message: a message on several pages (OCR's "read by OCR
 * ..." on each scanned page) is one line, "Pages 2–4, 7: read by OCR ...".
 */
function warningLines(warnings) {
  const pages = new Map(); // message -> page numbers, in the order the messages first appear
  const lines = [];
  for (const w of warnings) {
    if (!w.page) lines.push(show(w.message));
    else if (pages.has(w.message)) pages.get(w.message).push(w.page);
    else pages.set(w.message, [w.page]);
  }
  for (const [message, numbers] of pages) lines.push(`${pageList(numbers)}: ${message}`);
  return lines;
}

/** "Page 3", "Pages 2–4, 7": page numbers with runs joined. */
function pageList(numbers) {
  const runs = [];
  for (const n of [...new Set(numbers)].sort((a, b) => a - b)) {
    const last = runs[runs.length - 1];
    if (last && n === last[1] + 1) last[1] = n;
    else runs.push([n, n]);
  }
  const text = runs.map(([a, b]) => (a === b ? `${a}` : `${a}–${b}`)).join(', ');
  return numbers.length === 1 ? `Page ${text}` : `Pages ${text}`;
}

/** Make `id` the selected document, remembered for the next visit. */
function choose(id) {
  state.selectedId = id;
  try {
    localStorage.setItem(LAST_DOC, id);
  } catch (_) { /* storage disabled */ }
}

function selectDoc(id) {
  together.clear(); // a click on one document asks it alone
  choose(id);
  renderDocs();
  showSelected();
}

/**
 * Point the Ask and Document panels at the selected document. They are rebuilt when the selection
 * or its status changes (so a new upload never shows the previous document's text or answers);
 * while it is being prepared only its progress is refreshed.
 */
function showSelected(force = false) {
  const doc = selectedDoc();
  const key = doc ? `${doc.id}:${doc.status}` : '';
  updateAskState();
  if (key === state.shown && !force) {
    if (doc && doc.status === 'ingesting') showDocument(doc);
    return;
  }
  state.shown = key;
  chat.renderThread(doc);
  if (doc && doc.group) { // the document the latest answer quotes, else the first one
    const latest = chat.latestCitations(doc.id);
    if (latest.length) showCited(doc.id, latest);
    else showDocument(doc.docs[0]);
    return;
  }
  showDocument(doc).then(() => {
    if (doc && shownId() === doc.id) showCitations(doc.id, chat.latestCitations(doc.id));
  });
}

/**
 * Show the citations of an answer in conversation `threadId`. A collection's citations name their
 * document (`document_id`): the viewer opens it (the first one quoted) and highlights its quotes.
 */
/** Show an answer's citations in the viewer; resolves once they are highlighted (chat.js then
 * brings the focused one into view). */
async function showCited(threadId, citations) {
  const docId = citations.length ? citations[0].document_id : null;
  if (!docId) {
    await showCitations(threadId.startsWith('group:') ? shownId() : threadId, citations);
    return;
  }
  const doc = state.docs.find((d) => d.id === docId);
  if (!doc) return; // deleted since
  const mine = citations.filter((c) => c.document_id === docId);
  await showDocument(doc);
  await showCitations(docId, mine);
}

async function deleteDoc(doc) {
  if (!window.confirm(`Delete "${doc.name}"?`)) return;
  try {
    await api(docUrl(doc.id), { method: 'DELETE' });
  } catch (err) {
    if (err.status !== 404) {
      setUploadError(err);
      return;
    }
  }
  removeDoc(doc.id);
}

/**
 * Follow a document while it is being prepared, by polling GET /v1/documents/{id} at the interval
 * its progress rate calls for (progress.js `Progress.nextPollMs`: about once a second at first, up to
 * once every 5 s on a long prefill), not every 500 ms (1,012 access-log lines for one ingest).
 * Polling, not server-sent events: it needs no connection held open per watcher nor a new route, and
 * works the same through the cluster's ingress and any proxy; the ETA comes from the rate either way.
 */
function startPolling(id) {
  if (state.polling.has(id)) return;
  state.polling.add(id);
  if (!state.progress.has(id)) state.progress.set(id, new Progress());
  const tracked = state.progress.get(id);
  const tick = async () => {
    let doc;
    try {
      doc = await api(docUrl(id));
    } catch (err) {
      if (err.status === 404 || err.status === 401) {
        state.polling.delete(id); // gone, or no key: refreshDocs resumes polling later
        if (err.status === 404) removeDoc(id);
      } else {
        setTimeout(tick, tracked.backoffMs()); // transient failure: back off, keep trying
      }
      return;
    }
    tracked.add(doc.progress);
    upsertDoc(doc);
    if (doc.status === 'ingesting') setTimeout(tick, tracked.nextPollMs());
    else {
      state.polling.delete(id);
      state.progress.delete(id);
    }
  };
  setTimeout(tick, tracked.nextPollMs());
}

// ---------------------------------------------------------------- upload

function setUploadMessage(text, kind = '') {
  const box = $('upload-status');
  box.className = `status ${kind}`.trim();
  box.textContent = text;
}

function setUploadError(err, retry) {
  const box = $('upload-status');
  box.className = 'status error';
  box.replaceChildren(errorNode(err, { budget: state.budget }));
  const part = err.type === 'document_too_long' && partThatFits(err.details.fits);
  if (part && retry) {
    // A document longer than the context: its leading part that fits, in one click.
    const offer = el('button', 'offer', part.label);
    offer.type = 'button';
    offer.addEventListener('click', () => retry(part.field));
    box.firstChild.insertBefore(offer, box.firstChild.querySelector('details'));
  }
}

/** The 413's `fits` ({pages: [a, b]} or {chars: [a, b]}) as a form field and a button label. */
function partThatFits(fits) {
  if (fits && Array.isArray(fits.pages)) {
    const [a, b] = fits.pages;
    return { field: { pages: `${a}-${b}` }, label: a === b ? `Ingest page ${a}` : `Ingest pages ${a}–${b}` };
  }
  if (fits && Array.isArray(fits.chars)) {
    const [a, b] = fits.chars;
    const label = a === 0 ? `Ingest the first ${plural(b, 'character')}` : `Ingest characters ${count(a)}–${count(b)}`;
    return { field: { chars: `${a}-${b}` }, label };
  }
  return null;
}

function renderUploadStatus(doc) {
  if (!doc) return;
  if (doc.status === 'ingesting') {
    // The list shows how its reading goes (statusWord, with its bar): said once, not here again.
    setUploadMessage(`Uploaded ${doc.name}: it is read in its turn, as the list shows.`);
  } else if (doc.status === 'ready') {
    setUploadMessage(`${doc.name}: ready (${plural(doc.pages, 'page')}, ${plural(doc.tokens, 'token')})`, 'ok');
  } else {
    setUploadMessage(`${doc.name} could not be prepared.`, 'error');
  }
}

/** Feedback while the bytes go up, then while the server reads the file (extracts and counts its text). */
function showUploadProgress(name, fraction) {
  if (fraction < 1) {
    const pct = percent(fraction);
    setUploadMessage(`Uploading ${name}: ${pct}%`);
    $('upload-status').append(progressBar(pct, `Uploading ${name}`));
  } else {
    setUploadMessage(`Reading ${name}…`);
  }
}

async function onUpload(ev) {
  ev.preventDefault();
  const file = $('file').files[0];
  if (!file) {
    setUploadMessage('Choose a file first.', 'error');
    return;
  }
  await sendUpload(file, $('password').value, {});
}

/** Upload `file` (with its PDF `password`, if any), or the `part` of it ({pages} or {chars}). */
async function sendUpload(file, password, part) {
  const form = new FormData();
  form.append('file', file);
  if (password) form.append('password', password);
  for (const [field, value] of Object.entries(part)) form.append(field, value);

  $('upload').disabled = true;
  showUploadProgress(file.name, 0);
  try {
    const { status, body } = await upload('/v1/documents', form, (f) => showUploadProgress(file.name, f));
    $('file').value = '';
    $('password').value = '';
    $('password').classList.remove('needed');
    // The upload reply has only id, name and status; the list wants pages and tokens too.
    const doc = await api(docUrl(body.id)).catch(() => body);
    state.uploadId = doc.id;
    choose(doc.id); // questions go to the new document
    upsertDoc(doc); // shows it in every panel
    if (status === 200) setUploadMessage(`${doc.name} was already uploaded (${statusWord(doc)}).`, 'ok');
    if (doc.status === 'ingesting') startPolling(doc.id);
  } catch (err) {
    setUploadError(err, (field) => sendUpload(file, password, field));
    if (err.type === 'password_required' || err.type === 'wrong_password') {
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
  const busy = chat.streaming();
  const ready = doc && doc.status === 'ready';
  const reading = chat.askableWhileReading(doc); // answered from the part read so far
  $('ask').disabled = busy || !(ready || reading);
  $('ask').title = !doc ? 'Select a document first' : ready || reading ? '' : `${doc.name} is not ready yet`;
  $('stop').disabled = !busy;
  $('question').disabled = busy;
  $('new-conversation').disabled = !doc || !chat.threadOf(doc.id).length;
  $('export').disabled = !doc || !chat.threadOf(doc.id).length;
  const name = $('selected-name');
  name.textContent = doc ? `— ${doc.name}` : '(select a document)';
  name.title = doc ? doc.name : '';
  const state = $('selected-state'); // one short state, under the heading: its name may take three lines
  state.hidden = !doc || ready;
  state.textContent = doc && !ready ? shortState(doc) : '';
}

function numberInput(id, fallback, parse) {
  const value = parse($(id).value);
  return Number.isFinite(value) ? value : fallback;
}

const chatUi = {
  status: setAskStatus,
  isShown: (id) => (selectedDoc() || {}).id === id,
  changed: () => {
    updateAskState();
    chat.renderThread(selectedDoc());
  },
};

/** The decoding settings on screen, as chat.ask takes them. */
function askParams() {
  const params = {
    max_tokens: numberInput('max-tokens', 256, (v) => parseInt(v, 10)),
    temperature: numberInput('temperature', 0, parseFloat),
    verify16: $('verify16').checked,
  };
  // Empty draft tokens = the server chooses the window (adaptive); verify16 wins anyway.
  const draft = parseInt($('draft-tokens').value, 10);
  if (Number.isFinite(draft)) params.draft_tokens = draft;
  return params;
}

// A refused answer asked again without the quote (chat.js), in its place: the same checks as Ask, the
// settings on screen; documents asked together only once their collection is made.
chat.onAskAgain((question, before) => {
  const doc = selectedDoc();
  if (chat.streaming() || !doc || doc.status !== 'ready' || together.busy()) return false;
  const model = doc.group ? together.madeFor(doc) : undefined;
  if (doc.group && !model) return false;
  before();
  chat.ask(model ? { ...doc, model } : doc, question, { ...askParams(), mode: 'direct' }, chatUi);
  return true;
});

function onAsk() {
  const doc = selectedDoc();
  const question = $('question').value.trim();
  if (chat.streaming() || !doc || doc.status !== 'ready' || together.busy()) return;
  if (!question) {
    setAskStatus('Type a question first.', 'error');
    $('question').focus();
    return;
  }
  const params = askParams();
  $('question').value = '';
  const model = doc.group ? together.madeFor(doc) : undefined;
  if (!doc.group || model) { // asked at once, so that the turn is on screen when the click returns
    chat.ask(model ? { ...doc, model } : doc, question, params, chatUi);
    return;
  }
  setAskStatus('Gathering the documents into a collection…');
  together.collection(doc).then(
    (model) => chat.ask({ ...doc, model }, question, params, chatUi),
    (err) => {
      $('question').value = question;
      setAskStatus(`Could not ask them together: ${err.message}`, 'error');
    },
  );
}

function onNewConversation() {
  const doc = selectedDoc();
  if (!doc) return;
  chat.clearThread(doc.id);
  setAskStatus('');
  showSelected(true);
  $('question').focus();
}

function onExport() {
  const doc = selectedDoc();
  if (!doc) return;
  download(toMarkdown(doc, chat.threadOf(doc.id), { model: state.model }), fileName(doc.name));
}

// ---------------------------------------------------------------- wiring

function init() {
  hooks.unauthorized = onUnauthorized;
  $('api-key').value = apiKey();
  $('key-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    applyKey();
  });
  $('api-key').addEventListener('change', applyKey);
  $('upload-form').addEventListener('submit', onUpload);
  $('ask-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    onAsk();
  });
  $('question').addEventListener('keydown', (ev) => {
    // Enter submits, Shift+Enter inserts a newline; leave IME composition alone.
    if (ev.key === 'Enter' && !ev.shiftKey && !ev.isComposing) {
      ev.preventDefault();
      onAsk();
    }
  });
  $('stop').addEventListener('click', chat.stop);
  $('new-conversation').addEventListener('click', onNewConversation);
  $('export').addEventListener('click', onExport);
  viewer.init();
  chat.setCiteHandler(showCited);
  loadHealth();
  loadFormats();
  refreshDocs();
}

init(); // modules run after the document is parsed
