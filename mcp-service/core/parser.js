//! Tree-line extraction, hierarchy, ids, dependencies, descriptions and parser warnings.

import { logicalLines, isBlank, isSeparator, leadingBlanks } from './text.js';

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
/** Status key → canonical box char. */
export const STATUS_BY_KEY = {};
for (const c of Object.keys(STATUS)) STATUS_BY_KEY[STATUS[c].key] = c;
/** Effective-status scale (§12): rank → key. */
export const RANK_KEYS = ['idee', 'geplant', 'arbeit', 'durchstich', 'fertig', 'prod'];

/** Sizes (§6): rank 0..5. */
export const SIZES = ['XS', 'S', 'M', 'L', 'XL', 'XXL'];
export const SIZE_RANK = { XS: 0, S: 1, M: 2, L: 3, XL: 4, XXL: 5 };

// §2 step 1. `[^]` instead of `.` so that U+2028/2029 cannot make the match fail.
const LINE_RE = /()([-|+]|=(?=[ \t]))?\s*(?:([><])(?=[ \t])\s*)?(?:\[([^\]])\]\s*)?(?:([><])(?=[ \t])\s*)?([^]*)$/y;
/** Prefix part of LINE_RE (everything before the rest), used by the editor. */
export const LINE_PREFIX_RE = /^([ \t]*)([-|+]|=(?=[ \t]))?\s*(?:([><])(?=[ \t])\s*)?(?:\[([^\]])\]\s*)?(?:([><])(?=[ \t])\s*)?/;
export const URL_RE = /https?:\/\/\S+/i;
export const SIZE_RE = /(^|\s)\((XXL|XS|XL|S|M|L)\)/gi;
const TAG_RE = /@([\p{L}\p{N}._-]+)/gu;
const MARK_RE = /(^|\s)&([\p{L}\p{N}._-]+)/gu;
const ID_RE = /(^|\s)#([\p{L}\p{N}._-]+)(?::(?=\s|$))?/u;
const DEP_RE = /(^|\s):#([\p{L}\p{N}._-]+(?:,#[\p{L}\p{N}._-]+)*)/gu;
const FOCUS_RE = /(^|\s)!!!(?=\s|$)/g;
const WS_CHAR_RE = /\s/;
const OTHER_WS_RE = /[^\S ]/; // whitespace other than a plain space
const HEADER_RE = /^#([\p{L}\p{N}._-]+):?\s*$/u;

/** Separator marker inside description parts. */
export const DESC_SEP = '';

/** Width of an indentation string: tab counts 2 (§3). */
export function indentWidth(ws) {
  // native scans only: indentation can be very long on deep trees
  if (ws.indexOf('\t') < 0) return ws.length;
  return ws.length + ws.split('\t').length - 1;
}

/**
 * Extract the fields of one tree line (§2). Returns null when the line yields
 * no node (empty label and no id), else the field record (without hierarchy).
 */
export function extractLine(text, leadKnown) {
  // the indentation is split off by hand so that very long indentation is scanned once
  const lead = leadKnown === undefined ? leadingBlanks(text) : leadKnown;
  LINE_RE.lastIndex = lead; // sticky: matches right after the indentation
  const m = LINE_RE.exec(text);
  if (!m) return null; // cannot happen with [^]*
  const indent = text.slice(0, lead);
  const sigil = m[2] || null;
  const fold = m[3] || m[5] || null;
  const box = m[4] === undefined ? null : m[4];
  let rest = m[6];

  let url = null;
  const um = rest.indexOf('//') >= 0 ? URL_RE.exec(rest) : null;
  if (um) {
    url = um[0];
    rest = rest.slice(0, um.index) + rest.slice(um.index + um[0].length);
  }

  let size = null;
  let last = null;
  SIZE_RE.lastIndex = 0;
  if (rest.indexOf('(') >= 0) for (let sm; (sm = SIZE_RE.exec(rest)) !== null;) last = { index: sm.index, len: sm[0].length, lead: sm[1], size: sm[2] };
  if (last) {
    size = last.size.toUpperCase();
    rest = rest.slice(0, last.index) + last.lead + rest.slice(last.index + last.len);
  }

  const tags = [];
  if (rest.indexOf('@') >= 0) {
    // exec loop instead of replace(re, fn): far fewer operations in an interpreter
    TAG_RE.lastIndex = 0;
    let out = '';
    let pos = 0;
    for (let tm; (tm = TAG_RE.exec(rest)) !== null;) {
      tags.push(tm[1]);
      out += rest.slice(pos, tm.index);
      pos = tm.index + tm[0].length;
    }
    if (pos > 0) rest = out + rest.slice(pos);
  }

  const marks = [];
  if (rest.indexOf('&') >= 0) {
    MARK_RE.lastIndex = 0;
    let out = '';
    let pos = 0;
    for (let mm; (mm = MARK_RE.exec(rest)) !== null;) {
      marks.push(mm[2]);
      out += rest.slice(pos, mm.index) + mm[1];
      pos = mm.index + mm[0].length;
    }
    if (pos > 0) rest = out + rest.slice(pos);
  }

  let id = null;
  const hasHash = rest.indexOf('#') >= 0;
  const im = hasHash ? ID_RE.exec(rest) : null;
  if (im) {
    id = im[2];
    rest = rest.slice(0, im.index) + im[1] + rest.slice(im.index + im[0].length);
  }

  const deps = [];
  if (hasHash && rest.indexOf(':#') >= 0) rest = rest.replace(DEP_RE, (_, lead, list) => {
    for (const part of list.split(',')) deps.push(part.charCodeAt(0) === 35 ? part.slice(1) : part);
    return lead;
  });

  let focus = false;
  if (rest.indexOf('!!!') >= 0) rest = rest.replace(FOCUS_RE, (_, lead) => { focus = true; return lead; });

  // collapse whitespace runs; the test is a cheap single scan, the replace only runs when needed
  let label;
  if (OTHER_WS_RE.test(rest)) label = rest.replace(/\s+/g, ' ').trim();
  else if (rest.indexOf('  ') < 0) label = rest.trim();
  else {
    // only plain spaces: split on them and rejoin the non-empty words (no regex replace)
    const words = rest.split(' ');
    const kept = [];
    for (let i = 0; i < words.length; i++) if (words[i] !== '') kept.push(words[i]);
    label = kept.join(' ');
  }
  let labelFromId = false;
  if (label === '') {
    if (id === null) return null;
    label = '#' + id;
    labelFromId = true;
  }

  let type = 'and';
  let optional = false;
  if (sigil === '+') optional = true;
  else if (sigil === '|') type = 'or';
  else if (sigil === '=') type = 'xor';

  return { indent, sigil, fold, box, url, size, tags, marks, id, deps, focus, label, labelFromId, type, optional };
}

/**
 * Parse a whole document. Returns
 *   { lines, nodes (pre-order = document order), roots, warnings (parser order),
 *     firstById: Map id → first node, separatorLine, blocks: [{node|null, id, header, lines}] }
 */
export function parseDocument(text) {
  const ll = logicalLines(text);
  const nodes = [];
  const roots = [];
  const warnings = [];
  const firstById = new Map();
  const stack = [];
  let lastNode = null;

  for (const lg of ll.tree) {
    const t = lg.text;
    const lead = leadingBlanks(t);
    if (lead === t.length) continue;
    const c0 = t.charCodeAt(lead);
    // only a non-ASCII or control character can be other whitespace
    if ((c0 < 33 || c0 > 126) && WS_CHAR_RE.test(t[lead]) && isBlank(t.slice(lead))) continue;
    const q1 = t.charCodeAt(lead + 1);
    if (c0 === 34 && (q1 === 32 || q1 === 9)) {
      const body = t.slice(lead + 2).trim();
      if (lastNode === null) {
        warnings.push({ type: 'descStray', line: lg.line });
      } else {
        lastNode.descParts.push(body);
        lastNode.descLines.push(lg.line);
        lastNode.treeLines.push(lg.line);
        for (const c of lg.contLines) { lastNode.descLines.push(c); lastNode.treeLines.push(c); }
      }
      continue;
    }
    const f = extractLine(t, lead);
    if (f === null) continue;
    const info = f.box === null ? null : STATUS[f.box.toLowerCase()];
    const node = {
      idx: nodes.length,
      line: lg.line,
      width: indentWidth(f.indent),
      indent: f.indent,
      label: f.label,
      labelFromId: f.labelFromId,
      type: f.type,
      optional: f.optional,
      sigil: f.sigil,
      fold: f.fold,
      box: f.box,
      statusCode: info ? f.box.toLowerCase() : null,
      status: info ? info.key : null,
      url: f.url,
      size: f.size,
      tags: f.tags,
      marks: f.marks,
      id: f.id,
      deps: f.deps,
      focus: f.focus,
      descParts: [],
      descLines: lg.contLines.slice(),
      treeLines: lg.contLines.slice(),
      pieces: lg.pieces,
      logical: t,
      children: [],
      parent: null,
      depth: 0,
      desc: null,
      sizeConflict: false,
    };
    if (f.box !== null && !info) warnings.push({ type: 'unknownStatus', line: lg.line, code: f.box });
    if (f.id !== null) {
      const first = firstById.get(f.id);
      if (first) warnings.push({ type: 'duplicateId', line: lg.line, id: f.id, firstLine: first.line });
      else firstById.set(f.id, node);
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

  // Long-form description part (§10).
  const blocks = [];
  let block = null; // {node|null (skipped), ...}
  for (const d of ll.desc) {
    const s = d.text;
    const dl = leadingBlanks(s);
    const dc = s.charCodeAt(dl);
    if (dc === 45 && isSeparator(s)) continue;
    if (dl === s.length || ((dc < 33 || dc > 126) && isBlank(s))) {
      if (block && block.node) {
        block.node.descParts.push(DESC_SEP);
        block.node.descLines.push(d.line);
        block.lines.push(d.line);
      }
      continue;
    }
    const c = s.charCodeAt(0);
    if (c === 32 || c === 9) {
      if (block === null) warnings.push({ type: 'descStray', line: d.line });
      else if (block.node) {
        block.node.descParts.push(s.trim());
        block.node.descLines.push(d.line);
        block.lines.push(d.line);
      }
      continue;
    }
    const hm = c === 35 ? HEADER_RE.exec(s) : null;
    if (hm) {
      const target = firstById.get(hm[1]) || null;
      if (target === null) warnings.push({ type: 'unknownDesc', line: d.line, id: hm[1] });
      else target.descLines.push(d.line);
      block = { node: target, id: hm[1], header: d.line, lines: [d.line] };
      blocks.push(block);
      continue;
    }
    warnings.push({ type: 'descStray', line: d.line });
    block = null;
  }

  const byNumber = (a, b) => a - b;
  for (const n of nodes) {
    if (n.descLines.length > 1) n.descLines.sort(byNumber);
    if (n.treeLines.length > 1) n.treeLines.sort(byNumber);
    if (n.descParts.length === 0) continue; // desc stays null
    const out = [];
    for (const p of n.descParts) {
      if (p === DESC_SEP) {
        if (out.length > 0 && out[out.length - 1] !== DESC_SEP) out.push(DESC_SEP);
      } else out.push(p);
    }
    while (out.length > 0 && out[out.length - 1] === DESC_SEP) out.pop();
    n.desc = out.length > 0 ? out.join('\n') : null;
  }

  // unknownDep (pre-order = document order)
  for (const n of nodes) {
    for (const d of n.deps) if (!firstById.has(d)) warnings.push({ type: 'unknownDep', line: n.line, id: d });
  }
  // xorConflict
  for (const n of nodes) {
    const ch = n.children;
    if (ch.length === 0 || ch[0].type !== 'xor') continue;
    let seen = false;
    for (const c of ch) {
      if (!isRealized(c)) continue;
      if (seen) warnings.push({ type: 'xorConflict', line: c.line, label: c.label });
      seen = true;
    }
  }
  // sizeConflict
  for (const n of nodes) {
    if (n.size === null || n.size === 'XXL' || n.children.length === 0) continue;
    const counted = n.children.filter((c) => c.size !== null && !c.optional && !isDiscarded(c));
    if (counted.length === 0) continue;
    const disj = n.children[0].type !== 'and';
    let need;
    if (disj) {
      need = Infinity;
      for (const c of counted) need = Math.min(need, 2 ** SIZE_RANK[c.size]);
    } else {
      need = 0;
      for (const c of counted) need += 2 ** SIZE_RANK[c.size];
    }
    const max = 2 ** (SIZE_RANK[n.size] + 1);
    if (need >= max) {
      n.sizeConflict = true;
      warnings.push({ type: 'sizeConflict', line: n.line, size: n.size });
    }
  }

  return { lines: ll.lines, nodes, roots, warnings, firstById, separatorLine: ll.separatorLine, blocks };
}

export function statusInfo(n) {
  return n.statusCode === null ? null : STATUS[n.statusCode];
}
export function isRealized(n) { const s = statusInfo(n); return !!s && s.realized; }
export function isDone(n) { const s = statusInfo(n); return !!s && s.done; }
export function isStarted(n) { const s = statusInfo(n); return !!s && s.realized && !s.done; }
export function isDiscarded(n) { return n.statusCode === '-'; }
export function progressRank(n) { const s = statusInfo(n); return s ? s.rank : 0; }
