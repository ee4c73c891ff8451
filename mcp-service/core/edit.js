//! Text-to-text edits (status, size, add, move, remove) and line ops (applyOps, computeOps).

import {
  parseDocument, extractLine, indentWidth, STATUS, STATUS_BY_KEY, SIZES, URL_RE, SIZE_RE,
} from './parser.js';
import { mapLogicalOffset, stripComment, continuationCut, SEPARATOR_RE } from './text.js';

/** An error with a contract code (see CONTRACT.md). */
export class CoreError extends Error {
  constructor(code, message) {
    super(message);
    this.code = code;
  }
}

// ------------------------------------------------------------------ raw lines

/**
 * Split into physical lines keeping each terminator (`\r\n`, `\r` or `\n`),
 * exactly as the parser numbers them. The last entry always has eol ''.
 */
export function splitRaw(text) {
  const out = [];
  let start = 0;
  let dflt = null;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 10 || c === 13) {
      let eol = c === 13 && text.charCodeAt(i + 1) === 10 ? '\r\n' : text[i];
      out.push({ c: text.slice(start, i), e: eol });
      if (dflt === null) dflt = eol;
      i += eol.length - 1;
      start = i + 1;
    }
  }
  out.push({ c: text.slice(start), e: '' });
  return { lines: out, eol: dflt || '\n' };
}

function joinRaw(lines, eol) {
  const parts = [];
  for (let i = 0; i < lines.length; i++) {
    const l = lines[i];
    const last = i === lines.length - 1;
    parts.push(l.c, last ? '' : (l.e === '' ? eol : l.e));
  }
  return parts.join('');
}

// ------------------------------------------------------------------ params

function requireText(params, name) {
  const v = params[name];
  if (typeof v !== 'string') throw new CoreError('invalidParams', `"${name}" must be a string`);
  return v;
}

/** Resolve a node reference: id string (with or without `#`) or 1-based line number. */
export function resolveNode(doc, ref, name) {
  if (typeof ref === 'string') {
    const id = ref.startsWith('#') ? ref.slice(1) : ref;
    if (id === '') throw new CoreError('invalidParams', `"${name}" must not be empty`);
    const n = doc.firstById.get(id);
    if (!n) throw new CoreError('unknownNode', `no node with id #${id}`);
    return n;
  }
  if (typeof ref === 'number' && Number.isInteger(ref)) {
    for (const n of doc.nodes) if (n.line === ref) return n;
    throw new CoreError('unknownNode', `no node on line ${ref}`);
  }
  throw new CoreError('invalidParams', `"${name}" must be an id string or a line number`);
}

/** Index one past the last node of the subtree (doc.nodes is pre-order). */
function subtreeEndIdx(doc, node) {
  let i = node.idx + 1;
  while (i < doc.nodes.length && doc.nodes[i].depth > node.depth) i++;
  return i;
}

/** Last 1-based line owned by the node itself (its line, continuation and short description lines). */
function ownEnd(node) {
  let e = node.line;
  for (const l of node.treeLines) if (l > e) e = l;
  return e;
}

/** Last 1-based tree-part line of the whole subtree. */
function subtreeEndLine(doc, node) {
  const end = subtreeEndIdx(doc, node);
  let e = 0;
  for (let i = node.idx; i < end; i++) e = Math.max(e, ownEnd(doc.nodes[i]));
  return e;
}

function inSubtree(doc, root, n) {
  return n.idx >= root.idx && n.idx < subtreeEndIdx(doc, root);
}

function result(before, after) {
  return { text: after, ops: computeOps({ before, after }).ops };
}

// ------------------------------------------------------------------ status

const BOX_RE = /^([ \t]*(?:[-|+]|=(?=[ \t]))?\s*(?:[><](?=[ \t])\s*)?)(?:\[([^\]])\]([ \t]*))?/;

/** Normalise a status parameter to a box char, or null (remove the box). */
export function normalizeStatus(v) {
  if (v === null) return null;
  if (typeof v !== 'string') throw new CoreError('invalidStatus', 'status must be a box char, a status key or null');
  if (v.length === 1) {
    const c = v.toLowerCase();
    if (STATUS[c]) return c;
  }
  const k = v.toLowerCase();
  if (Object.prototype.hasOwnProperty.call(STATUS_BY_KEY, k)) return STATUS_BY_KEY[k];
  throw new CoreError('invalidStatus', `unknown status ${JSON.stringify(v)}`);
}

function samePhysical(node, from, to) {
  const a = mapLogicalOffset(node.pieces, from);
  const b = mapLogicalOffset(node.pieces, Math.max(from, to - 1));
  if (a.pl !== b.pl) {
    throw new CoreError('unsupportedLine', `line ${node.line}: the token is split by a continuation; edit the text directly`);
  }
  return a;
}

function statusEdit(text, node, code) {
  const { lines, eol } = splitRaw(text);
  const m = BOX_RE.exec(node.logical);
  const pre = m[1].length;
  if (m[2] !== undefined) {
    const at = samePhysical(node, pre, pre + 3);
    const line = lines[at.pl];
    const c = line.c;
    if (code === null) {
      let end = at.col + 3;
      while (end < c.length && (c[end] === ' ' || c[end] === '\t')) end++;
      let repl = '';
      if (at.col > 0 && !/\s/.test(c[at.col - 1]) && end < c.length) repl = ' ';
      line.c = c.slice(0, at.col) + repl + c.slice(end);
    } else {
      if (c[at.col + 1] === code) return text;
      line.c = c.slice(0, at.col + 1) + code + c.slice(at.col + 2);
    }
  } else {
    if (code === null) return text;
    const at = mapLogicalOffset(node.pieces, pre);
    const line = lines[at.pl];
    const c = line.c;
    const lead = at.col > 0 && !/\s/.test(c[at.col - 1]) ? ' ' : '';
    line.c = c.slice(0, at.col) + lead + '[' + code + '] ' + c.slice(at.col);
  }
  return joinRaw(lines, eol);
}

export function setStatus(params) {
  const text = requireText(params, 'text');
  if (!('status' in params)) throw new CoreError('invalidParams', '"status" is required (null removes the box)');
  const code = normalizeStatus(params.status);
  const doc = parseDocument(text);
  const node = resolveNode(doc, params.id, 'id');
  return result(text, statusEdit(text, node, code));
}

// ------------------------------------------------------------------ size

const TRAIL_TOKEN_RE = /^(?:https?:\/\/\S+|@[\p{L}\p{N}._-]+|&[\p{L}\p{N}._-]+|:#[\p{L}\p{N}._-]+(?:,#[\p{L}\p{N}._-]+)*|!!!)$/iu;

export function setSize(params) {
  const text = requireText(params, 'text');
  if (!('size' in params)) throw new CoreError('invalidParams', '"size" is required (null removes it)');
  let size = params.size;
  if (size !== null) {
    if (typeof size !== 'string' || !SIZES.includes(size.toUpperCase())) {
      throw new CoreError('invalidSize', `size must be one of ${SIZES.join(', ')} or null`);
    }
    size = size.toUpperCase();
  }
  const doc = parseDocument(text);
  const node = resolveNode(doc, params.id, 'id');
  const { lines, eol } = splitRaw(text);
  const logical = node.logical;
  const restStart = LINE_PREFIX_LEN(logical);
  const rest = logical.slice(restStart);
  const um = URL_RE.exec(rest);
  const u0 = um ? um.index : -1;
  const u1 = um ? um.index + um[0].length : -1;
  let last = null;
  SIZE_RE.lastIndex = 0;
  for (let sm; (sm = SIZE_RE.exec(rest)) !== null;) {
    const s = sm.index + sm[1].length;
    const e = sm.index + sm[0].length;
    if (um && s < u1 && e > u0) continue;
    last = { s, e };
  }
  if (last) {
    const from = restStart + last.s;
    const to = restStart + last.e;
    const at = samePhysical(node, from, to);
    const line = lines[at.pl];
    const c = line.c;
    const endCol = at.col + (to - from);
    if (size !== null) {
      const tok = '(' + size + ')';
      if (c.slice(at.col, endCol) === tok) return { text, ops: [] };
      line.c = c.slice(0, at.col) + tok + c.slice(endCol);
    } else {
      let a = at.col;
      let b = endCol;
      while (a > 0 && (c[a - 1] === ' ' || c[a - 1] === '\t')) a--;
      if (a === at.col || a === 0) {
        a = at.col;
        while (b < c.length && (c[b] === ' ' || c[b] === '\t')) b++;
      }
      line.c = c.slice(0, a) + c.slice(b);
    }
    return result(text, joinRaw(lines, eol));
  }
  if (size === null) return { text, ops: [] };
  // insert: before the trailing URL/tag/mark/dependency/focus tokens, else after the content
  const toks = [];
  const tre = /\S+/g;
  for (let t; (t = tre.exec(rest)) !== null;) toks.push({ s: t.index, v: t[0] });
  let k = toks.length;
  while (k > 0 && TRAIL_TOKEN_RE.test(toks[k - 1].v)) k--;
  if (k < toks.length) {
    const at = mapLogicalOffset(node.pieces, restStart + toks[k].s);
    const line = lines[at.pl];
    line.c = line.c.slice(0, at.col) + '(' + size + ') ' + line.c.slice(at.col);
  } else {
    let end = rest.length;
    while (end > 0 && /\s/.test(rest[end - 1])) end--;
    const at = mapLogicalOffset(node.pieces, restStart + end);
    const line = lines[at.pl];
    line.c = line.c.slice(0, at.col) + ' (' + size + ')' + line.c.slice(at.col);
  }
  return result(text, joinRaw(lines, eol));
}

const PREFIX_FULL_RE = /^[ \t]*(?:[-|+]|=(?=[ \t]))?\s*(?:[><](?=[ \t])\s*)?(?:\[[^\]]\]\s*)?(?:[><](?=[ \t])\s*)?/;
function LINE_PREFIX_LEN(s) {
  return PREFIX_FULL_RE.exec(s)[0].length;
}

// ------------------------------------------------------------------ add / move / remove

function validateNodeLine(line) {
  if (typeof line !== 'string') throw new CoreError('invalidParams', '"line" must be a string');
  if (/[\r\n\u2028\u2029]/.test(line)) throw new CoreError('invalidParams', '"line" must be a single line');
  const t = line.replace(/^[ \t]+/, '');
  const s = stripComment(t);
  if (SEPARATOR_RE.test(s)) throw new CoreError('invalidParams', '"line" is a description separator, not a node');
  if (/^"[ \t]/.test(s)) throw new CoreError('invalidParams', '"line" is a description line, not a node');
  if (continuationCut(s) >= 0) throw new CoreError('invalidParams', '"line" must not end with a continuation backslash');
  if (extractLine(s) === null) throw new CoreError('invalidParams', '"line" yields no node (empty label and no id)');
  return t;
}

function childIndent(parent, siblings, anchor) {
  const ref = anchor || (siblings.length > 0 ? siblings[siblings.length - 1] : null);
  if (ref) return ref.indent;
  if (parent === null) return '';
  return parent.indent + (parent.indent.indexOf('\t') >= 0 ? '\t' : '  ');
}

/**
 * Where a new child of `parent` goes: 0-based raw line index to insert before,
 * plus the indentation to use. `exclude` is left out of the sibling list (moves).
 */
function placement(doc, parent, afterRef, exclude) {
  const all = parent === null ? doc.roots : parent.children;
  const siblings = all.filter((c) => c !== exclude);
  let anchor = null;
  if (afterRef !== undefined && afterRef !== null) {
    anchor = resolveNode(doc, afterRef, 'after');
    if (exclude && inSubtree(doc, exclude, anchor)) {
      throw new CoreError('invalidMove', '"after" lies inside the moved subtree');
    }
    if (!siblings.includes(anchor)) {
      throw new CoreError('invalidParams', `"after" (line ${anchor.line}) is not a child of the given parent`);
    }
  }
  const indent = childIndent(parent, siblings, anchor);
  let at;
  const ref = anchor || (siblings.length > 0 ? siblings[siblings.length - 1] : null);
  if (ref) at = subtreeEndLine(doc, ref);
  else if (parent !== null) at = ownEnd(parent);
  else at = lastTreeLine(doc);
  return { at, indent };
}

/** Index to insert a root into an empty tree: before the separator or at the end. */
function lastTreeLine(doc) {
  if (doc.nodes.length > 0) return subtreeEndLine(doc, doc.roots[doc.roots.length - 1]);
  if (doc.separatorLine !== null) return doc.separatorLine - 1;
  // append after the last non-empty line
  let i = doc.lines.length;
  while (i > 0 && doc.lines[i - 1] === '') i--;
  return i;
}

function resolveParent(doc, ref) {
  if (ref === undefined || ref === null) return null;
  return resolveNode(doc, ref, 'parent');
}

export function addNode(params) {
  const text = requireText(params, 'text');
  const body = validateNodeLine(params.line);
  const doc = parseDocument(text);
  const parent = resolveParent(doc, params.parent);
  const { at, indent } = placement(doc, parent, params.after, null);
  const { lines, eol } = splitRaw(text);
  lines.splice(at, 0, { c: indent + body, e: eol });
  return result(text, joinRaw(lines, eol));
}

function reindent(content, oldIndent, newIndent, delta) {
  if (/^\s*$/.test(content)) return content;
  if (content.startsWith(oldIndent)) return newIndent + content.slice(oldIndent.length);
  const ws = /^[ \t]*/.exec(content)[0];
  const w = Math.max(0, indentWidth(ws) + delta);
  return ' '.repeat(w) + content.slice(ws.length);
}

export function moveNode(params) {
  const text = requireText(params, 'text');
  const doc = parseDocument(text);
  const node = resolveNode(doc, params.id, 'id');
  const parent = resolveParent(doc, params.parent);
  if (parent !== null && inSubtree(doc, node, parent)) {
    throw new CoreError('invalidMove', 'a node cannot move under itself or its own descendant');
  }
  if (params.after !== undefined && params.after !== null) {
    const a = resolveNode(doc, params.after, 'after');
    if (a === node) throw new CoreError('invalidMove', '"after" is the moved node itself');
  }
  const { at, indent } = placement(doc, parent, params.after, node);
  const { lines, eol } = splitRaw(text);
  const start = node.line - 1;
  const end = subtreeEndLine(doc, node); // exclusive 0-based
  const delta = indentWidth(indent) - node.width;
  const block = lines.slice(start, end).map((l) => ({ c: reindent(l.c, node.indent, indent, delta), e: l.e }));
  // the block's last line might have been the text's last line (eol '')
  const rest = lines.slice(0, start).concat(lines.slice(end));
  let ins = at;
  if (ins > start) ins -= end - start;
  rest.splice(ins, 0, ...block);
  return result(text, joinRaw(rest, eol));
}

export function removeNode(params) {
  const text = requireText(params, 'text');
  if (typeof params.discard !== 'boolean') throw new CoreError('invalidParams', '"discard" must be a boolean');
  const doc = parseDocument(text);
  const node = resolveNode(doc, params.id, 'id');
  if (params.discard) return result(text, statusEdit(text, node, '-'));
  const { lines, eol } = splitRaw(text);
  const drop = new Set();
  const endLine = subtreeEndLine(doc, node);
  for (let l = node.line; l <= endLine; l++) drop.add(l);
  const endIdx = subtreeEndIdx(doc, node);
  for (const b of doc.blocks) {
    if (b.node && b.node.idx >= node.idx && b.node.idx < endIdx) for (const l of b.lines) drop.add(l);
  }
  const kept = lines.filter((_, i) => !drop.has(i + 1));
  if (kept.length === 0) return result(text, '');
  return result(text, joinRaw(kept, eol));
}

// ------------------------------------------------------------------ ops

function opError(i, msg) {
  return new CoreError('opOutOfRange', `op ${i}: ${msg}`);
}

function checkLines(i, lines) {
  if (!Array.isArray(lines) || lines.some((l) => typeof l !== 'string')) {
    throw new CoreError('invalidParams', `op ${i}: "lines" must be an array of strings`);
  }
  if (lines.some((l) => l.indexOf('\n') >= 0)) throw new CoreError('invalidParams', `op ${i}: a line must not contain "\\n"`);
}

/** Apply line ops in order (lines = text split on `\n`; see CONTRACT.md). */
export function applyOps(params) {
  const text = requireText(params, 'text');
  const ops = params.ops;
  if (!Array.isArray(ops)) throw new CoreError('invalidParams', '"ops" must be an array');
  let lines = text.split('\n');
  for (let i = 0; i < ops.length; i++) {
    const op = ops[i];
    if (op === null || typeof op !== 'object') throw new CoreError('invalidParams', `op ${i} must be an object`);
    if (!Number.isInteger(op.index)) throw new CoreError('invalidParams', `op ${i}: "index" must be an integer`);
    const idx = op.index;
    if (op.count !== undefined && (!Number.isInteger(op.count) || op.count < 0)) {
      throw new CoreError('invalidParams', `op ${i}: "count" must be a non-negative integer`);
    }
    if (op.op === 'insert') {
      checkLines(i, op.lines);
      if (idx < 0 || idx > lines.length) throw opError(i, `insert index ${idx} outside 0..${lines.length}`);
      lines = lines.slice(0, idx).concat(op.lines, lines.slice(idx));
    } else if (op.op === 'replace') {
      checkLines(i, op.lines);
      const count = op.count === undefined ? op.lines.length : op.count;
      if (idx < 0 || idx + count > lines.length) throw opError(i, `replace ${idx}+${count} outside 0..${lines.length}`);
      lines = lines.slice(0, idx).concat(op.lines, lines.slice(idx + count));
    } else if (op.op === 'delete') {
      const count = op.count === undefined ? 1 : op.count;
      if (idx < 0 || idx + count > lines.length) throw opError(i, `delete ${idx}+${count} outside 0..${lines.length}`);
      lines = lines.slice(0, idx).concat(lines.slice(idx + count));
    } else {
      throw new CoreError('invalidParams', `op ${i}: "op" must be insert, replace or delete`);
    }
  }
  return { text: lines.join('\n') };
}

const MAX_D = 3000;

/** Myers diff on arrays of ints; returns hunks [aStart, aLen, bStart, bLen] or null if too far apart. */
function myers(a, b) {
  const n = a.length;
  const m = b.length;
  const max = n + m;
  const limit = Math.min(max, MAX_D);
  const off = max + 1;
  const v = new Int32Array(2 * max + 3);
  const trace = [];
  let found = -1;
  for (let d = 0; d <= limit; d++) {
    trace.push(v.slice(off - d - 1, off + d + 2));
    for (let k = -d; k <= d; k += 2) {
      let x;
      if (k === -d || (k !== d && v[off + k - 1] < v[off + k + 1])) x = v[off + k + 1];
      else x = v[off + k - 1] + 1;
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) { x++; y++; }
      v[off + k] = x;
      if (x >= n && y >= m) { found = d; break; }
    }
    if (found >= 0) break;
  }
  if (found < 0) return null;
  // backtrack: collect edit moves from the end
  const edits = []; // {type: 'del'|'ins', ai, bi}
  let x = n;
  let y = m;
  for (let d = found; d > 0; d--) {
    const vd = trace[d]; // snapshot at start of step d (state after d-1), indexed k+d+1
    const get = (k) => vd[k + d + 1];
    const k = x - y;
    let prevK;
    if (k === -d || (k !== d && get(k - 1) < get(k + 1))) prevK = k + 1; else prevK = k - 1;
    const prevX = get(prevK);
    const prevY = prevX - prevK;
    while (x > prevX && y > prevY) { x--; y--; }
    if (prevK === k + 1) edits.push({ t: 'ins', ai: x, bi: prevY });
    else edits.push({ t: 'del', ai: prevX, bi: y });
    x = prevX;
    y = prevY;
  }
  edits.reverse();
  // group into hunks
  const hunks = [];
  for (const e of edits) {
    const h = hunks[hunks.length - 1];
    if (e.t === 'del') {
      if (h && h[0] + h[1] === e.ai && h[2] + h[3] === e.bi) h[1]++;
      else hunks.push([e.ai, 1, e.bi, 0]);
    } else if (h && h[0] + h[1] === e.ai && h[2] + h[3] === e.bi) h[3]++;
    else hunks.push([e.ai, 0, e.bi, 1]);
  }
  return hunks;
}

/** Line ops turning `before` into `after` (both split on `\n`). */
export function computeOps(params) {
  const before = requireText(params, 'before');
  const after = requireText(params, 'after');
  if (before === after) return { ops: [] };
  const a = before.split('\n');
  const b = after.split('\n');
  let pre = 0;
  while (pre < a.length && pre < b.length && a[pre] === b[pre]) pre++;
  let suf = 0;
  while (suf < a.length - pre && suf < b.length - pre && a[a.length - 1 - suf] === b[b.length - 1 - suf]) suf++;
  const am = a.slice(pre, a.length - suf);
  const bm = b.slice(pre, b.length - suf);
  const ids = new Map();
  const enc = (s) => { let k = ids.get(s); if (k === undefined) { k = ids.size; ids.set(s, k); } return k; };
  const ai = am.map(enc);
  const bi = bm.map(enc);
  let hunks = myers(ai, bi);
  if (hunks === null) hunks = [[0, am.length, 0, bm.length]];
  const ops = [];
  let shift = 0;
  for (const [as, al, bs, bl] of hunks) {
    const index = pre + as + shift;
    const lines = bm.slice(bs, bs + bl);
    if (al > 0 && bl > 0) ops.push({ op: 'replace', index, count: al, lines });
    else if (al > 0) ops.push({ op: 'delete', index, count: al });
    else if (bl > 0) ops.push({ op: 'insert', index, lines });
    shift += bl - al;
  }
  return { ops };
}
