//! Entry module: the dispatch contract (JSON in, JSON out) and the read-only methods inspect/check.

import { parseDocument, SIZE_RANK } from './parser.js';
import { buildModel, siblingKeys, labelPath } from './model.js';
import { assembleWarnings, shapeWarning, STRUCTURAL } from './warnings.js';
import {
  CoreError, setStatus, setSize, addNode, moveNode, removeNode, applyOps, computeOps, resolveNode,
} from './edit.js';

export { CoreError, setStatus, setSize, addNode, moveNode, removeNode, applyOps, computeOps };

function requireText(params, name) {
  const v = params[name];
  if (typeof v !== 'string') throw new CoreError('invalidParams', `"${name}" must be a string`);
  return v;
}

function optBool(params, name, dflt) {
  const v = params[name];
  if (v === undefined || v === null) return dflt;
  if (typeof v !== 'boolean') throw new CoreError('invalidParams', `"${name}" must be a boolean`);
  return v;
}

/**
 * The analysis of the last text seen (with its view). An agent works on one document version
 * for several calls (read, inspect a subtree, check before a write), and a text always yields
 * the same analysis, so those calls reuse it instead of parsing again. Nothing downstream
 * mutates an analysis (the output node objects built from it are kept with it too; serialising
 * them does not change them). Bounded to one analysis of a modest plan, which keeps a runtime
 * within its 4 MiB budget: werkbaum.werkbaum (67 KB, 233 nodes) holds about 1.1 MiB.
 */
const CACHE_MAX_CHARS = 128 * 1024;
const CACHE_MAX_NODES = 500;
let cached = null; // { text, showDiscarded, analysis }

/** Parse + model + editor warning list for one text (the last one is cached). */
export function analyze(text, showDiscarded) {
  if (cached !== null && cached.text === text && cached.showDiscarded === showDiscarded) return cached.analysis;
  const doc = parseDocument(text, false);
  const model = buildModel(doc, { showDiscarded });
  const warnings = assembleWarnings(doc.warnings, model);
  const analysis = { doc, model, warnings, out: undefined }; // out: see outputNodes()
  const fits = text.length <= CACHE_MAX_CHARS && doc.nodes.length <= CACHE_MAX_NODES;
  cached = fits ? { text, showDiscarded, analysis } : null;
  return analysis;
}

function nodeOut(n, m) {
  return {
    id: n.id,
    label: n.label,
    line: n.line,
    gate: n.children.length > 0 ? n.children[0].type : null,
    type: n.type,
    optional: n.optional,
    status: n.status,
    statusCode: n.statusCode,
    effectiveStatus: m.effectiveStatus(n),
    size: n.size,
    assumedSize: m.assumedSize(n),
    tags: n.tags,
    marks: n.marks,
    taigaSlug: m.taigaSlug(n),
    deps: n.deps,
    desc: n.desc,
    url: n.url,
    focus: n.focus,
    fold: n.fold,
    collapsed: m.collapsed(n),
    needsBreakdown: n.size !== null && SIZE_RANK[n.size] >= SIZE_RANK.M && n.children.length === 0 && n.statusCode !== '-',
    sizeConflict: n.sizeConflict,
    needed: m.needed[n.idx] === 1,
    station: m.station[n.idx] === 1,
    children: [],
  };
}

/**
 * Output node objects of the whole view, built once per analysis (they depend on nothing
 * else): `nodes[idx]` with children linked, and `below[idx]`, the deepest depth in idx's subtree.
 * Pre-order means a parent's object exists before its children's. No recursion on depth.
 */
function outputNodes(analysis) {
  if (analysis.out !== undefined) return analysis.out;
  const m = analysis.model;
  const N = m.doc.nodes.length;
  const nodes = new Array(N).fill(null);
  const below = new Int32Array(N);
  for (const n of m.nodes) {
    const o = nodeOut(n, m);
    nodes[n.idx] = o;
    below[n.idx] = n.depth;
    if (n.parent !== null) nodes[n.parent.idx].children.push(o);
  }
  for (let i = m.nodes.length - 1; i >= 0; i--) {
    const n = m.nodes[i];
    if (n.parent !== null && below[n.idx] > below[n.parent.idx]) below[n.parent.idx] = below[n.idx];
  }
  analysis.out = { nodes, below };
  return analysis.out;
}

/** Output tree for a list of top nodes, and the deepest depth relative to them. */
function treeOut(tops, analysis) {
  const { nodes, below } = outputNodes(analysis);
  const tree = [];
  let maxDepth = 0;
  for (const t of tops) {
    tree.push(nodes[t.idx]);
    if (below[t.idx] - t.depth > maxDepth) maxDepth = below[t.idx] - t.depth;
  }
  return { tree, maxDepth };
}

function pathOut(m) {
  return {
    needed: m.neededLines.slice(),
    stations: m.stationLines.slice(),
    cost: m.cost,
    loads: m.loads.map((e) => ({ tag: e.tag, load: e.load, stations: e.stations })),
    overloadedAssignee: m.overloadedAssignee ? Object.assign({}, m.overloadedAssignee) : null,
    exact: m.exact,
  };
}

const INCLUDES = ['tree', 'warnings', 'path'];

export function inspect(params) {
  const text = requireText(params, 'text');
  const showDiscarded = optBool(params, 'showDiscarded', false);
  let include = INCLUDES;
  if (params.include !== undefined && params.include !== null) {
    if (!Array.isArray(params.include) || params.include.some((x) => !INCLUDES.includes(x))) {
      throw new CoreError('invalidParams', '"include" must be an array of "tree", "warnings", "path"');
    }
    include = params.include;
  }
  const analysis = analyze(text, showDiscarded);
  const { doc, model, warnings } = analysis;
  const result = {};
  let treeDepth = 0;
  if (include.includes('tree')) {
    let tops = model.roots;
    if (params.id !== undefined && params.id !== null) {
      const n = resolveNode(doc, params.id, 'id');
      if (!model.inView[n.idx]) {
        throw new CoreError('unknownNode', `node ${JSON.stringify(params.id)} is under a hidden discarded root (set showDiscarded)`);
      }
      tops = [n];
    }
    const t = treeOut(tops, analysis);
    result.tree = t.tree;
    treeDepth = t.maxDepth;
  } else if (params.id !== undefined && params.id !== null) {
    resolveNode(doc, params.id, 'id');
  }
  if (include.includes('warnings')) result.warnings = warnings;
  if (include.includes('path')) result.path = pathOut(model);
  result.notices = noticesOf(doc);
  result.summary = {
    nodes: model.nodes.length,
    warnings: warnings.length,
    needed: model.neededLines.length,
    stations: model.stationLines.length,
    exact: model.exact,
  };
  // {result:{tree:[node{children:[node…]}]}}: a node at relative depth d nests at 4 + 2d, its arrays at 5 + 2d;
  // warnings and path nest at most 5 deep. Well below the 200 bound native JSON.stringify is safe.
  if (treeDepth <= 90) SHALLOW.add(result);
  return result;
}

/** Results known to nest far less than 200 levels: written with native JSON.stringify directly. */
const SHALLOW = new WeakSet();

// ------------------------------------------------------------------ notices

/** True when a node line uses any of the notation: sigil, status box, size, id or a token. */
function usesNotation(n) {
  return n.sigil || n.box !== null || n.size !== null || n.id !== null || n.fold !== null || n.focus
    || (n.deps !== null && n.deps.length > 0) || (n.tags !== null && n.tags.length > 0)
    || (n.marks !== null && n.marks.length > 0);
}

const WORDS_RE = /\S+/g;

/**
 * Notices: not warnings (those stay exactly upstream's) but a hint that the text is not a plan:
 * more than half of its node lines are prose — no notation at all and a label of two or more
 * words. One-word bare lines (`a`, `R`) are terse plans, not prose.
 */
function noticesOf(doc) {
  const nodes = doc.nodes.length;
  let prose = 0;
  for (const n of doc.nodes) {
    if (!usesNotation(n) && (n.label.match(WORDS_RE) || []).length >= 2) prose++;
  }
  if (nodes === 0 || prose * 2 <= nodes) return [];
  return [{
    type: 'notAPlan',
    nodes,
    prose,
    text: `${prose} of ${nodes} node lines are plain prose (no sigil, status box, size, id or token): this does not look like a Werkbaum plan (see werkbaum://guide).`,
  }];
}

// ------------------------------------------------------------------ check

/** Identity of a warning across edits: type + non-line fields + the anchor line's content. */
function warningKey(w, doc, lineKeys) {
  const parts = [w.type];
  for (const k of Object.keys(w).sort()) {
    if (k === 'type' || k === 'line' || k === 'firstLine' || k === 'text') continue;
    if (w.type === 'assigneeOverload' && k !== 'tag') continue;
    parts.push(k + '=' + JSON.stringify(w[k]));
  }
  if (typeof w.line === 'number') parts.push('@' + lineKeys(w.line));
  return parts.join('\u0000');
}

function makeLineKeys(doc) {
  const byLine = new Map();
  for (const n of doc.nodes) byLine.set(n.line, n);
  let own = null;
  return (line) => {
    const n = byLine.get(line);
    if (n) {
      if (own === null) own = siblingKeys(doc);
      return 'node:' + (n.id !== null ? '#' + n.id + ':' : '') + labelPath(n, own);
    }
    const raw = doc.lines[line - 1];
    return 'text:' + (raw === undefined ? '' : raw.trim());
  };
}

export function check(params) {
  const text = requireText(params, 'text');
  const allowWarnings = optBool(params, 'allowWarnings', false);
  const allowProd = optBool(params, 'allowProd', false);
  const hasAgainst = params.against !== undefined && params.against !== null;
  if (hasAgainst && typeof params.against !== 'string') throw new CoreError('invalidParams', '"against" must be a string');

  const cur = analyze(text, false);
  const findings = [];
  let newWarnings;
  let before = null;
  if (hasAgainst) {
    before = analyze(params.against, false);
    const bk = makeLineKeys(before.doc);
    const counts = new Map();
    for (const w of before.warnings) {
      const k = warningKey(w, before.doc, bk);
      counts.set(k, (counts.get(k) || 0) + 1);
    }
    const ck = makeLineKeys(cur.doc);
    newWarnings = [];
    for (const w of cur.warnings) {
      const k = warningKey(w, cur.doc, ck);
      const c = counts.get(k) || 0;
      if (c > 0) counts.set(k, c - 1); else newWarnings.push(w);
    }
  } else {
    newWarnings = cur.warnings;
  }
  for (const w of newWarnings) {
    // On its own (no `against`), a duplicate id is reported but does not block: the notation
    // gives it one meaning (the first node keeps the id), and upstream's own example plans
    // carry one. A delta that introduces a duplicate still blocks.
    const structural = STRUCTURAL.has(w.type) && (hasAgainst || w.type !== 'duplicateId');
    const f = Object.assign({}, w, { blocking: structural && !allowWarnings });
    if (structural) f.reason = allowWarnings ? 'structural warning, allowed by allowWarnings' : 'new structural warning';
    findings.push(f);
  }

  // newly [^] nodes: only against a before (without one, no node is newly set)
  let prodBefore = null;
  if (before) {
    const ownB = siblingKeys(before.doc);
    prodBefore = { ids: new Map(), paths: new Map() };
    for (const n of before.doc.nodes) {
      if (n.id !== null && !prodBefore.ids.has(n.id)) prodBefore.ids.set(n.id, n);
    }
    prodBefore.ownB = ownB;
  }
  let ownC = null;
  let pathIndexB = null;
  const prodFindings = [];
  for (const n of before ? cur.doc.nodes : []) {
    if (n.statusCode !== '^') continue;
    let wasProd = false;
    if (prodBefore) {
      let match = n.id !== null ? prodBefore.ids.get(n.id) : undefined;
      if (!match) {
        if (ownC === null) ownC = siblingKeys(cur.doc);
        if (pathIndexB === null) {
          pathIndexB = new Map();
          for (const b of before.doc.nodes) {
            const k = labelPath(b, prodBefore.ownB);
            if (!pathIndexB.has(k)) pathIndexB.set(k, b);
          }
        }
        match = pathIndexB.get(labelPath(n, ownC));
      }
      wasProd = !!match && match.statusCode === '^';
    }
    if (wasProd) continue;
    const w = { type: 'prodStatus', line: n.line, label: n.label };
    if (n.id !== null) w.id = n.id;
    const f = shapeWarning(w);
    f.blocking = !allowProd;
    f.reason = allowProd ? 'status [^] set, allowed by allowProd' : 'status [^] (prod) may only be set by a person';
    prodFindings.push(f);
  }
  const all = findings.concat(prodFindings);
  const keyed = all.map((f, i) => ({ f, i, l: typeof f.line === 'number' ? f.line : 0 }));
  keyed.sort((a, b) => (a.l - b.l) || (a.i - b.i));
  const sorted = keyed.map((k) => k.f);
  return { findings: sorted, blocking: sorted.some((f) => f.blocking), warnings: cur.warnings, notices: noticesOf(cur.doc) };
}

// ------------------------------------------------------------------ dispatch

const METHODS = {
  inspect, check, setStatus, setSize, addNode, moveNode, removeNode, applyOps, computeOps,
};

/** Nesting depth of a JSON value, measured without recursion; stops counting past `limit`. */
function depthExceeds(value, limit) {
  const stack = [[value, 1]];
  while (stack.length > 0) {
    const [v, d] = stack.pop();
    if (v === null || typeof v !== 'object') continue;
    if (d > limit) return true;
    if (Array.isArray(v)) { for (const x of v) if (x !== null && typeof x === 'object') stack.push([x, d + 1]); }
    else for (const k in v) { const x = v[k]; if (x !== null && typeof x === 'object') stack.push([x, d + 1]); }
  }
  return false;
}

/** JSON text of a value: native JSON.stringify when shallow, an iterative writer when deep. */
export function stringify(value) {
  if (!depthExceeds(value, 200)) return JSON.stringify(value);
  return stringifyDeep(value);
}

/** JSON.stringify without recursion (deep trees must not exhaust the stack). */
export function stringifyDeep(value) {
  const out = [];
  const stack = [{ v: value, state: 0 }];
  while (stack.length > 0) {
    const f = stack[stack.length - 1];
    const v = f.v;
    if (f.state === 0) {
      if (v === null || v === undefined || typeof v === 'function') { out.push('null'); stack.pop(); continue; }
      if (typeof v === 'string') { out.push(JSON.stringify(v)); stack.pop(); continue; }
      if (typeof v === 'number') { out.push(Number.isFinite(v) ? String(v) : 'null'); stack.pop(); continue; }
      if (typeof v === 'boolean') { out.push(v ? 'true' : 'false'); stack.pop(); continue; }
      if (Array.isArray(v)) { out.push('['); f.arr = true; f.keys = null; f.i = 0; f.state = 1; continue; }
      out.push('{');
      f.arr = false;
      f.keys = Object.keys(v).filter((k) => v[k] !== undefined && typeof v[k] !== 'function');
      f.i = 0;
      f.state = 1;
      continue;
    }
    const len = f.arr ? v.length : f.keys.length;
    if (f.i >= len) { out.push(f.arr ? ']' : '}'); stack.pop(); continue; }
    if (f.i > 0) out.push(',');
    if (f.arr) {
      stack.push({ v: v[f.i], state: 0 });
    } else {
      const k = f.keys[f.i];
      out.push(JSON.stringify(k), ':');
      stack.push({ v: v[k], state: 0 });
    }
    f.i++;
  }
  return out.join('');
}

function errorJson(code, message) {
  return stringify({ error: { code, message: String(message) } });
}

/**
 * The engine entry point: `dispatch(method, paramsJson)` → JSON string
 * `{"result": …}` or `{"error": {"code", "message"}}`. Never throws.
 */
export function dispatch(method, paramsJson) {
  try {
    if (typeof method !== 'string' || !Object.prototype.hasOwnProperty.call(METHODS, method)) {
      return errorJson('unknownMethod', `unknown method ${JSON.stringify(String(method))}`);
    }
    let params;
    if (typeof paramsJson === 'string') {
      try {
        params = JSON.parse(paramsJson);
      } catch (e) {
        return errorJson('invalidParams', 'params are not valid JSON');
      }
    } else if (paramsJson === undefined || paramsJson === null) {
      params = {};
    } else {
      params = paramsJson;
    }
    if (params === null || typeof params !== 'object' || Array.isArray(params)) {
      return errorJson('invalidParams', 'params must be a JSON object');
    }
    const result = METHODS[method](params);
    if (SHALLOW.has(result)) return JSON.stringify({ result });
    return stringify({ result });
  } catch (e) {
    try {
      if (e instanceof CoreError) return errorJson(e.code, e.message);
      return errorJson('internal', (e && e.message) ? e.message : String(e));
    } catch (e2) {
      return '{"error":{"code":"internal","message":"unprintable internal error"}}';
    }
  }
}
