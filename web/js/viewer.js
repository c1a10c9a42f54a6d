// The document viewer: the selected document's text with page markers and the spans an answer quotes
// highlighted, or, for a PDF, the PDF itself (pdfview.js) with the quotes highlighted on their pages:
// a toggle between the two, remembered in this browser. It always shows the selected document; one
// that is not ready yet gets a placeholder, never the previous document's text.

import { api, ApiError } from './api.js';
import { $, el, percent, scrollWithin } from './dom.js';
import { errorNode, inQuotes, plural } from './messages.js';
import { PdfView } from './pdfview.js';
import { perPage } from './textmatch.js';

const MODE_STORAGE = 'docqa.view';

const view = {
  id: null, // id of the document whose text is shown (null: a placeholder)
  kind: null, // its kind (pdf | docx | ...: GET /v1/formats)
  text: '',
  pages: [], // [{page, start, end}]
  citations: [], // [{start, end, page, page_end, text, source}] of the answer being shown
  loading: 0, // bumps on every request, so a late reply for another document is dropped
  pdf: null, // the PdfView of document `id`, once the PDF view was opened for it
  focus: 0, // the citation last focused
};

export const shownId = () => view.id;

function storedMode() {
  try {
    return localStorage.getItem(MODE_STORAGE) === 'pdf' ? 'pdf' : 'text';
  } catch (_) {
    return 'text';
  }
}

let choice = storedMode(); // what the reader chose last, in this browser

/** The view shown: the PDF for a PDF when the reader chose it last, else the text. */
const mode = () => (view.id && view.kind === 'pdf' && choice === 'pdf' ? 'pdf' : 'text');

function closePdf() {
  if (view.pdf) view.pdf.close();
  view.pdf = null;
  $('pdf-view').replaceChildren();
}

function placeholder(name, node) {
  view.id = null;
  view.kind = null;
  view.citations = [];
  closePdf();
  $('viewer-name').textContent = name ? `— ${name}` : '';
  $('viewer-name').title = name || '';
  $('citations').replaceChildren();
  $('pdf-note').replaceChildren();
  $('viewer').replaceChildren(node);
  applyMode();
}

/** Show `doc` (a document from the list, or null). Ready documents get their text, loaded once. */
export async function showDocument(doc) {
  const ticket = ++view.loading;
  if (!doc) {
    placeholder('', el('p', 'placeholder', 'Select a document to see its text here.'));
    return;
  }
  // A document being prepared has its text as soon as it is extracted (its counts are set then; an
  // upload read by OCR in the background has none until OCR ends): shown at once, not when it is ready.
  const extracted = doc.status === 'ready' || (doc.status === 'ingesting' && Number(doc.tokens) > 0);
  if (doc.status === 'ingesting' && !extracted) {
    const box = el('div', 'placeholder');
    box.append(
      el('p', '', `${doc.name} is being read from its file (${percent(doc.progress)}%).`),
      el('p', '', 'Its text appears here as soon as it is extracted.'),
    );
    placeholder(doc.name, box);
    return;
  }
  if (!extracted) {
    placeholder(doc.name, el('p', 'placeholder', `${doc.name} could not be prepared, so there is no text to show.`));
    return;
  }
  if (view.id === doc.id) return;
  placeholder(doc.name, el('p', 'placeholder', `Loading the text of ${doc.name}…`));
  try {
    const body = await api(`/v1/documents/${encodeURIComponent(doc.id)}/text`);
    if (ticket !== view.loading) return; // another document was selected meanwhile
    Object.assign(view, { id: doc.id, kind: doc.kind, text: body.text || '', pages: body.pages || [], citations: [] });
    render();
    applyMode();
  } catch (err) {
    if (ticket === view.loading) placeholder(doc.name, errorNode(err instanceof ApiError ? err : new ApiError(0, 'network', String(err))));
  }
}

/** Highlight `citations` if the viewer shows document `docId` (a no-op otherwise); resolves once the
 * PDF view, when shown, has highlighted them too. */
export async function showCitations(docId, citations) {
  if (view.id !== docId) return;
  view.citations = citations || [];
  view.focus = 0;
  render();
  if (mode() === 'pdf') await highlightPdf();
}

/**
 * Bring the focused quote into the window's view, not only into its box's: in the one-column layout
 * (below 900 px) the viewer lies under the conversation, and a quote button that only scrolled the box
 * left the highlight below the screen's edge (issue 39 item 4; the PDF view also hid the text box that
 * was scrolled into view). The box has already put the mark in its middle; with three panels the
 * window does not scroll and this does nothing.
 */
export function reveal() {
  const pdf = mode() === 'pdf';
  const box = pdf ? $('pdf-view') : $('viewer');
  const target = box.querySelector(pdf ? 'mark.pdf-cite.focused' : 'mark.cite.focused') || box;
  const r = target.getBoundingClientRect();
  if (r.top >= 0 && r.bottom <= window.innerHeight) return;
  const room = Math.max(0, window.innerHeight - r.height);
  window.scrollBy({ top: r.top - room / 2, behavior: 'instant' });
}

// ---------------------------------------------------------------- text or PDF

/** Show the view the reader chose (`chosen`: 'text' | 'pdf', remembered), or the current one. */
export function applyMode(chosen) {
  if (chosen) {
    choice = chosen;
    try {
      localStorage.setItem(MODE_STORAGE, chosen);
    } catch (_) { /* storage disabled: this page only */ }
  }
  const pdfDoc = Boolean(view.id) && view.kind === 'pdf';
  const current = mode();
  $('view-toggle').hidden = !pdfDoc;
  $('show-text').setAttribute('aria-pressed', String(current === 'text'));
  $('show-pdf').setAttribute('aria-pressed', String(current === 'pdf'));
  $('viewer').hidden = current !== 'text';
  $('pdf-view').hidden = current !== 'pdf';
  if (current !== 'pdf') $('pdf-note').replaceChildren();
  if (current === 'pdf') openPdf();
}

async function openPdf() {
  if (view.pdf) return;
  const docId = view.id;
  const pdf = new PdfView($('pdf-view'));
  view.pdf = pdf;
  $('pdf-view').replaceChildren(el('p', 'placeholder', 'Loading the PDF…'));
  try {
    await pdf.open(docId);
    if (view.pdf !== pdf) return;
    const first = view.pages.length ? view.pages[0].page : 1; // a part (pages=5-9) starts at its own page
    if (view.citations.length) await highlightPdf();
    else if (first > 1) await pdf.highlight([{ page: first, text: '', near: 0, cite: -1 }], -1);
  } catch (err) {
    if (view.pdf !== pdf) return;
    view.pdf = null;
    const why = err instanceof ApiError ? err : new ApiError(0, 'pdf_unreadable', String(err && err.message ? err.message : err));
    const box = el('div', 'placeholder');
    box.append(el('p', '', 'The PDF could not be shown here; the Text view still shows its text.'), errorNode(why));
    $('pdf-view').replaceChildren(box);
  }
}

/** Highlight the shown citations on the PDF's pages, scrolled to citation `view.focus`. */
async function highlightPdf() {
  const pdf = view.pdf;
  if (!pdf || !pdf.doc) return;
  const spans = view.citations.flatMap((c, i) => perPage(c, view.text, view.pages).map((s) => ({ ...s, cite: i })));
  const results = await pdf.highlight(spans, view.focus);
  if (view.pdf !== pdf) return;
  const missing = new Set(results.filter((r) => !r.found).map((r) => r.cite));
  $('pdf-note').replaceChildren(...(missing.size ? [el('p', 'muted',
    `${plural(missing.size, 'quote')} could not be found on ${missing.size === 1 ? 'its page' : 'their pages'} `
    + 'as the PDF’s own text layer reads it; the Text view highlights it.')] : []));
}

// ---------------------------------------------------------------- the text

/**
 * Render the text with a marker at each page start and a <mark> on each cited span.
 * Citations come from the server sorted and non-overlapping; everything is set as text nodes.
 */
function render() {
  const cuts = new Map(); // offset -> what starts there
  for (const p of view.pages) cuts.set(p.start, { ...(cuts.get(p.start) || {}), page: p.page, label: p.label });
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
      // A printed label that differs from the PDF's number is named first, as citations name it.
      const marker = el('span', 'page-marker', cut.label ? `Page ${cut.label} (PDF page ${cut.page})` : `Page ${cut.page}`);
      marker.dataset.page = cut.page;
      if (open) open.mark.append(marker); else nodes.push(marker);
    }
    if (cut.cite !== undefined) {
      const c = view.citations[cut.cite];
      const mark = el('mark', 'cite');
      mark.dataset.cite = cut.cite;
      mark.dataset.page = c.page;
      // A spreadsheet's cell ("Sheet2!B7") or a slide ("slide 3 notes") where the server names one.
      mark.title = c.where || (c.page === c.page_end ? `page ${c.page}` : `pages ${c.page}–${c.page_end}`);
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
    const pages = c.where || (c.page === c.page_end ? `p. ${c.page}` : `pp. ${c.page}–${c.page_end}`);
    const link = el('button', 'cite-link');
    link.type = 'button';
    link.title = `Show this quote (characters ${c.start}–${c.end}, ${c.source})`;
    link.append(el('span', 'cite-page', pages), el('span', 'cite-text', shortQuote(c.text)));
    link.addEventListener('click', () => focusCitation(i));
    item.append(link);
    return item;
  }));
  if (view.citations.length) focusCitation(0, false);
}

/** The quote for the list, between quote marks (not doubled when it has its own), at most 120 characters. */
function shortQuote(text) {
  const flat = text.replace(/\s+/g, ' ').trim();
  return inQuotes(flat.length > 120 ? `${flat.slice(0, 117)}…` : flat);
}

/** Mark citation i as focused and scroll the viewer (only the viewer, not the page) to it. */
function focusCitation(i, pdfToo = true) {
  view.focus = i;
  const box = $('viewer');
  box.querySelectorAll('mark.cite').forEach((m) => m.classList.toggle('focused', m.dataset.cite === String(i)));
  $('citations').querySelectorAll('li').forEach((li) => li.classList.toggle('focused', li.dataset.cite === String(i)));
  const mark = box.querySelector(`mark.cite[data-cite="${i}"]`);
  if (mark && !box.hidden) scrollWithin(box, mark);
  if (pdfToo && mode() === 'pdf') highlightPdf();
}

export function init() {
  $('show-text').addEventListener('click', () => applyMode('text'));
  $('show-pdf').addEventListener('click', () => applyMode('pdf'));
}
