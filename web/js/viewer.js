// The document viewer: the selected document's text with page markers, and the spans an answer
// quotes highlighted. It always shows the selected document; one that is not ready yet gets a
// placeholder, never the previous document's text.

import { api, ApiError } from './api.js';
import { $, el, percent, scrollWithin } from './dom.js';
import { errorNode } from './messages.js';

const view = {
  id: null, // id of the document whose text is shown (null: a placeholder)
  text: '',
  pages: [], // [{page, start, end}]
  citations: [], // [{start, end, page, page_end, text, source}] of the answer being shown
  loading: 0, // bumps on every request, so a late reply for another document is dropped
};

export const shownId = () => view.id;

function placeholder(name, node) {
  view.id = null;
  view.citations = [];
  $('viewer-name').textContent = name ? `— ${name}` : '';
  $('viewer-name').title = name || '';
  $('citations').replaceChildren();
  $('viewer').replaceChildren(node);
}

/** Show `doc` (a document from the list, or null). Ready documents get their text, loaded once. */
export async function showDocument(doc) {
  const ticket = ++view.loading;
  if (!doc) {
    placeholder('', el('p', 'placeholder', 'Select a document to see its text here.'));
    return;
  }
  if (doc.status === 'ingesting') {
    const box = el('div', 'placeholder');
    box.append(
      el('p', '', `${doc.name} is being prepared (${percent(doc.progress)}%).`),
      el('p', '', 'Its text appears here when it is ready.'),
    );
    placeholder(doc.name, box);
    return;
  }
  if (doc.status !== 'ready') {
    placeholder(doc.name, el('p', 'placeholder', `${doc.name} could not be prepared, so there is no text to show.`));
    return;
  }
  if (view.id === doc.id) return;
  placeholder(doc.name, el('p', 'placeholder', `Loading the text of ${doc.name}…`));
  try {
    const body = await api(`/v1/documents/${encodeURIComponent(doc.id)}/text`);
    if (ticket !== view.loading) return; // another document was selected meanwhile
    Object.assign(view, { id: doc.id, text: body.text || '', pages: body.pages || [], citations: [] });
    render();
  } catch (err) {
    if (ticket === view.loading) placeholder(doc.name, errorNode(err instanceof ApiError ? err : new ApiError(0, 'network', String(err))));
  }
}

/** Highlight `citations` if the viewer shows document `docId` (a no-op otherwise). */
export function showCitations(docId, citations) {
  if (view.id !== docId) return;
  view.citations = citations || [];
  render();
}

/**
 * Render the text with a marker at each page start and a <mark> on each cited span.
 * Citations come from the server sorted and non-overlapping; everything is set as text nodes.
 */
function render() {
  const cuts = new Map(); // offset -> what starts there
  for (const p of view.pages) cuts.set(p.start, { ...(cuts.get(p.start) || {}), page: p.page });
  view.citations.forEach((c, i) => cuts.set(c.start, { ...(cuts.get(c.start) || {}), cite: i }));
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
      const c = view.citations[cut.cite];
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
  $('viewer').replaceChildren(...nodes);

  $('citations').replaceChildren(...view.citations.map((c, i) => {
    const item = el('li');
    item.dataset.cite = i;
    const pages = c.page === c.page_end ? `p. ${c.page}` : `pp. ${c.page}–${c.page_end}`;
    const quote = c.text.length > 120 ? `${c.text.slice(0, 117)}…` : c.text;
    const link = el('button', 'cite-link');
    link.type = 'button';
    link.title = `Show this quote in the text (characters ${c.start}–${c.end}, ${c.source})`;
    link.append(el('span', 'cite-page', pages), el('span', 'cite-text', `“${quote}”`));
    link.addEventListener('click', () => focusCitation(i));
    item.append(link);
    return item;
  }));
  if (view.citations.length) focusCitation(0);
}

/** Mark citation i as focused and scroll the viewer (only the viewer, not the page) to it. */
function focusCitation(i) {
  const box = $('viewer');
  box.querySelectorAll('mark.cite').forEach((m) => m.classList.toggle('focused', m.dataset.cite === String(i)));
  const mark = box.querySelector(`mark.cite[data-cite="${i}"]`);
  if (mark) scrollWithin(box, mark);
}
