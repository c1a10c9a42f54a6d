// A document being prepared: its progress over time, the time left at the recent rate, and how
// often to look again. The server reports the fraction prefilled (GET /v1/documents/{id} `progress`,
// 0..1) and its own measured reading (`reading`: waiting its turn, tokens/s, seconds left, a busy
// machine; readingWords); a server without `reading` leaves the rate to be measured here.

const WINDOW_MS = 30_000; // the rate is measured over the last 30 s (prefill speed changes little)
const MIN_SPAN_MS = 2_000; // no ETA before two looks at least 2 s apart that saw progress
const FIRST_MS = 1_000;
const MAX_MS = 5_000;

export class Progress {
  constructor(now = () => performance.now()) {
    this.now = now;
    this.samples = []; // [{t, p}]
    this.failures = 0;
  }

  /** Record the fraction `p` seen now. */
  add(p) {
    const t = this.now();
    this.failures = 0;
    this.samples.push({ t, p: Number(p) || 0 });
    while (this.samples.length > 2 && t - this.samples[1].t > WINDOW_MS) this.samples.shift();
  }

  /** Seconds left at the rate of the last WINDOW_MS, or null while that rate is not known. */
  eta() {
    if (this.samples.length < 2) return null;
    const first = this.samples[0];
    const last = this.samples[this.samples.length - 1];
    const span = last.t - first.t;
    const done = last.p - first.p;
    if (span < MIN_SPAN_MS || done <= 0) return null;
    return ((1 - last.p) * span) / done / 1000;
  }

  /** When to look again: a second while the rate is unknown or the end is near, then a twentieth
   * of the time left, at most MAX_MS (so a long prefill is looked at every 5 s, not twice a second). */
  nextPollMs() {
    const eta = this.eta();
    if (eta === null) return this.samples.length < 3 ? FIRST_MS : 2 * FIRST_MS;
    return Math.min(Math.max((eta * 1000) / 20, FIRST_MS), MAX_MS);
  }

  /** After a failed look: 2 s, 4 s, … up to 30 s. */
  backoffMs() {
    this.failures += 1;
    return Math.min(2_000 * 2 ** (this.failures - 1), 30_000);
  }
}

/** "about 40 s left", "about 3 min left" (rounded: a countdown that jumps would promise too much). */
export function remaining(seconds) {
  if (seconds < 10) return 'a few seconds left';
  if (seconds < 60) return `about ${Math.ceil(seconds / 5) * 5} s left`;
  if (seconds < 90) return 'about 1 min left';
  if (seconds < 3600) return `about ${Math.round(seconds / 60)} min left`;
  const h = Math.floor(seconds / 3600);
  return `about ${h} h ${Math.round((seconds - h * 3600) / 60)} min left`;
}

/** A document's `reading` (server/engine/reading.py) in words: "waiting its turn (2 questions are being answered first)",
 * with its place in the reading queue and the expected wait ("waiting its turn (2 documents are read first) · about
 * 3 min left", "paused at 40% (a shorter document is read first) · …"), "preparing 40% · 38 tok/s · about 2 min
 * left", "… · machine busy (load average 8.2 on 2 cores)"; never "0.0 tok/s": before the first chunk is read the
 * rate is "measuring the rate". */
export function readingWords(r, pct) {
  let words;
  if (r.waiting) {
    const first = [];
    const docs = r.documents_ahead || 0;
    if (r.paused) {
      words = `paused at ${pct}% (${docs === 1 ? 'a shorter document is' : `${docs} shorter documents are`} read first)`;
    } else {
      if (r.ahead) first.push(r.ahead === 1 ? '1 question is being answered' : `${r.ahead} questions are being answered`);
      if (docs) first.push(docs === 1 ? 'another document is read' : `${docs} documents are read`);
      words = `waiting its turn (${first.length ? `${first.join(' and ')} first` : 'next'})`;
    }
    if (r.seconds_left !== null && r.seconds_left !== undefined) words += ` · ${remaining(r.seconds_left)}`;
  } else if (r.tokens_per_s && r.seconds_left !== null) {
    words = `preparing ${pct}% · ${r.tokens_per_s.toFixed(r.tokens_per_s < 10 ? 1 : 0)} tok/s · ${remaining(r.seconds_left)}`;
  } else {
    words = `preparing ${pct}% · measuring the rate`;
  }
  return r.busy ? `${words} · machine busy (${r.busy})` : words;
}
