// HTTP for the page: the API key, JSON requests, uploads with progress, and Server-Sent Events.
// Every request carries `Authorization: Bearer <key>` when the user entered a key.

const KEY_STORAGE = 'docqa.apiKey';

/** Called with the ApiError of every 401, so the page can point at the API key field. */
export const hooks = { unauthorized: () => {} };

export function apiKey() {
  try {
    return sessionStorage.getItem(KEY_STORAGE) || '';
  } catch (_) {
    return ''; // storage disabled: the key lives only in the field
  }
}

export function setApiKey(key) {
  try {
    if (key) sessionStorage.setItem(KEY_STORAGE, key);
    else sessionStorage.removeItem(KEY_STORAGE);
  } catch (_) { /* storage disabled */ }
}

function withAuth(headers = {}) {
  const key = apiKey();
  return key ? { ...headers, Authorization: `Bearer ${key}` } : { ...headers };
}

/**
 * An error the API reported ({"error": {"type", "message", ...}}), or `network` when it could not be
 * reached. `details`: the error object's other fields (a 413's `fits`: the part of a document that fits).
 */
export class ApiError extends Error {
  constructor(status, type, message, details = {}) {
    super(message || `HTTP ${status}`);
    this.status = status;
    this.type = type || 'error';
    this.details = details;
  }
}

function fromBody(status, statusText, err) {
  const { type, message, ...details } = err || {};
  return checked(new ApiError(status, type, message || `${status} ${statusText}`, details));
}

function checked(err) {
  if (err.status === 401) hooks.unauthorized(err);
  return err;
}

async function errorFrom(res) {
  let err = {};
  try {
    err = (await res.json()).error || {};
  } catch (_) { /* not JSON */ }
  return fromBody(res.status, res.statusText, err);
}

async function send(path, options) {
  try {
    return await fetch(path, { ...options, headers: withAuth(options.headers) });
  } catch (err) {
    if (err.name === 'AbortError') throw err;
    throw new ApiError(0, 'network', `${err.message} (${path})`);
  }
}

/** JSON request; resolves to the parsed body (null when empty), throws ApiError on a non-2xx. */
export async function api(path, options = {}) {
  const res = await send(path, options);
  if (!res.ok) throw await errorFrom(res);
  const text = await res.text();
  return text ? JSON.parse(text) : null;
}

/** POST a JSON body and return the (2xx) streaming response. */
export async function openStream(path, body, signal) {
  const res = await send(path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'text/event-stream' },
    body: JSON.stringify(body),
    signal,
  });
  if (!res.ok) throw await errorFrom(res);
  return res;
}

/**
 * Upload a multipart form with XMLHttpRequest, which (unlike fetch) reports upload progress:
 * onProgress(fraction of bytes sent). Resolves to {status, body}; throws ApiError.
 */
export function upload(path, form, onProgress) {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open('POST', path);
    const key = apiKey();
    if (key) xhr.setRequestHeader('Authorization', `Bearer ${key}`);
    xhr.upload.onprogress = (ev) => {
      if (ev.lengthComputable && ev.total > 0) onProgress(ev.loaded / ev.total);
    };
    xhr.onerror = () => reject(new ApiError(0, 'network', `the upload to ${path} failed`));
    xhr.onload = () => {
      let body = null;
      try {
        body = JSON.parse(xhr.responseText);
      } catch (_) { /* not JSON */ }
      if (xhr.status >= 200 && xhr.status < 300) {
        resolve({ status: xhr.status, body });
        return;
      }
      reject(fromBody(xhr.status, xhr.statusText, body && body.error));
    };
    xhr.send(form);
  });
}

/**
 * Parse one SSE frame ("event: X\ndata: Y" lines) into {event, data}; null if it has no data.
 * Comment lines (": keep-alive") are skipped. data is parsed JSON, or the raw string ("[DONE]").
 */
export function parseFrame(frame) {
  let event = 'message';
  const data = [];
  for (const line of frame.split('\n')) {
    if (!line || line.startsWith(':')) continue;
    const colon = line.indexOf(':');
    const field = colon === -1 ? line : line.slice(0, colon);
    let value = colon === -1 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event = value;
    else if (field === 'data') data.push(value);
  }
  if (!data.length) return null;
  const raw = data.join('\n');
  try {
    return { event, data: JSON.parse(raw) };
  } catch (_) {
    return { event, data: raw };
  }
}

/** Read an SSE response body, calling onEvent(event, data) per frame. Frames may span chunks. */
export async function readEvents(res, onEvent) {
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

/** GET `path` as bytes (an ArrayBuffer), with the API key; throws ApiError on a non-2xx. */
export async function fetchBytes(path) {
  const res = await send(path, { method: 'GET' });
  if (!res.ok) throw await errorFrom(res);
  return res.arrayBuffer();
}
