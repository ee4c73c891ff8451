//! Line normalisation (CRLF/CR to LF), comments, separators, continuation and logical offsets.

/** Separator that switches to the description part (§10). */
export const SEPARATOR_RE = /^[ \t]*-{3,}[ \t]*$/;

/** Replace CRLF and lone CR by LF (upstream parse() would throw on CR). */
export function normalizeNewlines(text) {
  // split() scans with a native character search; indexOf() compares at every position
  return text.split('\r').length === 1 ? text : text.replace(/\r\n?/g, '\n');
}

/**
 * Column of the first `%%` of every physical line (§1), -1 for a line without one, or null
 * when the text has no comment at all. `lines` must be `text.split('\n')`. One native split
 * finds every `%%`; the lines are walked once to place them.
 */
export function commentColumns(text, lines) {
  const parts = text.split('%%');
  if (parts.length === 1) return null;
  const cols = new Int32Array(lines.length).fill(-1);
  let at = parts[0].length; // offset of the next `%%`
  let k = 1;
  let start = 0;
  for (let i = 0; i < lines.length && k < parts.length; i++) {
    const end = start + lines[i].length;
    if (at < end) {
      cols[i] = at - start;
      // skip the other `%%` of this line
      while (k < parts.length && at < end) { at += 2 + parts[k].length; k++; }
    }
    start = end + 1;
  }
  return cols;
}

/** Cut everything from the first `%%` (§1). */
export function stripComment(line) {
  const i = line.indexOf('%%');
  return i < 0 ? line : line.slice(0, i);
}

/** True when the line holds only blanks (after comment removal). */
export function isBlank(s) {
  return BLANK_RE.test(s);
}
const BLANK_RE = /^\s*$/;

/** SEPARATOR_RE.test(s) without rescanning long indentation. */
export function isSeparator(s) {
  const lead = leadingBlanks(s);
  if (s.charCodeAt(lead) !== 45) return false;
  SEPARATOR_BODY_RE.lastIndex = lead;
  return SEPARATOR_BODY_RE.test(s);
}
const SEPARATOR_BODY_RE = /-{3,}[ \t]*$/y;

/**
 * Continuation test `(^|[ \t])\\[ \t]*$` written without a regex so that huge
 * lines stay linear. Returns the index of the backslash, or -1.
 */
export function continuationCut(s) {
  let end = s.length;
  while (end > 0) {
    const c = s.charCodeAt(end - 1);
    if (c === 32 || c === 9) end--; else break;
  }
  if (end === 0 || s.charCodeAt(end - 1) !== 92) return -1;
  const bs = end - 1;
  if (bs === 0) return 0;
  const p = s.charCodeAt(bs - 1);
  return (p === 32 || p === 9) ? bs : -1;
}

export function leadingBlanks(s) {
  // short indentation by hand; long indentation with a native scan (much faster than a
  // character loop in an interpreter)
  const n = s.length;
  let i = 0;
  for (; i < 24; i++) {
    if (i >= n) return n;
    const c = s.charCodeAt(i);
    if (c !== 32 && c !== 9) return i;
  }
  BLANKS_RE.lastIndex = i;
  BLANKS_RE.test(s); // always matches (possibly empty)
  return BLANKS_RE.lastIndex;
}
const BLANKS_RE = /[ \t]*/y;

/** Map an offset in a logical line back to {pl, col} in the physical lines. */
export function mapLogicalOffset(pieces, pos) {
  for (let k = 0; k < pieces.length; k++) {
    const p = pieces[k];
    if (pos >= p.log && pos < p.log + p.len) return { pl: p.pl, col: p.raw + (pos - p.log) };
  }
  // end position (or inside a synthetic blank): end of the last piece that starts before pos
  let best = pieces[0];
  for (let k = 0; k < pieces.length; k++) if (pieces[k].log <= pos) best = pieces[k];
  return { pl: best.pl, col: best.raw + Math.min(best.len, Math.max(0, pos - best.log)) };
}
