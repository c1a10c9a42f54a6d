// Taking a conversation away: the questions, the answers (Markdown, as the model wrote them) and each
// answer's citations with the document's name and page, as a Markdown file made and downloaded in
// the browser (conversations live in the page; the server keeps none). Nothing from a document reaches
// the file as HTML: its words, names and a citation's `where` are escaped, and an answer's raw tags.

import { inQuotes } from './messages.js';

/**
 * `text` (a document's words, its name, a question: never Markdown of ours) with `&`, `<` and `>` as
 * entities, so that a Markdown viewer shows them and never renders them as HTML (a document that holds
 * `<img src=x onerror=...>`, a sheet named `<b>Q1</b>`).
 */
export const escapeHtml = (text) => String(text).replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;');

/**
 * An answer (Markdown, as the model wrote it) with every `<` that would open an HTML tag, comment or
 * declaration written as `&lt;`: its Markdown stays, raw HTML copied from a document does not render.
 */
export const withoutHtml = (markdown) => String(markdown).replace(/<(?=[A-Za-z/!?])/g, '&lt;');

/** "p. 3", "pp. 3–4", or the cell or slide a spreadsheet's or deck's citation names ("Sheet2!B7"). */
const pages = (c) => escapeHtml(c.where || (c.page === c.page_end ? `p. ${c.page}` : `pp. ${c.page}–${c.page_end}`));

/** `text` as a Markdown block quote (every line quoted, blank lines kept inside the quote), HTML escaped. */
const quoted = (text) => escapeHtml(text.trim()).split('\n').map((line) => (line.trim() ? `> ${line}` : '>')).join('\n');

/** Where a segmented document's answer came from ("part 2 of 3, characters 0–31,204"), or ''. */
function answeredFrom(stats) {
  const segments = stats && stats.segments;
  if (!segments || !segments.length) return '';
  return segments.map((s) => s.label || `pages ${s.pages[0]}–${s.pages[1]}`).join(' and ');
}

/**
 * The conversation about `doc` ({name, kind, pages}) as Markdown. `turns`: [{question, answer,
 * citations, stats, status}] (chat.js); `meta`: {model, exported (a Date)}.
 */
export function toMarkdown(doc, turns, meta = {}) {
  const when = (meta.exported || new Date()).toISOString().replace('T', ' ').slice(0, 16);
  const lines = [`# Conversation about ${escapeHtml(doc.name)}`, ''];
  lines.push(`Exported from docqa on ${when} UTC${meta.model ? ` · model: ${meta.model}` : ''}.`, '');
  turns.forEach((turn, n) => {
    lines.push(`## Question ${n + 1}`, '', quoted(turn.question), '', '**Answer**', '');
    const answer = withoutHtml(turn.answer.trim());
    if (answer) lines.push(answer, '');
    const note = { stopped: '_Stopped before the answer was complete._', error: '_Not answered: an error ended it._' }[turn.status]
      || (!answer ? '_The model gave no answer._' : '');
    if (note) lines.push(note, '');
    const where = escapeHtml(answeredFrom(turn.stats));
    if (where) lines.push(`_Answered from ${where}${doc.group ? '' : ' of the document'}._`, '');
    if (turn.citations.length) {
      lines.push('**Citations**', '');
      turn.citations.forEach((c, i) => {
        const name = escapeHtml(c.document_name || doc.name);
        lines.push(`${i + 1}. ${name}, ${pages(c)} (characters ${c.start}–${c.end}): ${escapeHtml(inQuotes(c.text))}`);
      });
      lines.push('');
    }
  });
  return `${lines.join('\n').trimEnd()}\n`;
}

/** A file name for the export of `name`: its stem, safe on every system, and "-conversation.md". */
export function fileName(name) {
  const stem = name.replace(/\.[A-Za-z0-9]{1,8}(?= \(|$)/, '').replace(/[^\p{L}\p{N}._ ()-]+/gu, '_').trim();
  return `${stem.slice(0, 80) || 'document'}-conversation.md`;
}

/** Download `text` as `name` (a Blob URL on a temporary link). */
export function download(text, name) {
  const url = URL.createObjectURL(new Blob([text], { type: 'text/markdown;charset=utf-8' }));
  const link = document.createElement('a');
  link.href = url;
  link.download = name;
  link.hidden = true;
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 0);
}
