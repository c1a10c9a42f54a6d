// The PDF itself, drawn by PDF.js (web/vendor/pdfjs, loaded on first use), page under page in a
// scrolling box, each page with PDF.js's text layer over its canvas. Citations are highlighted on
// that text layer: the quoted span is looked up on its page (textmatch.js) and wrapped in <mark>.
//
// Pages are drawn when they come into view (IntersectionObserver) and at most KEEP of them are kept
// drawn, so a long PDF costs the memory of a few canvases. The bytes come from
// GET /v1/documents/{id}/file with the API key (api.js), never from a URL PDF.js would fetch itself.

import { fetchBytes } from './api.js';
import { el } from './dom.js';
import { locate } from './textmatch.js';

const VENDOR = '/static/vendor/pdfjs/';
const KEEP = 8; // drawn pages kept at once
let library = null; // the pdfjs-dist module, once imported

async function pdfjs() {
  if (!library) {
    library = import(`${VENDOR}pdf.min.mjs`).then((lib) => {
      lib.GlobalWorkerOptions.workerSrc = `${VENDOR}pdf.worker.min.mjs`;
      return lib;
    });
  }
  return library;
}

/** One PDF shown in `box` (an element that scrolls). */
export class PdfView {
  constructor(box) {
    this.box = box;
    this.doc = null; // PDFDocumentProxy
    this.pages = []; // [{number, node, canvas, layer, drawn: Promise|null, items, divs, ratio}]
    this.marks = new Map(); // page number -> [{text, near, cite}] to highlight there
    this.drawnOrder = []; // page numbers, least recently drawn first
    this.width = 0;
    this.observer = null;
    this.closed = false;
    this.generation = 0; // bumps on every relayout
  }

  /** Load document `docId` and lay out one placeholder a page; resolves when page 1 is drawn. */
  async open(docId) {
    const lib = await pdfjs();
    const data = await fetchBytes(`/v1/documents/${encodeURIComponent(docId)}/file`);
    if (this.closed) return;
    this.doc = await lib.getDocument({
      data,
      isEvalSupported: false, // fonts are never compiled to JavaScript from the file's data
      enableXfa: false,
      standardFontDataUrl: `${VENDOR}standard_fonts/`,
      wasmUrl: `${VENDOR}wasm/`,
    }).promise;
    if (this.closed) {
      this.doc.destroy();
      return;
    }
    const first = await this.doc.getPage(1);
    const ratio = first.getViewport({ scale: 1 }).height / first.getViewport({ scale: 1 }).width;
    this.width = this.fitWidth();
    this.observer = new IntersectionObserver((entries) => {
      for (const e of entries) if (e.isIntersecting) this.draw(Number(e.target.dataset.page));
    }, { root: this.box, rootMargin: '300px 0px' });
    const nodes = [];
    for (let n = 1; n <= this.doc.numPages; n++) {
      const node = el('div', 'pdf-page');
      node.dataset.page = n;
      node.setAttribute('aria-label', `Page ${n} of ${this.doc.numPages}`);
      node.style.width = `${this.width}px`;
      node.style.height = `${Math.round(this.width * ratio)}px`;
      node.append(el('span', 'pdf-page-number', `Page ${n}`));
      this.pages.push({ number: n, node, canvas: null, layer: null, drawn: null, items: [], divs: [] });
      nodes.push(node);
    }
    this.box.replaceChildren(...nodes);
    nodes.forEach((node) => this.observer.observe(node));
    this.ratio = ratio;
    // A window resized or a phone turned: fit the pages to the new width (drawn again as they show).
    this.resizer = new ResizeObserver(() => {
      const width = this.fitWidth();
      if (this.box.clientWidth && Math.abs(width - this.width) > 0.08 * this.width) this.relayout(width);
    });
    this.resizer.observe(this.box);
    await this.draw(1);
  }

  /** Lay the pages out `width` pixels wide; drawn pages are dropped and drawn again when in view. */
  relayout(width) {
    const shown = this.currentPage();
    this.width = width;
    for (const page of this.pages) {
      if (page.canvas) page.canvas.width = 0;
      page.node.replaceChildren(el('span', 'pdf-page-number', `Page ${page.number}`));
      page.node.classList.remove('drawn');
      page.node.style.width = `${width}px`;
      page.node.style.height = `${Math.round(width * (page.ratio || this.ratio))}px`;
      Object.assign(page, { canvas: null, layer: null, drawn: null, items: [], divs: [] });
    }
    this.drawnOrder = [];
    this.generation += 1; // a page being drawn at the old width is dropped when it is done
    this.draw(shown).then(() => { this.box.scrollTop = this.pages[shown - 1].node.offsetTop - 8; });
  }

  fitWidth() {
    const style = getComputedStyle(this.box);
    const inner = this.box.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    return Math.max(Math.floor(inner), 120);
  }

  /** Draw page `n` (canvas and text layer) if it is not drawn; its highlights are applied. */
  draw(n) {
    const page = this.pages[n - 1];
    if (!page || this.closed) return Promise.resolve();
    if (!page.drawn) page.drawn = this.#render(page).catch((err) => { page.drawn = null; throw err; });
    this.drawnOrder = [...this.drawnOrder.filter((x) => x !== n), n];
    this.#forgetOld();
    return page.drawn;
  }

  async #render(page) {
    const generation = this.generation;
    const lib = await pdfjs();
    const pdfPage = await this.doc.getPage(page.number);
    const base = pdfPage.getViewport({ scale: 1 });
    const scale = this.width / base.width;
    const viewport = pdfPage.getViewport({ scale });
    const ratio = window.devicePixelRatio || 1;
    const canvas = el('canvas', 'pdf-canvas');
    canvas.width = Math.floor(viewport.width * ratio);
    canvas.height = Math.floor(viewport.height * ratio);
    const layer = el('div', 'textLayer');
    const { node } = page;
    await pdfPage.render({
      canvas,
      canvasContext: canvas.getContext('2d'),
      viewport,
      transform: ratio === 1 ? null : [ratio, 0, 0, ratio, 0, 0],
    }).promise;
    const text = new lib.TextLayer({ textContentSource: pdfPage.streamTextContent(), container: layer, viewport });
    await text.render();
    if (this.closed || generation !== this.generation) {
      canvas.width = 0;
      return;
    }
    page.ratio = base.height / base.width;
    node.style.height = `${Math.round(viewport.height)}px`;
    node.style.setProperty('--total-scale-factor', String(scale));
    node.style.setProperty('--scale-round-x', '1px');
    node.style.setProperty('--scale-round-y', '1px');
    Object.assign(page, { canvas, layer, items: [...text.textContentItemsStr], divs: [...text.textDivs] });
    node.replaceChildren(canvas, layer, el('span', 'pdf-page-number', `Page ${page.number}`));
    node.classList.add('drawn');
    this.#highlight(page);
  }

  #forgetOld() {
    while (this.drawnOrder.length > KEEP) {
      const n = this.drawnOrder.shift();
      const page = this.pages[n - 1];
      if (!page.layer) continue;
      page.canvas.width = 0; // frees the bitmap now, not at the next garbage collection
      page.node.replaceChildren(el('span', 'pdf-page-number', `Page ${n}`));
      page.node.classList.remove('drawn');
      Object.assign(page, { canvas: null, layer: null, drawn: null, items: [], divs: [] });
    }
  }

  /**
   * Highlight `spans` ([{page, text, near, cite}]: parts of citations, cut at page ends) and scroll
   * to the first part of citation `focus`. Resolves to [{page, cite, found, exact}], one per span.
   */
  async highlight(spans, focus = 0) {
    this.marks = new Map();
    for (const s of spans) this.marks.set(s.page, [...(this.marks.get(s.page) || []), s]);
    this.pages.forEach((page) => page.layer && this.#highlight(page));
    const target = spans.find((s) => s.cite === focus) || spans[0];
    if (target) {
      await this.draw(target.page);
      this.#scrollTo(target);
    }
    const results = [];
    for (const s of spans) {
      await this.draw(s.page);
      const page = this.pages[s.page - 1];
      results.push({ page: s.page, cite: s.cite, ...(page ? page.found.get(s) : { found: false }) });
    }
    return results;
  }

  #highlight(page) {
    page.divs.forEach((div, i) => { if (div.childElementCount) div.textContent = page.items[i]; });
    page.found = new Map();
    const ranges = new Map(); // div index -> [{start, end, cite}]
    for (const s of this.marks.get(page.number) || []) {
      const where = locate(page.items, s.text, s.near);
      page.found.set(s, { found: Boolean(where), exact: Boolean(where && where.exact) });
      for (const r of where || []) ranges.set(r.item, [...(ranges.get(r.item) || []), { ...r, cite: s.cite }]);
    }
    for (const [i, list] of ranges) {
      const str = page.items[i];
      const parts = [];
      let at = 0;
      for (const r of list.sort((a, b) => a.start - b.start)) {
        if (r.start < at) continue; // overlapping quotes: the first one keeps the characters
        if (r.start > at) parts.push(document.createTextNode(str.slice(at, r.start)));
        const mark = el('mark', 'pdf-cite', str.slice(r.start, r.end));
        mark.dataset.cite = r.cite;
        parts.push(mark);
        at = r.end;
      }
      if (at < str.length) parts.push(document.createTextNode(str.slice(at)));
      page.divs[i].replaceChildren(...parts);
    }
  }

  /** Focus citation `cite`'s marks and scroll the box (only the box) so that the first is in view. */
  #scrollTo(span) {
    this.box.querySelectorAll('mark.pdf-cite').forEach((m) => m.classList.toggle('focused', m.dataset.cite === String(span.cite)));
    const page = this.pages[span.page - 1];
    const mark = page.node.querySelector(`mark.pdf-cite[data-cite="${span.cite}"]`);
    const box = this.box.getBoundingClientRect();
    const target = (mark || page.node).getBoundingClientRect();
    const offset = mark ? (this.box.clientHeight - target.height) / 2 : 8;
    this.box.scrollTop += target.top - box.top - offset;
  }

  /** The page number most of the box shows. */
  currentPage() {
    const box = this.box.getBoundingClientRect();
    const middle = box.top + box.height / 2;
    const page = this.pages.find((p) => {
      const r = p.node.getBoundingClientRect();
      return r.top <= middle && r.bottom >= middle;
    });
    return page ? page.number : 1;
  }

  close() {
    this.closed = true;
    if (this.observer) this.observer.disconnect();
    if (this.resizer) this.resizer.disconnect();
    for (const page of this.pages) if (page.canvas) page.canvas.width = 0;
    if (this.doc) this.doc.destroy();
    this.pages = [];
  }
}
