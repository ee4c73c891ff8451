//! Plan model: view filter, gates, effective status, assumed size, cheapest path, stations, loads, folding, mixedGate.

import {
  SIZES, SIZE_RANK, RANK_KEYS, isDone, isStarted, isRealized, isDiscarded, progressRank,
} from './parser.js';

/** Exhaustive search limit (§13). */
export const SEARCH_LIMIT = 20000;

function disjunctive(n) { return n.type === 'or' || n.type === 'xor'; }

/** Gate of a child list = type of its first element (§4). */
export function gateOf(list) {
  if (list.length === 0) return null;
  return list[0].type;
}

/**
 * Build the model for one view (§18): discarded roots are removed unless
 * showDiscarded. Everything below works on the filtered forest.
 */
export function buildModel(doc, options) {
  const showDiscarded = !!(options && options.showDiscarded);
  const roots = showDiscarded ? doc.roots.slice() : doc.roots.filter((r) => !isDiscarded(r));
  const keep = new Set(roots);
  const N = doc.nodes.length;
  const inView = new Uint8Array(N);
  const nodes = [];
  for (const n of doc.nodes) {
    const ok = n.parent === null ? keep.has(n) : inView[n.parent.idx] === 1;
    if (ok) { inView[n.idx] = 1; nodes.push(n); }
  }

  const firstById = new Map();
  for (const n of nodes) if (n.id !== null && !firstById.has(n.id)) firstById.set(n.id, n);

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
  const rev = new Map(); // target idx → [dependent nodes]
  for (const n of m.nodes) {
    for (const d of n.deps) {
      const t = m.firstById.get(d);
      if (!t) continue;
      let list = rev.get(t.idx);
      if (!list) { list = []; rev.set(t.idx, list); }
      list.push(n);
    }
  }
  const eff = new Int8Array(N).fill(-1);
  const byRank = [[], [], [], [], [], []];
  for (const n of m.nodes) byRank[progressRank(n)].push(n);
  for (let r = 0; r < 6; r++) {
    const work = [];
    for (const n of byRank[r]) if (eff[n.idx] < 0) { eff[n.idx] = r; work.push(n); }
    while (work.length > 0) {
      const t = work.pop();
      const list = rev.get(t.idx);
      if (!list) continue;
      for (const d of list) if (eff[d.idx] < 0) { eff[d.idx] = r; work.push(d); }
    }
  }
  m.effRank = eff;
  m.effectiveStatus = (n) => (eff[n.idx] < progressRank(n) ? RANK_KEYS[eff[n.idx]] : n.status);
}

// ---------------------------------------------------------------- §13 sizes
function chosenPool(list) {
  const realized = list.filter(isRealized);
  return realized.length > 0 ? realized : list;
}

function computeAssumed(m) {
  const N = m.doc.nodes.length;
  const assumed = new Int8Array(N).fill(-1);
  const nodes = m.doc.nodes; // subtree-local: compute for every node
  for (let i = nodes.length - 1; i >= 0; i--) {
    const n = nodes[i];
    if (n.size !== null) { assumed[n.idx] = SIZE_RANK[n.size]; continue; }
    const counting = n.children.filter((c) => !c.optional && !isDiscarded(c));
    if (counting.length === 0) { assumed[n.idx] = SIZE_RANK.M; continue; }
    const disj = disjunctive(counting[0]);
    let kids;
    if (disj) {
      const pool = chosenPool(counting);
      kids = pool.some(isDone) ? [] : pool;
    } else {
      kids = counting.filter((c) => !isDone(c));
    }
    if (kids.length === 0) { assumed[n.idx] = SIZE_RANK.XS; continue; }
    if (disj) {
      let best = 99;
      for (const k of kids) best = Math.min(best, assumed[k.idx]);
      assumed[n.idx] = best;
    } else {
      let best = -1;
      let count = 0;
      for (const k of kids) {
        const a = assumed[k.idx];
        if (a > best) { best = a; count = 1; } else if (a === best) count++;
      }
      assumed[n.idx] = count >= 3 ? Math.min(best + 1, 5) : best;
    }
  }
  m.assumedRank = assumed;
  m.assumedSize = (n) => SIZES[assumed[n.idx]];
  const own = new Int32Array(N);
  for (const n of nodes) own[n.idx] = isDone(n) ? 0 : assumed[n.idx] + 1;
  m.ownCost = own;
}

// ---------------------------------------------------------------- §13 path
function pathChildrenOf(n) {
  return n.children.filter((c) => !isDiscarded(c) && (!c.optional || isStarted(c)));
}

function computePath(m) {
  const own = m.ownCost;
  const N = m.doc.nodes.length;
  const pc = new Array(N);
  for (const n of m.nodes) pc[n.idx] = pathChildrenOf(n);
  m.pathChildren = (n) => pc[n.idx] || pathChildrenOf(n);

  // choice groups, keyed by parent idx
  const groups = [];
  const localChoice = new Map();
  for (const n of m.nodes) {
    const k = pc[n.idx];
    if (k.length > 1 && disjunctive(k[0])) {
      const pool = chosenPool(k);
      let best = pool[0];
      for (const c of pool) if (own[c.idx] < own[best.idx]) best = c;
      localChoice.set(n.idx, best);
      groups.push({ node: n, key: k[0], pool });
    }
  }

  // dependency resolution (view scope)
  const depTargets = new Array(N);
  let anyDep = false;
  const targetStrings = new Set();
  for (const n of m.nodes) {
    if (n.deps.length === 0) continue;
    anyDep = true;
    const list = [];
    for (const d of n.deps) {
      targetStrings.add(d);
      const t = m.firstById.get(d);
      if (t && !isDiscarded(t)) list.push(t);
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
      if (g.pool.length >= 2 && g.pool.some((c) => flag[c.idx])) coupledGroups.push(g);
    }
  }

  const needed = new Uint8Array(N);
  const evaluate = (assign) => {
    needed.fill(0);
    const work = [];
    const add = (x) => { if (!needed[x.idx]) { needed[x.idx] = 1; work.push(x); } };
    for (let i = m.roots.length - 1; i >= 0; i--) add(m.roots[i]);
    while (work.length > 0) {
      const n = work.pop();
      const k = pc[n.idx] || pathChildrenOf(n);
      if (k.length > 0) {
        if (disjunctive(k[0])) {
          if (k.length === 1) add(k[0]);
          else add((assign && assign.get(n.idx)) || localChoice.get(n.idx) || k[0]);
        } else {
          for (const c of k) add(c);
        }
      }
      const dt = depTargets[n.idx];
      if (dt) for (const t of dt) add(t);
    }
    let cost = 0;
    for (let i = 0; i < N; i++) {
      if (!needed[i]) continue;
      cost += margin(m.doc.nodes[i]);
    }
    return cost;
  };
  const margin = (n) => {
    let sub = 0;
    const k = pc[n.idx] || pathChildrenOf(n);
    for (const c of k) if (needed[c.idx]) sub += own[c.idx];
    return Math.max(0, own[n.idx] - sub);
  };

  let exact = true;
  let bestAssign = null;
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
    const digits = new Array(G).fill(0);
    const assign = new Map();
    for (;;) {
      for (let g = 0; g < G; g++) assign.set(coupledGroups[g].node.idx, coupledGroups[g].pool[digits[g]]);
      const c = evaluate(assign);
      if (bestAssign === null || c < bestCost) { bestCost = c; bestAssign = new Map(assign); }
      let g = G - 1;
      while (g >= 0) {
        digits[g]++;
        if (digits[g] < coupledGroups[g].pool.length) break;
        digits[g] = 0;
        g--;
      }
      if (g < 0) break;
    }
    bestCost = evaluate(bestAssign);
  }

  const neededCopy = new Uint8Array(needed);
  m.needed = neededCopy;
  m.exact = exact;
  m.cost = bestCost;
  m.margin = (n) => {
    let sub = 0;
    for (const c of (pc[n.idx] || pathChildrenOf(n))) if (neededCopy[c.idx]) sub += own[c.idx];
    return Math.max(0, own[n.idx] - sub);
  };
  m.groups = groups;
  m.coupledGroups = coupledGroups;

  // stations (§13): needed, not done, no needed-and-open descendant (all children)
  const openBelow = new Uint8Array(N);
  const station = new Uint8Array(N);
  for (let i = m.nodes.length - 1; i >= 0; i--) {
    const n = m.nodes[i];
    const open = neededCopy[n.idx] && !isDone(n);
    if (open && !openBelow[n.idx]) station[n.idx] = 1;
    if (n.parent !== null && (open || openBelow[n.idx])) openBelow[n.parent.idx] = 1;
  }
  m.station = station;
  m.neededLines = [];
  m.stationLines = [];
  for (const n of m.nodes) {
    if (neededCopy[n.idx]) m.neededLines.push(n.line);
    if (station[n.idx]) m.stationLines.push(n.line);
  }
}

// ---------------------------------------------------------------- §15
function computeLoads(m) {
  const N = m.doc.nodes.length;
  const owners = new Array(N);
  const loads = new Map(); // tag → {tag, load, stations, firstLoad}
  let order = 0;
  const entry = (t) => {
    let e = loads.get(t);
    if (!e) { e = { tag: t, load: 0, stations: 0, loadOrder: Infinity }; loads.set(t, e); }
    return e;
  };
  let total = 0;
  let totalStations = 0;
  for (const n of m.nodes) {
    const own = n.tags.length > 0 ? n.tags : (n.parent !== null ? owners[n.parent.idx] : []);
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
  const collapsed = new Set();
  for (const n of m.nodes) if (n.fold === '>') collapsed.add(n.idx);
  // clean[x] === epoch: x and all its ancestors are open. The epoch moves on
  // whenever a node gets collapsed, so the shortcut never skips a collapsed node.
  const clean = new Int32Array(m.doc.nodes.length).fill(-1);
  let epoch = 0;
  for (const n of m.nodes) {
    if (n.fold !== '<' && !n.focus) continue;
    const path = [];
    for (let a = n.parent; a !== null && clean[a.idx] !== epoch; a = a.parent) path.push(a);
    path.reverse();
    path.push(n);
    for (let i = 0; i < path.length - 1; i++) {
      const a = path[i];
      if (!collapsed.has(a.idx)) continue;
      collapsed.delete(a.idx);
      for (const c of a.children) {
        if (c !== path[i + 1] && c.children.length > 0 && !collapsed.has(c.idx)) { collapsed.add(c.idx); epoch++; }
      }
    }
    collapsed.delete(n.idx);
    for (const a of path) clean[a.idx] = epoch;
  }
  m.collapsed = (n) => collapsed.has(n.idx) && n.children.length > 0;
}

// ---------------------------------------------------------------- §7 marks
function computeTaiga(m) {
  const N = m.doc.nodes.length;
  const slug = new Array(N).fill(null);
  for (const n of m.nodes) {
    let own = null;
    for (const mk of n.marks) {
      if (mk.startsWith('taiga.') && mk.length > 6) { own = mk.slice(6); break; }
    }
    slug[n.idx] = own !== null ? own : (n.parent !== null ? slug[n.parent.idx] : null);
  }
  m.taigaSlug = (n) => slug[n.idx];
}

// ---------------------------------------------------------------- §11 mixedGate
function computeMixedGate(m) {
  const out = [];
  const visible = (c) => m.showDiscarded || !isDiscarded(c);
  // pre-order over visible nodes: a hidden discarded child hides its subtree
  const stack = [];
  for (let i = m.roots.length - 1; i >= 0; i--) stack.push(m.roots[i]);
  while (stack.length > 0) {
    const n = stack.pop();
    const vis = n.children.filter(visible);
    if (vis.length > 0) {
      const t = vis[0].type;
      if (vis.some((c) => c.type !== t)) out.push({ type: 'mixedGate', line: vis[0].line, label: n.label });
    }
    for (let i = vis.length - 1; i >= 0; i--) stack.push(vis[i]);
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
