//! Tree-line extraction, hierarchy, ids, dependencies, descriptions and parser warnings.

import {
  normalizeNewlines, commentColumns, continuationCut, isBlank, isSeparator, leadingBlanks,
} from './text.js';

/** Status table (§5): box char → key, progress rank, realized, done. */
export const STATUS = {
  '?': { key: 'idee', rank: 0, realized: false, done: false },
  ' ': { key: 'geplant', rank: 1, realized: false, done: false },
  '~': { key: 'arbeit', rank: 2, realized: true, done: false },
  '/': { key: 'durchstich', rank: 3, realized: true, done: false },
  'x': { key: 'fertig', rank: 4, realized: true, done: true },
  '^': { key: 'prod', rank: 5, realized: true, done: true },
  '-': { key: 'verworfen', rank: 0, realized: false, done: false },
  '!': { key: 'highrisk', rank: 1, realized: false, done: false },
};
/** Box char as written (either case) → status info with its canonical `code`. */
const BOX_STATUS = new Map();
for (const c of Object.keys(STATUS)) {
  const info = Object.assign({ code: c }, STATUS[c]);
  BOX_STATUS.set(c, info);
  BOX_STATUS.set(c.toUpperCase(), info);
}
/** Status key → canonical box char. */
export const STATUS_BY_KEY = {};
for (const c of Object.keys(STATUS)) STATUS_BY_KEY[STATUS[c].key] = c;
/** Effective-status scale (§12): rank → key. */
export const RANK_KEYS = ['idee', 'geplant', 'arbeit', 'durchstich', 'fertig', 'prod'];

/** Sizes (§6): rank 0..5. */
export const SIZES = ['XS', 'S', 'M', 'L', 'XL', 'XXL'];
export const SIZE_RANK = { XS: 0, S: 1, M: 2, L: 3, XL: 4, XXL: 5 };

export const URL_RE = /https?:\/\/\S+/i;
export const SIZE_RE = /(^|\s)\((XXL|XS|XL|S|M|L)\)/gi;
const DEP_RE = /(^|\s):#([\p{L}\p{N}._-]+(?:,#[\p{L}\p{N}._-]+)*)/gu;
const FOCUS_RE = /(^|\s)!!!(?=\s|$)/g;
const WS_CHAR_RE = /\s/;
const INNER_WS_RE = /[^\S ]| {2}/; // whitespace other than a plain space, or a run of two
const HEADER_RE = /^#([\p{L}\p{N}._-]+):?\s*$/u;

/** Separator marker inside description parts. */
export const DESC_SEP = '';

/** Width of an indentation string: tab counts 2 (§3). */
export function indentWidth(ws) {
  // native scans only: indentation can be very long on deep trees
  if (ws.indexOf('\t') < 0) return ws.length;
  return ws.length + ws.split('\t').length - 1;
}

/** JS `\s` (WhiteSpace and LineTerminator) for one UTF-16 code unit; NaN (past the end) is not. */
function isWs(c) {
  if (c < 128) return c === 32 || (c >= 9 && c <= 13);
  return c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029
    || c === 0x202f || c === 0x205f || c === 0x3000 || c === 0xfeff;
}

/** Space or tab (the sheet's `(?=[ \t])`). */
function isBlankChar(c) {
  return c === 32 || c === 9;
}

/** Index of the first code unit at or after `p` that is not `\s`. */
function skipWs(s, p) {
  let c = s.charCodeAt(p);
  while (c === 32 || (c < 33 ? c >= 9 && c <= 13 : c > 127 && isWs(c))) c = s.charCodeAt(++p);
  return p;
}

/** `[\p{L}\p{N}._-]+` at one position (sticky, unicode): the run's length, 0 when none. */
const WORD_RE = /[\p{L}\p{N}._-]+/uy;
function wordAt(s, i) {
  WORD_RE.lastIndex = i;
  return WORD_RE.test(s) ? WORD_RE.lastIndex - i : 0;
}

/** `\((XXL|XS|XL|S|M|L)\)` (ASCII case-insensitive) at `k`: the size, or null. */
function sizeAt(s, k) {
  // letters folded to lower case with | 32: x=120 s=115 m=109 l=108
  const a = s.charCodeAt(k + 1) | 32;
  const b = s.charCodeAt(k + 2);
  if (b === 41) {
    if (a === 115) return 'S';
    if (a === 109) return 'M';
    if (a === 108) return 'L';
    return null;
  }
  if (a !== 120) return null;
  const b2 = b | 32;
  const c = s.charCodeAt(k + 3);
  if (c === 41) return b2 === 115 ? 'XS' : (b2 === 108 ? 'XL' : null);
  if (b2 === 120 && (c | 32) === 108 && s.charCodeAt(k + 4) === 41) return 'XXL';
  return null;
}

/**
 * Extract the fields of one tree line (§2). Returns null when the line yields
 * no node (empty label and no id), else the node record (without hierarchy).
 * The steps run in the sheet's order, each on the text the previous one left;
 * the line regex of step 1 and the token searches are written as character
 * scans and native searches, which an interpreter runs many times faster.
 */
export function extractLine(text, leadKnown) {
  const lead = leadKnown === undefined ? leadingBlanks(text) : leadKnown;
  // every field a node carries, so that all nodes share one shape
  const n = {
    idx: 0, line: 0, width: 0, indent: '', label: '', labelFromId: false, type: 'and', optional: false,
    fold: null, statusCode: null, status: null, rank: 0, realized: false, done: false, discarded: false,
    url: null, size: null, tags: null, marks: null, id: null, deps: null, focus: false, box: null,
    descParts: null, descLines: null, treeLines: null, pieces: null, logical: text, children: null,
    parent: null, depth: 0, desc: null, sizeConflict: false, sigil: false,
  };
  // 1. sigil, fold mark, box, fold mark: the line regex, scanned by hand
  let p = lead;
  let c = text.charCodeAt(p);
  if (c === 45) { n.sigil = true; p++; }
  else if (c === 124) { n.type = 'or'; n.sigil = true; p++; }
  else if (c === 43) { n.optional = true; n.sigil = true; p++; }
  else if (c === 61 && isBlankChar(text.charCodeAt(p + 1))) { n.type = 'xor'; n.sigil = true; p++; }
  p = skipWs(text, p);
  c = text.charCodeAt(p);
  if ((c === 62 || c === 60) && isBlankChar(text.charCodeAt(p + 1))) {
    n.fold = c === 62 ? '>' : '<';
    p = skipWs(text, p + 1);
    c = text.charCodeAt(p);
  }
  if (c === 91 && text.charCodeAt(p + 2) === 93 && text.charCodeAt(p + 1) !== 93) {
    n.box = text[p + 1];
    p = skipWs(text, p + 3);
    c = text.charCodeAt(p);
  }
  if ((c === 62 || c === 60) && isBlankChar(text.charCodeAt(p + 1))) {
    if (n.fold === null) n.fold = c === 62 ? '>' : '<';
    p = skipWs(text, p + 1);
  }
  if (lead > 0) n.indent = text.slice(0, lead);
  let rest = p === 0 ? text : text.slice(p);

  // 2. URL
  if (rest.indexOf('//') >= 0) {
    const um = URL_RE.exec(rest);
    if (um) {
      n.url = um[0];
      rest = rest.slice(0, um.index) + rest.slice(um.index + um[0].length);
    }
  }

  // 3. size: the last `(X)` that starts the text or follows whitespace
  for (let k = rest.lastIndexOf('('); k >= 0; k = k > 0 ? rest.lastIndexOf('(', k - 1) : -1) {
    if (k > 0 && !isWs(rest.charCodeAt(k - 1))) continue;
    const size = sizeAt(rest, k);
    if (size === null) continue;
    n.size = size;
    rest = rest.slice(0, k) + rest.slice(k + size.length + 2);
    break;
  }

  // 4. tags: every `@word`, removed whole
  const tags = [];
  let at = rest.indexOf('@');
  if (at >= 0) {
    let out = '';
    let pos = 0;
    while (at >= 0) {
      const len = wordAt(rest, at + 1);
      if (len > 0) {
        tags.push(rest.slice(at + 1, at + 1 + len));
        out += rest.slice(pos, at);
        pos = at + 1 + len;
      }
      const from = len > 0 ? pos : at + 1;
      at = from < rest.length ? rest.indexOf('@', from) : -1;
    }
    if (pos > 0) rest = out + rest.slice(pos);
  }
  n.tags = tags;

  // 5. marks: every standalone `&word`, removed (its leading blank stays)
  const marks = [];
  at = rest.indexOf('&');
  if (at >= 0) {
    let out = '';
    let pos = 0;
    while (at >= 0) {
      let len = 0;
      if (at === 0 || isWs(rest.charCodeAt(at - 1))) len = wordAt(rest, at + 1);
      if (len > 0) {
        marks.push(rest.slice(at + 1, at + 1 + len));
        out += rest.slice(pos, at);
        pos = at + 1 + len;
      }
      at = rest.indexOf('&', len > 0 ? pos : at + 1);
    }
    if (pos > 0) rest = out + rest.slice(pos);
  }
  n.marks = marks;

  // 6. id: the first standalone `#word`, with a colon that whitespace or the end follows
  let h = rest.indexOf('#');
  const hasHash = h >= 0;
  for (; h >= 0; h = rest.indexOf('#', h + 1)) {
    if (h > 0 && !isWs(rest.charCodeAt(h - 1))) continue;
    const len = wordAt(rest, h + 1);
    if (len === 0) continue;
    n.id = rest.slice(h + 1, h + 1 + len);
    let e = h + 1 + len;
    if (rest.charCodeAt(e) === 58 && (e + 1 === rest.length || isWs(rest.charCodeAt(e + 1)))) e++;
    rest = h === 0 ? rest.slice(e) : rest.slice(0, h) + rest.slice(e);
    break;
  }

  // 7. dependencies
  const deps = [];
  if (hasHash && rest.indexOf(':#') >= 0) rest = rest.replace(DEP_RE, (_, lead, list) => {
    for (const part of list.split(',')) deps.push(part.charCodeAt(0) === 35 ? part.slice(1) : part);
    return lead;
  });
  n.deps = deps;

  // 8. focus
  if (rest.indexOf('!!!') >= 0) rest = rest.replace(FOCUS_RE, (_, lead) => { n.focus = true; return lead; });

  // 9. label: whitespace runs collapsed, trimmed (token removal mostly leaves blanks at the
  // ends, which trim() takes; the regex replace only runs for inner runs or other whitespace)
  let label = rest.trim();
  if (INNER_WS_RE.test(label)) label = label.replace(/\s+/g, ' ');
  if (label === '') {
    if (n.id === null) return null;
    label = '#' + n.id;
    n.labelFromId = true;
  }
  n.label = label;
  return n;
}

/** A node's description (§10) from its parts: blank-line markers collapse, none at the end. */
function assembleDesc(parts) {
  let out = parts;
  if (parts.indexOf(DESC_SEP) >= 0) {
    out = [];
    for (const p of parts) {
      if (p === DESC_SEP) {
        if (out.length > 0 && out[out.length - 1] !== DESC_SEP) out.push(DESC_SEP);
      } else out.push(p);
    }
    while (out.length > 0 && out[out.length - 1] === DESC_SEP) out.pop();
  }
  return out.length > 0 ? out.join('\n') : null;
}

/** Split off and strip a physical line's comment, using the columns of `commentColumns`. */
function lineAt(lines, cols, i) {
  return cols === null || cols[i] < 0 ? lines[i] : lines[i].slice(0, cols[i]);
}

/**
 * Parse a whole document. Returns
 *   { lines, nodes (pre-order = document order), roots, warnings (parser order),
 *     firstById: Map id → first node, separatorLine, blocks: [{node|null, id, header, lines}] }
 * With `lineMaps` false (inspect, check), the per-node line bookkeeping that only the editor
 * needs (descLines, treeLines, pieces, blocks[].lines) is skipped and left null/empty.
 */
export function parseDocument(text, lineMaps = true) {
  const norm = normalizeNewlines(text);
  const lines = norm.split('\n');
  const cols = commentColumns(norm, lines);
  const nodes = [];
  const roots = [];
  const warnings = [];
  const firstById = new Map();
  const stack = [];
  let lastNode = null;
  const total = lines.length;
  let separatorLine = null;

  // ---- tree part (§1 logical lines, §2 extraction, §3 hierarchy)
  let i = 0;
  while (i < total) {
    const s = lineAt(lines, cols, i);
    const lineNo = i + 1;
    const len = s.length;
    let lead = 0;
    let tabs = 0; // -1: unknown (long indentation, scanned natively)
    let c0 = s.charCodeAt(0);
    while (c0 === 32 || c0 === 9) {
      if (lead >= 24) { lead = leadingBlanks(s); c0 = s.charCodeAt(lead); tabs = -1; break; }
      if (c0 === 9) tabs++;
      c0 = s.charCodeAt(++lead);
    }
    if (c0 === 45 && s.charCodeAt(lead + 1) === 45 && s.charCodeAt(lead + 2) === 45 && isSeparator(s)) {
      separatorLine = lineNo;
      i++;
      break;
    }
    // continuation (§1): only lines ending in a backslash or blanks can be one
    let t = s;
    let contLines = null;
    let pieces = null;
    let j = i;
    const last = s.charCodeAt(len - 1);
    if (last === 92 || last === 32 || last === 9) {
      let logical = s;
      for (;;) {
        const cut = continuationCut(logical);
        if (cut < 0) break;
        logical = logical.slice(0, cut);
        if (pieces === null) pieces = [{ pl: i, raw: 0, log: 0, len: s.length }];
        const lp = pieces[pieces.length - 1];
        lp.len = Math.max(0, cut - lp.log);
        if (j + 1 >= total) break; // backslash on the very last line: dropped
        j++;
        const next = lineAt(lines, cols, j);
        const nl = leadingBlanks(next);
        const rest = next.slice(nl);
        if (logical.length > 0 && rest.length > 0) {
          const c = logical.charCodeAt(logical.length - 1);
          if (c !== 32 && c !== 9) logical += ' ';
        }
        pieces.push({ pl: j, raw: nl, log: logical.length, len: rest.length });
        logical += rest;
        if (contLines === null) contLines = [];
        contLines.push(j + 1);
      }
      t = logical;
      c0 = t.charCodeAt(lead); // same indentation, but the first character may differ
    }
    i = j + 1;
    if (lead >= t.length) continue;
    // only a non-ASCII or control character can be other whitespace
    if ((c0 < 33 || c0 > 126) && WS_CHAR_RE.test(t[lead]) && isBlank(t.slice(lead))) continue;
    const q1 = t.charCodeAt(lead + 1);
    if (c0 === 34 && (q1 === 32 || q1 === 9)) {
      if (lastNode === null) {
        warnings.push({ type: 'descStray', line: lineNo });
      } else {
        lastNode.descParts.push(t.slice(lead + 2).trim());
        if (lineMaps) {
          lastNode.descLines.push(lineNo);
          lastNode.treeLines.push(lineNo);
          if (contLines !== null) for (const c of contLines) { lastNode.descLines.push(c); lastNode.treeLines.push(c); }
        }
      }
      continue;
    }
    const node = extractLine(t, lead);
    if (node === null) continue;
    node.idx = nodes.length;
    node.line = lineNo;
    node.width = tabs >= 0 ? lead + tabs : indentWidth(node.indent);
    node.descParts = [];
    node.children = [];
    if (lineMaps) {
      node.descLines = contLines === null ? [] : contLines.slice();
      node.treeLines = contLines === null ? [] : contLines.slice();
      node.pieces = pieces === null ? [{ pl: lineNo - 1, raw: 0, log: 0, len: t.length }] : pieces;
    }
    if (node.box !== null) {
      const info = BOX_STATUS.get(node.box);
      if (info !== undefined) {
        const code = info.code;
        node.statusCode = code;
        node.status = info.key;
        node.rank = info.rank;
        node.realized = info.realized;
        node.done = info.done;
        node.discarded = code === '-';
      } else {
        warnings.push({ type: 'unknownStatus', line: lineNo, code: node.box });
      }
    }
    if (node.id !== null) {
      const first = firstById.get(node.id);
      if (first) warnings.push({ type: 'duplicateId', line: lineNo, id: node.id, firstLine: first.line });
      else firstById.set(node.id, node);
    }
    while (stack.length > 0 && stack[stack.length - 1].width >= node.width) stack.pop();
    if (stack.length > 0) {
      const p = stack[stack.length - 1];
      node.parent = p;
      node.depth = p.depth + 1;
      p.children.push(node);
    } else {
      roots.push(node);
    }
    stack.push(node);
    nodes.push(node);
    lastNode = node;
  }

  // ---- long-form description part (§10)
  const blocks = [];
  let block = null; // {node|null (skipped), ...}
  let into = null; // node whose description the current block feeds
  for (; i < total; i++) {
    const s = lineAt(lines, cols, i);
    const lineNo = i + 1;
    const c = s.charCodeAt(0);
    if (c === 32 || c === 9) {
      // indented: description text, a blank line or a separator
      const body = s.trim();
      if (body === '') {
        if (into !== null) {
          into.descParts.push(DESC_SEP);
          if (lineMaps) { into.descLines.push(lineNo); block.lines.push(lineNo); }
        }
      } else if (body.charCodeAt(0) === 45 && isSeparator(s)) {
        // a separator inside the description part is ignored
      } else if (block === null) {
        warnings.push({ type: 'descStray', line: lineNo });
      } else if (into !== null) {
        into.descParts.push(body);
        if (lineMaps) { into.descLines.push(lineNo); block.lines.push(lineNo); }
      }
      continue;
    }
    if (s.length === 0 || (c === 45 && isSeparator(s)) || ((c < 33 || c > 126) && isBlank(s))) {
      if (s.length === 0 || c !== 45) {
        if (into !== null) {
          into.descParts.push(DESC_SEP);
          if (lineMaps) { into.descLines.push(lineNo); block.lines.push(lineNo); }
        }
      }
      continue;
    }
    const hm = c === 35 ? HEADER_RE.exec(s) : null;
    if (hm) {
      const target = firstById.get(hm[1]) || null;
      if (target === null) warnings.push({ type: 'unknownDesc', line: lineNo, id: hm[1] });
      else if (lineMaps) target.descLines.push(lineNo);
      block = { node: target, id: hm[1], header: lineNo, lines: [lineNo] };
      into = target;
      blocks.push(block);
      continue;
    }
    warnings.push({ type: 'descStray', line: lineNo });
    block = null;
    into = null;
  }

  // one pass in document order: assembled descriptions, then unknownDep, xorConflict and
  // sizeConflict; each warning list keeps document order and the lists are joined after
  const byNumber = (a, b) => a - b;
  const depWarnings = [];
  const xorWarnings = [];
  const sizeWarnings = [];
  for (let k = 0; k < nodes.length; k++) {
    const n = nodes[k];
    if (lineMaps) {
      if (n.descLines.length > 1) n.descLines.sort(byNumber);
      if (n.treeLines.length > 1) n.treeLines.sort(byNumber);
    }
    const parts = n.descParts;
    if (parts.length > 0) n.desc = assembleDesc(parts);
    const deps = n.deps;
    for (let d = 0; d < deps.length; d++) {
      if (!firstById.has(deps[d])) depWarnings.push({ type: 'unknownDep', line: n.line, id: deps[d] });
    }
    const ch = n.children;
    if (ch.length === 0) continue;
    if (ch[0].type === 'xor') {
      let seen = false;
      for (const c of ch) {
        if (!c.realized) continue;
        if (seen) xorWarnings.push({ type: 'xorConflict', line: c.line, label: c.label });
        seen = true;
      }
    }
    if (n.size !== null && n.size !== 'XXL') {
      const disj = ch[0].type !== 'and';
      let any = false;
      let need = disj ? Infinity : 0;
      for (const c of ch) {
        if (c.size === null || c.optional || c.discarded) continue;
        any = true;
        const v = 2 ** SIZE_RANK[c.size];
        need = disj ? Math.min(need, v) : need + v;
      }
      if (any && need >= 2 ** (SIZE_RANK[n.size] + 1)) {
        n.sizeConflict = true;
        sizeWarnings.push({ type: 'sizeConflict', line: n.line, size: n.size });
      }
    }
  }
  for (const w of depWarnings) warnings.push(w);
  for (const w of xorWarnings) warnings.push(w);
  for (const w of sizeWarnings) warnings.push(w);

  return { lines, nodes, roots, warnings, firstById, separatorLine, blocks };
}
