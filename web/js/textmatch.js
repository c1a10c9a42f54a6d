// Finding a quoted span of our extracted text among the strings of PDF.js's text layer.
//
// The two texts differ in ways that do not change what is written: whitespace and line breaks,
// hyphenation at line ends ("exam-" + "ple" against "example"), ligatures ("ﬁ" against "fi"), the
// order of the text items, quote marks and dashes. Both sides are reduced to a key of letters and
// digits only (NFKC, lower case), the quote's key is looked up in the page's key, and each key
// character maps back to the text item and offset it came from. Pure functions, no DOM.

const WORD_CHAR = /[\p{L}\p{N}]/u;
const ANCHOR = 24; // key characters at each end of a quote that the fallback matches on its own

/** The key of `text`: its letters and digits, NFKC and lower-cased. */
export function keyOf(text) {
  let key = '';
  for (const ch of text) {
    for (const c of ch.normalize('NFKC').toLowerCase()) if (WORD_CHAR.test(c)) key += c;
  }
  return key;
}

/**
 * The key of the items (strings) together, with `item[k]` and `offset[k]`: the item and the UTF-16
 * offset in it that key character k came from.
 */
export function pageKey(items) {
  let key = '';
  const item = [];
  const offset = [];
  items.forEach((str, i) => {
    let j = 0;
    for (const ch of str) {
      for (const c of ch.normalize('NFKC').toLowerCase()) {
        if (WORD_CHAR.test(c)) {
          key += c;
          item.push(i);
          offset.push(j);
        }
      }
      j += ch.length;
    }
  });
  return { key, item, offset };
}

function occurrences(haystack, needle) {
  const found = [];
  for (let at = haystack.indexOf(needle); at !== -1; at = haystack.indexOf(needle, at + 1)) found.push(at);
  return found;
}

/**
 * Where `quote` is in `items`: [{item, start, end}] (UTF-16 offsets into items[item], end exclusive),
 * one range per item it covers, in order; null when it is not there. `near` (0..1): where on the page
 * the quote is expected (its offset in our page text over the page's length), to choose between
 * repeats. `exact` in the result says whether the whole key matched; otherwise only its first and
 * last ANCHOR characters did, in order and about as far apart as the quote is long (text items that
 * PDF.js and our extraction put in another order).
 */
export function locate(items, quote, near = 0) {
  const want = keyOf(quote);
  if (!want) return null;
  const page = pageKey(items);
  const closest = (starts) => starts.reduce((best, at) => (
    Math.abs(at / Math.max(page.key.length, 1) - near) < Math.abs(best / Math.max(page.key.length, 1) - near) ? at : best));
  let start = -1;
  let end = -1;
  let exact = true;
  const hits = occurrences(page.key, want);
  if (hits.length) {
    start = closest(hits);
    end = start + want.length;
  } else if (want.length > 2 * ANCHOR) {
    exact = false;
    const head = want.slice(0, ANCHOR);
    const tail = want.slice(-ANCHOR);
    const spans = [];
    for (const a of occurrences(page.key, head)) {
      const b = page.key.indexOf(tail, a + ANCHOR);
      if (b !== -1 && b + ANCHOR - a <= 1.5 * want.length) spans.push([a, b + ANCHOR]);
    }
    if (spans.length) [start, end] = spans.reduce((best, s) => (closest([best[0], s[0]]) === s[0] ? s : best));
  }
  if (start === -1) return null;
  const ranges = [];
  for (let k = start; k < end; k++) {
    const i = page.item[k];
    const last = ranges[ranges.length - 1];
    const to = page.offset[k] + String.fromCodePoint(items[i].codePointAt(page.offset[k])).length;
    if (last && last.item === i) last.end = to;
    else ranges.push({ item: i, start: page.offset[k], end: to });
  }
  return Object.assign(ranges, { exact });
}

/**
 * A citation ({start, end, page, page_end}) cut at page boundaries: [{page, text, near}], one per page
 * it covers. `text`: our document text; `pages`: [{page, start, end}] from GET .../text.
 */
export function perPage(citation, text, pages) {
  const out = [];
  for (const p of pages) {
    const a = Math.max(citation.start, p.start);
    const b = Math.min(citation.end, p.end);
    if (a >= b) continue;
    const length = Math.max(p.end - p.start, 1);
    out.push({ page: p.page, text: text.slice(a, b), near: (a - p.start) / length });
  }
  return out;
}
