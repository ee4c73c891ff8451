//! Warning assembly in the editor's order (§11) and a short English text per warning type.

/** Warning types that describe broken structure (blocking in `check`). */
export const STRUCTURAL = new Set(['mixedGate', 'unknownStatus', 'descStray', 'duplicateId']);

/** Fields of each type other than `type`, in output order. */
export const FIELDS = {
  unknownStatus: ['line', 'code'],
  duplicateId: ['line', 'id', 'firstLine'],
  descStray: ['line'],
  unknownDesc: ['line', 'id'],
  unknownDep: ['line', 'id'],
  xorConflict: ['line', 'label'],
  sizeConflict: ['line', 'size'],
  mixedGate: ['line', 'label'],
  cheapApprox: [],
  assigneeOverload: ['tag', 'share', 'stations', 'totalStations'],
  prodStatus: ['line', 'id', 'label'],
};

/** Short English text for one warning. */
export function warningText(w) {
  switch (w.type) {
    case 'unknownStatus':
      return `Line ${w.line}: unknown status box [${w.code}]; the node is treated as having no status.`;
    case 'duplicateId':
      return `Line ${w.line}: id #${w.id} is already used on line ${w.firstLine}; references resolve to the first one.`;
    case 'descStray':
      return `Line ${w.line}: description text that belongs to no node.`;
    case 'unknownDesc':
      return `Line ${w.line}: description block #${w.id} names no node; its text is ignored.`;
    case 'unknownDep':
      return `Line ${w.line}: dependency #${w.id} names no node.`;
    case 'xorConflict':
      return `Line ${w.line}: "${w.label}" is realized, but another exactly-one (=) alternative already is.`;
    case 'sizeConflict':
      return `Line ${w.line}: the sized sub-packages do not fit into (${w.size}).`;
    case 'mixedGate':
      return `Line ${w.line}: the children of "${w.label}" mix gate kinds (- or +, |, =); the first child decides.`;
    case 'cheapApprox':
      return 'The cheapest path is approximate: too many coupled alternatives for an exact search.';
    case 'assigneeOverload':
      return `@${w.tag} carries ${w.share}% of the open path work (${w.stations} of ${w.totalStations} stations).`;
    case 'prodStatus':
      return `Line ${w.line}: "${w.label}" is newly marked as in production [^].`;
    default:
      return `Warning ${w.type}.`;
  }
}

/** Copy a warning into its output shape: type, fields in order, text. */
export function shapeWarning(w) {
  const out = { type: w.type };
  for (const f of FIELDS[w.type] || Object.keys(w)) if (w[f] !== undefined && f !== 'type') out[f] = w[f];
  out.text = warningText(w);
  return out;
}

/**
 * Editor list (§11): parser warnings, cheapApprox, assigneeOverload,
 * mixedGate; then a stable sort by line with lineless warnings as 0.
 */
export function assembleWarnings(parserWarnings, model) {
  const list = parserWarnings.slice();
  if (!model.exact) list.push({ type: 'cheapApprox' });
  if (model.overloadedAssignee) list.push(Object.assign({ type: 'assigneeOverload' }, model.overloadedAssignee));
  for (const w of model.mixedGate) list.push(w);
  const keyed = list.map((w, i) => ({ w, i, l: typeof w.line === 'number' ? w.line : 0 }));
  keyed.sort((a, b) => (a.l - b.l) || (a.i - b.i));
  return keyed.map((k) => shapeWarning(k.w));
}
