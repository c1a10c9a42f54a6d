// Words for people: API error types as sentences a non-programmer understands, and plurals.
// The API's own message (written for programmers) stays available under "Details".

import { el } from './dom.js';

/** What the page says for each API error type (`{"error": {"type"}}`). `{budget}`: the server's limit. */
const SENTENCES = {
  network: 'The docqa server cannot be reached. Check that it is still running, then try again.',
  unauthorized: 'This server needs an API key. Enter it in the API key field at the top of the page.',
  // Uploads
  password_required: 'This PDF is locked with a password. Type the password in the “PDF password” field and upload it again.',
  wrong_password: 'That password does not open this PDF. Check the password and upload the file again.',
  unsupported_type: 'docqa cannot read this kind of file.', // and what it reads: readFormats
  empty_document: 'This file has no text in it, so there is nothing to ask about.',
  no_text_layer: 'This PDF contains only images of pages (a scan), no text. Convert it with a text-recognition (OCR) tool first, then upload the result.',
  unreadable_pdf: 'This PDF could not be read; the file may be damaged. Try saving or exporting it as a PDF again.',
  bad_document: 'This file could not be read as a document.',
  document_too_long: 'This document is too long for this server{budget}. Split it into smaller parts and upload them one by one.',
  upload_too_large: 'This file is larger than this server accepts. Try a smaller file, or split the document.',
  // Documents and answers
  document_not_found: 'This document is no longer on the server; it may have been deleted.',
  document_ingesting: 'This document is still being prepared. Ask again when it shows “ready”.',
  document_not_ready: 'This document is being prepared again. Ask again when it shows “ready”.',
  document_failed: 'This document could not be prepared. Delete it and upload it again.',
  snapshot_incompatible: 'The server’s model changed since this document was prepared. Delete the document and upload it again.',
  needs_reingest: 'This document was read when the server read more at once than it does now, so it must be read again before it can be asked. Press “Re-read” under its name in the list.',
  snapshot_missing: 'The server lost its saved copy of this document and is preparing it again. Ask again in a moment.',
  question_too_long: 'The question, together with the conversation so far, is too long for this document. Start a new conversation, or ask a shorter question.',
  kv_cache_full: 'The server is busy with other questions. Try again in a moment.',
  engine_unavailable: 'The model is still loading. Try again in a few seconds.',
  engine_stopped: 'The server is shutting down. Ask again once it is back.',
  engine_error: 'Something went wrong on the server while answering. Try again; if it keeps happening, tell whoever runs the server.',
  internal_error: 'Something went wrong on the server. Try again; if it keeps happening, tell whoever runs the server.',
  invalid_request: 'The server did not accept these settings. Check max tokens, temperature and draft tokens.',
};

/** The formats the server reads (GET /v1/formats) into the sentence for a file it refuses. */
export function readFormats(formats) {
  const labels = formats.map((f) => f.label);
  const list = labels.length > 1 ? `${labels.slice(0, -1).join(', ')} and ${labels.at(-1)}` : labels.join('');
  SENTENCES.unsupported_type = `docqa cannot read this kind of file. It reads ${list} files.`;
}

/** The sentence for an error (an ApiError, or any Error: a lost connection). */
export function sentence(err, context = {}) {
  let type = err && err.type;
  if (!type || !(type in SENTENCES)) {
    if (!err || err.status === undefined || err.status === 0) type = 'network';
    else if (err.status >= 500) type = 'internal_error';
  }
  const text = SENTENCES[type];
  if (!text) return 'The server could not do this.';
  const budget = Number(context.budget) > 0 ? ` (at most ${count(context.budget)} tokens, about ${count(Math.round(context.budget * 0.75))} words)` : '';
  return text.replace('{budget}', budget);
}

/** The sentence, with the API's own text under a collapsed "Details". */
export function errorNode(err, context = {}) {
  const box = el('div', 'error-message');
  box.append(el('p', 'error-sentence', sentence(err, context)));
  const details = el('details', 'error-details');
  const status = err && err.status ? `HTTP ${err.status} ` : '';
  const type = err && err.type ? `${err.type}: ` : '';
  details.append(el('summary', '', 'Details'), el('code', '', `${status}${type}${(err && err.message) || err}`));
  box.append(details);
  return box;
}

export const show = (v) => (v === null || v === undefined || v === '' ? '–' : String(v));
export const count = (v) => (typeof v === 'number' && Number.isFinite(v) ? v.toLocaleString('en') : show(v));

/** "1 page", "2 pages", "1,024 tokens"; "– pages" when unknown. */
export function plural(n, noun) {
  return `${count(n)} ${n === 1 ? noun : `${noun}s`}`;
}

/** `text` between quote marks, folded to one line; a mark the quote already has at an end is not doubled. */
export function inQuotes(text) {
  const flat = text.replace(/\s+/g, ' ').trim();
  return `${/^[“"«‘]/.test(flat) ? '' : '“'}${flat}${/[”"»’]$/.test(flat) ? '' : '”'}`;
}
