// Small DOM helpers. Text always goes in through textContent, never as HTML.

export const $ = (id) => document.getElementById(id);

/** Create an element with an optional class and text content. */
export function el(tag, className = '', text = '') {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text) node.textContent = text;
  return node;
}

export const percent = (p) => Math.round(Math.min(Math.max(Number(p) || 0, 0), 1) * 100);

export function progressBar(pct, label) {
  const bar = el('progress');
  bar.max = 100;
  bar.value = pct;
  bar.title = `${pct}%`;
  if (label) bar.setAttribute('aria-label', label);
  return bar;
}

/** Scroll `container` (not the page) so that `child` sits in its middle. */
export function scrollWithin(container, child) {
  const box = container.getBoundingClientRect();
  const at = child.getBoundingClientRect();
  container.scrollTop += at.top - box.top - (container.clientHeight - at.height) / 2;
}
