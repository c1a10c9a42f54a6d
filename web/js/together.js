// Several documents asked together: the checkboxes in the document list, the note above it, and the
// collection (POST /v1/collections, docs/collections.md) the questions go to, as model
// "collection:<id>". A collection with exactly the checked documents is reused (made by this page
// earlier, or by anyone); otherwise one is made, named after its documents.

import { api } from './api.js';
import { $, el } from './dom.js';

const picked = new Set(); // ids of the checked documents, in the order they were checked
const made = new Map(); // key of a set of ids -> "collection:<id>"
let pending = null; // the collection being made, while it is

const keyOf = (ids) => [...ids].sort().join('+');

export const has = (id) => picked.has(id);
export const busy = () => pending !== null;

export function clear() {
  picked.clear();
}

/** Forget checked documents that are gone or no longer ready. */
export function keep(docs) {
  for (const id of [...picked]) {
    const doc = docs.find((d) => d.id === id);
    if (!doc || doc.status !== 'ready') picked.delete(id);
  }
}

/**
 * The checked documents as one thing to ask ({id: "group:<key>", name, status, group, docs}), or null
 * when fewer than two are checked. Its id keys its conversation (chat.js).
 */
export function group(docs) {
  const members = [...picked].map((id) => docs.find((d) => d.id === id)).filter(Boolean);
  if (members.length < 2) return null;
  return { id: `group:${keyOf(picked)}`, name: members.map((d) => d.name).join(' + '), status: 'ready', group: true, docs: members };
}

/** The "ask together" checkbox of ready document `doc`; `changed()` after a click. */
export function checkbox(doc, changed) {
  const box = el('input', 'pick');
  box.type = 'checkbox';
  box.checked = picked.has(doc.id);
  box.title = 'Check two or more documents to ask them together';
  box.setAttribute('aria-label', `Ask ${doc.name} together with other checked documents`);
  box.addEventListener('click', (ev) => ev.stopPropagation()); // checking is not selecting
  box.addEventListener('keydown', (ev) => ev.stopPropagation());
  box.addEventListener('change', () => {
    if (box.checked) picked.add(doc.id);
    else picked.delete(doc.id);
    changed();
  });
  return box;
}

/** The note above the list: what is asked together, with a button that stops it (`onClear`). */
export function renderNote(docs, onClear) {
  const note = $('together');
  const g = group(docs);
  if (!picked.size) {
    note.hidden = true;
    note.replaceChildren();
    return;
  }
  note.hidden = false;
  const text = g
    ? `Asking ${g.docs.length} documents together. Each question is answered from the one (or two) that best match it.`
    : 'Check one more document to ask them together.';
  const button = el('button', 'secondary', g ? 'Ask one at a time' : 'Uncheck');
  button.type = 'button';
  button.addEventListener('click', onClear);
  note.replaceChildren(el('span', '', text), button);
}

/** The model of group `g` ("collection:<id>") if this page made or found it already, else undefined. */
export const madeFor = (g) => made.get(keyOf(g.docs.map((d) => d.id)));

/** The model that asks group `g` ("collection:<id>"): a collection of exactly its documents. */
export async function collection(g) {
  const key = keyOf(g.docs.map((d) => d.id));
  if (made.has(key)) return made.get(key);
  pending = (async () => {
    const all = (await api('/v1/collections')).collections || [];
    const found = all.find((c) => c.documents.length === g.docs.length && keyOf(c.documents.map((d) => d.id)) === key);
    let id = found && found.id;
    if (!id) { // named after its documents; a name taken by another collection gets a number
      const names = new Set(all.map((c) => c.name));
      let name = g.name.slice(0, 180);
      for (let n = 2; names.has(name); n += 1) name = `${g.name.slice(0, 180)} (${n})`;
      const body = JSON.stringify({ name, document_ids: g.docs.map((d) => d.id) });
      id = (await api('/v1/collections', { method: 'POST', body, headers: { 'Content-Type': 'application/json' } })).id;
    }
    made.set(key, `collection:${id}`);
    return made.get(key);
  })();
  try {
    return await pending;
  } finally {
    pending = null;
  }
}
