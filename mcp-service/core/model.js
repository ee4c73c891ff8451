//! Plan model: view filter, gates, effective status, assumed size, cheapest path, stations, loads, folding, mixedGate.

import { SIZES, SIZE_RANK, RANK_KEYS } from './parser.js';

/** Exhaustive search limit (§13). */
export const SEARCH_LIMIT = 20000;

/**
 * Build the model for one view (§18): discarded roots are removed unless
 * showDiscarded. Everything below works on the filtered forest.
 *
 * Per-node results live in arrays indexed by `node.idx` (never in Maps or Sets keyed by
 * numbers: QuickJS hashes small integers badly, and lookups degrade to list scans).
 */
export function buildModel(doc, options) {
  const showDiscarded = !!(options && options.showDiscarded);
  const roots = [];
  for (const r of doc.roots) if (showDiscarded || !r.discarded) roots.push(r);
  const all = doc.nodes;
  const N = all.length;
  const inView = new Uint8Array(N);
  for (const r of roots) inView[r.idx] = 1;
  const nodes = [];
  for (let i = 0; i < N; i++) {
    const n = all[i];
    if (inView[i] === 1 || (n.parent !== null && inView[n.parent.idx] === 1)) { inView[i] = 1; nodes.push(n); }
  }
  let firstById = doc.firstById;
  if (nodes.length !== N) {
    firstById = new Map();
    for (const n of nodes) if (n.id !== null && !firstById.has(n.id)) firstById.set(n.id, n);
  }

  const m = { doc, showDiscarded, roots, nodes, inView, firstById };
  computeEffective(m);
  computeAssumed(m);
  computePath(m);
  computeLoads(m);
  computeCollapsed(m);
  computeTaiga(m);
  computeMixedGate(m);
  return m;
}

// ---------------------------------------------------------------- §12
function computeEffective(m) {
  const N = m.doc.nodes.length;
  const rev = new Array(N).fill(null); // target idx → dependent nodes
  for (const n of m.nodes) {
    for (const d of n.deps) {
      const t = m.firstById.get(d);
      if (!t) continue;
      if (rev[t.idx] === null) rev[t.idx] = [n];
      else rev[t.idx].push(n);
    }
  }
  const eff = new Int8Array(N).fill(-1);
  const byRank = [[], [], [], [], [], []];
  for (const n of m.nodes) byRank[n.rank].push(n);
  const work = [];
  for (let r = 0; r < 6; r++) {
    for (const n of byRank[r]) if (eff[n.idx] < 0) { eff[n.idx] = r; work.push(n); }
    while (work.length > 0) {
      const list = rev[work.pop().idx];
      if (list === null) continue;
      for (const d of list) if (eff[d.idx] < 0) { eff[d.idx] = r; work.push(d); }
    }
  }
  m.effRank = eff;
  m.effectiveStatus = (n) => (eff[n.idx] < n.rank ? RANK_KEYS[eff[n.idx]] : n.status);
}

// ---------------------------------------------------------------- §13 sizes
/** Rank of the assumed size of every node (§13), children before parents. */
function computeAssumed(m) {
  const nodes = m.doc.nodes; // subtree-local: compute for every node
  const N = nodes.length;
  const assumed = new Int8Array(N).fill(-1);
  for (let i = N - 1; i >= 0; i--) {
    const n = nodes[i];
    if (n.size !== null) { assumed[i] = SIZE_RANK[n.size]; continue; }
    // counting = children neither optional nor discarded; the first decides the gate
    let first = null;
    let anyRealized = false;
    let anyDoneRealized = false;
    let anyDone = false;
    let anyOpen = false;
    for (const c of n.children) {
      if (c.optional || c.discarded) continue;
      if (first === null) first = c;
      if (c.realized) { anyRealized = true; if (c.done) anyDoneRealized = true; }
      if (c.done) anyDone = true; else anyOpen = true;
    }
    if (first === null) { assumed[i] = SIZE_RANK.M; continue; }
    if (first.type === 'or' || first.type === 'xor') {
      // pool = realized members if any, else all; a done pool member empties it
      if (anyRealized ? anyDoneRealized : anyDone) { assumed[i] = SIZE_RANK.XS; continue; }
      let best = 99;
      for (const c of n.children) {
        if (c.optional || c.discarded || (anyRealized && !c.realized)) continue;
        if (assumed[c.idx] < best) best = assumed[c.idx];
      }
      assumed[i] = best;
    } else {
      if (!anyOpen) { assumed[i] = SIZE_RANK.XS; continue; }
      let best = -1;
      let count = 0;
      for (const c of n.children) {
        if (c.optional || c.discarded || c.done) continue;
        const a = assumed[c.idx];
        if (a > best) { best = a; count = 1; } else if (a === best) count++;
      }
      assumed[i] = count >= 3 ? Math.min(best + 1, 5) : best;
    }
  }
  m.assumedRank = assumed;
  m.assumedSize = (n) => SIZES[assumed[n.idx]];
  const own = new Int32Array(N);
  for (let i = 0; i < N; i++) own[i] = nodes[i].done ? 0 : assumed[i] + 1;
  m.ownCost = own;
}

// ---------------------------------------------------------------- §13 path
/** pathChildren (§13): not discarded, and not optional unless started. */
function pathChildrenOf(n) {
  const ch = n.children;
  let all = true;
  for (const c of ch) if (c.discarded || (c.optional && !(c.realized && !c.done))) { all = false; break; }
  if (all) return ch; // the common case: no copy
  const out = [];
  for (const c of ch) if (!c.discarded && (!c.optional || (c.realized && !c.done))) out.push(c);
  return out;
}

function isDisjunctive(n) { return n.type !== 'and'; }

function computePath(m) {
  const own = m.ownCost;
  const all = m.doc.nodes;
  const N = all.length;
  const pc = new Array(N).fill(null);
  for (const n of m.nodes) pc[n.idx] = pathChildrenOf(n);
  const kidsOf = (n) => (pc[n.idx] !== null ? pc[n.idx] : pathChildrenOf(n));
  m.pathChildren = kidsOf;

  // choice groups (document order) and their local choices, by parent idx
  const groups = [];
  const localChoice = new Array(N).fill(null);
  for (const n of m.nodes) {
    const k = pc[n.idx];
    if (k.length > 1 && isDisjunctive(k[0])) {
      let pool = k;
      for (const c of k) if (c.realized) { pool = k.filter((x) => x.realized); break; }
      let best = pool[0];
      for (const c of pool) if (own[c.idx] < own[best.idx]) best = c;
      localChoice[n.idx] = best;
      groups.push({ node: n, key: k[0], pool });
    }
  }

  // dependency resolution (view scope)
  const depTargets = new Array(N).fill(null);
  let anyDep = false;
  const targetStrings = new Set();
  for (const n of m.nodes) {
    if (n.deps.length === 0) continue;
    anyDep = true;
    const list = [];
    for (const d of n.deps) {
      targetStrings.add(d);
      const t = m.firstById.get(d);
      if (t && !t.discarded) list.push(t);
    }
    depTargets[n.idx] = list;
  }

  // coupling flags (subtree contains a node with deps or a dependency target id)
  const coupledGroups = [];
  if (anyDep) {
    const flag = new Uint8Array(N);
    for (let i = m.nodes.length - 1; i >= 0; i--) {
      const n = m.nodes[i];
      if (n.deps.length > 0 || (n.id !== null && targetStrings.has(n.id))) flag[n.idx] = 1;
      if (flag[n.idx] && n.parent !== null) flag[n.parent.idx] = 1;
    }
    for (const g of groups) {
      if (g.pool.length < 2) continue;
      for (const c of g.pool) if (flag[c.idx]) { coupledGroups.push(g); break; }
    }
  }

  const needed = new Uint8Array(N);
  const margins = new Int32Array(N); // margin of every needed node in the last evaluation
  const work = [];
  const roots = m.roots;
  /** Needed set for one assignment (choice by group node idx, null = local choices) and its cost. */
  const evaluate = (assign) => {
    needed.fill(0);
    for (let i = roots.length - 1; i >= 0; i--) {
      const r = roots[i];
      if (!needed[r.idx]) { needed[r.idx] = 1; work.push(r); }
    }
    while (work.length > 0) {
      const n = work.pop();
      const k = kidsOf(n);
      if (k.length > 0) {
        if (isDisjunctive(k[0])) {
          let c = k[0];
          if (k.length > 1) {
            const a = assign === null ? null : assign[n.idx];
            c = a !== null && a !== undefined ? a : (localChoice[n.idx] || k[0]);
          }
          if (!needed[c.idx]) { needed[c.idx] = 1; work.push(c); }
        } else {
          for (const c of k) if (!needed[c.idx]) { needed[c.idx] = 1; work.push(c); }
        }
      }
      const dt = depTargets[n.idx];
      if (dt !== null) for (const t of dt) if (!needed[t.idx]) { needed[t.idx] = 1; work.push(t); }
    }
    let cost = 0;
    for (let i = 0; i < N; i++) {
      if (!needed[i]) { margins[i] = 0; continue; }
      const v = margin(all[i]);
      margins[i] = v;
      cost += v;
    }
    return cost;
  };
  /** D69 margin of a needed node: its own cost minus what its needed path children cost. */
  const margin = (n) => {
    let sub = 0;
    for (const c of kidsOf(n)) if (needed[c.idx]) sub += own[c.idx];
    const v = own[n.idx] - sub;
    return v > 0 ? v : 0;
  };

  let exact = true;
  let bestCost;
  let P = 1;
  for (const g of coupledGroups) { P *= g.pool.length; if (P > SEARCH_LIMIT) break; }
  if (coupledGroups.length === 0) {
    bestCost = evaluate(null);
  } else if (P > SEARCH_LIMIT) {
    exact = false;
    bestCost = evaluate(null);
  } else {
    const G = coupledGroups.length;
    const digits = new Int32Array(G);
    const assign = new Array(N).fill(null);
    let bestDigits = null;
    for (;;) {
      for (let g = 0; g < G; g++) assign[coupledGroups[g].node.idx] = coupledGroups[g].pool[digits[g]];
      const c = evaluate(assign);
      if (bestDigits === null || c < bestCost) { bestCost = c; bestDigits = digits.slice(); }
      let g = G - 1;
      while (g >= 0) {
        digits[g]++;
        if (digits[g] < coupledGroups[g].pool.length) break;
        digits[g] = 0;
        g--;
      }
      if (g < 0) break;
    }
    for (let g = 0; g < G; g++) assign[coupledGroups[g].node.idx] = coupledGroups[g].pool[bestDigits[g]];
    bestCost = evaluate(assign);
  }

  // `needed` now holds the chosen set; margins below read it
  m.needed = needed;
  m.exact = exact;
  m.cost = bestCost;
  m.margin = (n) => margins[n.idx];
  m.groups = groups;
  m.coupledGroups = coupledGroups;

  // stations (§13): needed, not done, no needed-and-open descendant (all children)
  const openBelow = new Uint8Array(N);
  const station = new Uint8Array(N);
  for (let i = m.nodes.length - 1; i >= 0; i--) {
    const n = m.nodes[i];
    const open = needed[n.idx] === 1 && !n.done;
    if (open && !openBelow[n.idx]) station[n.idx] = 1;
    if (n.parent !== null && (open || openBelow[n.idx])) openBelow[n.parent.idx] = 1;
  }
  m.station = station;
  m.neededLines = [];
  m.stationLines = [];
  for (const n of m.nodes) {
    if (needed[n.idx]) m.neededLines.push(n.line);
    if (station[n.idx]) m.stationLines.push(n.line);
  }
}

// ---------------------------------------------------------------- §15
function computeLoads(m) {
  const N = m.doc.nodes.length;
  const owners = new Array(N).fill(null);
  const loads = new Map(); // tag → {tag, load, stations, loadOrder}
  let order = 0;
  const entry = (t) => {
    let e = loads.get(t);
    if (!e) { e = { tag: t, load: 0, stations: 0, loadOrder: Infinity }; loads.set(t, e); }
    return e;
  };
  const none = [];
  let total = 0;
  let totalStations = 0;
  for (const n of m.nodes) {
    const own = n.tags.length > 0 ? n.tags : (n.parent !== null ? owners[n.parent.idx] : none);
    owners[n.idx] = own;
    if (!m.needed[n.idx]) continue;
    const mg = m.margin(n);
    total += mg;
    if (mg > 0 && own.length > 0) {
      const share = mg / own.length;
      for (const t of own) {
        const e = entry(t);
        e.load += share;
        if (e.loadOrder === Infinity) e.loadOrder = order++;
      }
    }
    if (m.station[n.idx]) {
      totalStations += 1;
      for (const t of own) entry(t).stations += 1;
    }
  }
  m.owners = owners;
  m.loads = [...loads.values()];
  m.totalLoad = total;
  m.totalStations = totalStations;
  const positive = m.loads.filter((e) => e.load > 0).sort((a, b) => a.loadOrder - b.loadOrder);
  let over = null;
  if (positive.length >= 2 && total > 0) {
    let best = positive[0];
    for (const e of positive) if (e.load > best.load) best = e;
    if (2 * best.load > total) {
      over = { tag: best.tag, share: Math.round((100 * best.load) / total), stations: best.stations, totalStations };
    }
  }
  m.overloadedAssignee = over;
}

// ---------------------------------------------------------------- §7 folding
function computeCollapsed(m) {
  const N = m.doc.nodes.length;
  const collapsed = new Uint8Array(N);
  let rescue = false;
  for (const n of m.nodes) {
    if (n.fold === '>') collapsed[n.idx] = 1;
    if (n.fold === '<' || n.focus) rescue = true;
  }
  if (rescue) {
    // clean[x] === epoch: x and all its ancestors are open. The epoch moves on
    // whenever a node gets collapsed, so the shortcut never skips a collapsed node.
    const clean = new Int32Array(N).fill(-1);
    let epoch = 0;
    for (const n of m.nodes) {
      if (n.fold !== '<' && !n.focus) continue;
      const path = [];
      for (let a = n.parent; a !== null && clean[a.idx] !== epoch; a = a.parent) path.push(a);
      path.reverse();
      path.push(n);
      for (let i = 0; i < path.length - 1; i++) {
        const a = path[i];
        if (!collapsed[a.idx]) continue;
        collapsed[a.idx] = 0;
        for (const c of a.children) {
          if (c !== path[i + 1] && c.children.length > 0 && !collapsed[c.idx]) { collapsed[c.idx] = 1; epoch++; }
        }
      }
      collapsed[n.idx] = 0;
      for (const a of path) clean[a.idx] = epoch;
    }
  }
  m.collapsed = (n) => collapsed[n.idx] === 1 && n.children.length > 0;
}

// ---------------------------------------------------------------- §7 marks
function computeTaiga(m) {
  const N = m.doc.nodes.length;
  const slug = new Array(N).fill(null);
  for (const n of m.nodes) {
    let own = null;
    for (const mk of n.marks) {
      if (mk.length > 6 && mk.startsWith('taiga.')) { own = mk.slice(6); break; }
    }
    slug[n.idx] = own !== null ? own : (n.parent !== null ? slug[n.parent.idx] : null);
  }
  m.taigaSlug = (n) => slug[n.idx];
}

// ---------------------------------------------------------------- §11 mixedGate
function computeMixedGate(m) {
  const out = [];
  const show = m.showDiscarded;
  // document order = pre-order; a hidden discarded node hides its subtree
  const hidden = new Uint8Array(m.doc.nodes.length);
  for (const n of m.nodes) {
    if (n.parent !== null && (hidden[n.parent.idx] === 1 || (!show && n.discarded))) {
      hidden[n.idx] = 1;
      continue;
    }
    let first = null;
    let mixed = false;
    for (const c of n.children) {
      if (!show && c.discarded) continue;
      if (first === null) first = c;
      else if (c.type !== first.type) mixed = true;
    }
    if (mixed) out.push({ type: 'mixedGate', line: first.line, label: n.label });
  }
  m.mixedGate = out;
}

/** Sibling suffix (§17) of every node: label, then `#1`, `#2`… for later same-label siblings. */
export function siblingKeys(doc) {
  const own = new Array(doc.nodes.length);
  const suffix = (list) => {
    const seen = new Map();
    for (const c of list) {
      const k = seen.get(c.label) || 0;
      seen.set(c.label, k + 1);
      own[c.idx] = k === 0 ? c.label : c.label + '#' + k;
    }
  };
  suffix(doc.roots);
  for (const n of doc.nodes) suffix(n.children);
  return own;
}

/** Label path (§17) of one node, built on demand (walks up, no recursion). */
export function labelPath(node, own) {
  const parts = [];
  for (let a = node; a !== null; a = a.parent) parts.push(own[a.idx]);
  return parts.reverse().join(' > ');
}
