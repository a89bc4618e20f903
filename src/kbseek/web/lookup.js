// Retrieval test: lookup_knowledge as the agent gets it (its text), beside how it was reached (explain).
import {api} from './api.js';
import {badge, encodePath, fmtNum, h, replace, table} from './dom.js';
import {t} from './i18n.js';
import {errorBox, field, loading, notice, select} from './ui.js';

const TAGS = ['exact-term', 'paraphrase', 'mixed-language', 'english', 'multi-doc', 'alert-line', 'section', 'multi-part',
  'purpose', 'near-topic'];
const state = {form: {query: '', policy: '', category: '', top_k: '5', session_id: '', expand: 'none'},
  result: null, error: null, saved: null};

export async function render(root) {
  const f = state.form;
  const query = h('input', {type: 'text', value: f.query, autocomplete: 'off'});
  const policy = select([['', t('lookup.policyDefault')], ['hybrid', 'hybrid'], ['dense', 'dense'],
    ['lexical', 'lexical'], ['legacy', 'legacy']], f.policy);
  const category = select([['', t('lookup.anyCategory')]], f.category);
  const topK = h('input', {type: 'number', value: f.top_k, min: '1', max: '50', inputmode: 'numeric'});
  const session = h('input', {type: 'text', value: f.session_id, autocomplete: 'off'});
  const expand = select([['none', t('lookup.expandNone')], ['section', t('lookup.expandSection')],
    ['neighbors', t('lookup.expandNeighbors')]], f.expand);
  const out = h('div', {id: 'lookup-result', 'aria-live': 'polite'});
  const run = h('button', {type: 'submit', id: 'lookup-run'}, t('lookup.run'));
  // novalidate: the API checks the parameters, and its error (code, field) is what the console shows
  const form = h('form', {class: 'lookup-form', novalidate: true, onsubmit: async (event) => {
    event.preventDefault();
    Object.assign(state.form, {query: query.value, policy: policy.value, category: category.value,
      top_k: topK.value, session_id: session.value.trim(), expand: expand.value});
    run.disabled = true;
    replace(out, loading());
    await runLookup();
    run.disabled = false;
    showResult(out);
  }},
  h('div', {class: 'row'}, field('lk-query', t('lookup.query'), query, t('lookup.queryHelp'))),
  h('div', {class: 'row'},
    field('lk-policy', t('lookup.policy'), policy), field('lk-category', t('lookup.category'), category),
    field('lk-topk', t('lookup.topK'), topK), field('lk-session', t('lookup.session'), session, t('lookup.sessionHelp')),
    field('lk-expand', t('lookup.expand'), expand),
    h('div', {class: 'field field-button'}, run)));
  query.classList.add('wide');
  replace(root, h('h1', {}, t('lookup.title')), h('p', {class: 'muted'}, t('lookup.intro')), form, out);
  showResult(out);
  try {
    const {categories} = await api('GET', '/api/categories');
    for (const c of categories) category.append(h('option', {value: c.name, selected: c.name === f.category}, c.name));
  } catch (err) {
    form.after(errorBox(err, t('docs.categoriesFailed')));
  }
}

function requestBody() {
  const f = state.form;
  const body = {query: f.query};
  if (f.policy) body.policy = f.policy;
  if (f.category) body.category = f.category;
  if (f.top_k !== '') body.top_k = /^-?\d+$/.test(f.top_k) ? Number(f.top_k) : f.top_k;
  if (f.session_id) body.session_id = f.session_id;
  if (f.expand !== 'none') body.expand = f.expand;
  return body;
}

async function runLookup() {
  state.saved = null;
  try {
    state.result = await api('POST', '/api/lookup', {query: {explain: 'true'}, json: requestBody()});
    state.error = null;
  } catch (err) {
    state.result = null;
    state.error = err;
  }
}

function showResult(out) {
  if (state.error) {
    replace(out, errorBox(state.error, t('lookup.failed')));
    return;
  }
  const r = state.result;
  if (!r) {
    replace(out);
    return;
  }
  replace(out, h('div', {class: 'split'},
    h('section', {class: 'agent', 'aria-labelledby': 'agent-h'},
      h('h2', {id: 'agent-h'}, t('lookup.agentView')),
      h('p', {class: 'muted'}, t('lookup.agentHelp')),
      h('p', {class: 'badges'}, badge(r.status), ' ', badge(r.relevance), ' ', badge(r.evidence_status),
        r.session_id ? h('span', {class: 'muted'}, ` ${t('lookup.sessionCall', {id: r.session_id, n: r.call})}`) : null),
      h('pre', {class: 'agent-text', id: 'agent-text', tabindex: '0'}, r.text)),
    h('section', {class: 'explain', id: 'explain', 'aria-labelledby': 'explain-h'},
      h('h2', {id: 'explain-h'}, t('lookup.explain')),
      hintView(r), levelsView(r), lanesView(r), fusedView(r), dedupView(r), timingsView(r), detailsView(r))),
  saveCase(r));
}

function chunkLabel(row) {
  return [h('a', {href: `#/documents/${encodePath(row.path)}`}, row.path),
    h('div', {class: 'crumb'}, row.breadcrumb || t('doc.preamble'))];
}

function hintView(r) {
  const hint = r.hint;
  const filter = hint.filter;
  return h('section', {'aria-labelledby': 'hint-h'}, h('h3', {id: 'hint-h'}, t('lookup.hint')),
    h('dl', {class: 'meta'},
      h('dt', {}, t('lookup.matchedKeywords')),
      h('dd', {}, hint.matched_keywords.length ? hint.matched_keywords.map((k) => h('span', {class: 'chip'}, k)) : '–'),
      h('dt', {}, t('lookup.domains')), h('dd', {}, hint.domains.join(', ') || '–'),
      h('dt', {}, t('lookup.singleDomain')), h('dd', {}, hint.single_domain || '–'),
      h('dt', {}, t('lookup.filter')),
      h('dd', {}, filter.category ? t('lookup.filterOn', {category: filter.category, source: filter.source}) :
        t('lookup.filterOff'), filter.relaxed ? ` (${t('lookup.relaxed')})` : '',
      Object.keys(hint.filters || {}).length ? [' · ', h('code', {}, JSON.stringify(hint.filters))] : null)),
    hint.matches.length ? table([t('lookup.document'), t('lookup.field'), t('lookup.exact'), t('lookup.score'),
      t('lookup.keywords')], hint.matches.map((m) => [
      [h('a', {href: `#/documents/${encodePath(m.path)}`}, m.title), h('div', {class: 'muted'}, m.path)],
      m.field, m.exact ? '✓' : '–', fmtNum(m.score), m.matched_keywords.join(', ')]), {id: 'hint-table'}) :
      h('p', {class: 'muted'}, t('lookup.noL0')));
}

function pieces(r) {
  const out = [];
  for (const doc of r.documents) for (const item of doc.items) out.push({doc, item});
  return out;
}

/** Past its review date: still evidence, labelled (the completeness sentence names it too). */
function staleBadge(doc) {
  return badge('STALE', '', t('lookup.stale', {n: doc.age_days}));
}

function levelsView(r) {
  const rows = [];
  let n = 0;
  for (const doc of r.documents) {
    if (!doc.items.length) {
      rows.push(['–', [h('div', {}, doc.source_path), h('div', {class: 'muted'}, doc.form)], badge(doc.relevance), '–']);
    }
    for (const item of doc.items) {
      n += 1;
      rows.push([String(n), [h('div', {}, doc.source_path, doc.stale ? [' ', staleBadge(doc)] : null),
        h('div', {class: 'crumb'}, item.breadcrumb)], badge(item.relevance), fmtNum(item.score)]);
    }
  }
  return h('section', {'aria-labelledby': 'levels-h'}, h('h3', {id: 'levels-h'}, t('lookup.levels')),
    h('p', {}, r.completeness),
    rows.length ? table(['#', t('lookup.evidence'), t('lookup.level'), t('lookup.fusedScore')], rows,
      {id: 'levels-table'}) : h('p', {class: 'muted'}, t('lookup.noEvidence')),
    r.closest.length ? h('div', {}, h('h4', {}, t('lookup.closest')),
      h('ul', {}, r.closest.map((c) => h('li', {}, `${c.title} — ${c.source_path}`)))) : null);
}

function lanesView(r) {
  const lanes = (r.explain && r.explain.lanes) || {};
  const names = Object.keys(lanes);
  return h('section', {'aria-labelledby': 'lanes-h', id: 'lanes'}, h('h3', {id: 'lanes-h'}, t('lookup.lanes')),
    h('p', {class: 'muted'}, t('lookup.lanesHelp', {n: r.explain ? r.explain.candidates : 0})),
    names.length ? names.map((name) => h('div', {class: 'lane', 'data-lane': name},
      h('h4', {}, t('lookup.lane', {name, n: lanes[name].length})),
      table([t('lookup.rank'), t('lookup.chunk'), t('lookup.score'), t('lookup.rawScore')],
        lanes[name].map((row) => [String(row.rank), chunkLabel(row), fmtNum(row.score, 4),
          `${fmtNum(row.raw_score, 4)} (${row.score_label})`])))) : h('p', {class: 'muted'}, t('lookup.noLanes')));
}

function fusedView(r) {
  const fused = (r.explain && r.explain.fused) || [];
  return h('section', {'aria-labelledby': 'fused-h'}, h('h3', {id: 'fused-h'}, t('lookup.fused')),
    fused.length ? table([t('lookup.rank'), t('lookup.chunk'), t('lookup.fusedScore'), t('lookup.laneRanks'),
      t('lookup.level')], fused.map((row) => [String(row.rank), chunkLabel(row), fmtNum(row.score, 4),
      Object.entries(row.lanes).map(([name, rank]) => h('span', {class: 'chip'}, `${name} #${rank}`)),
      row.relevance ? badge(row.relevance) : h('span', {class: 'muted'}, t('lookup.notInAnswer'))]),
    {id: 'fused-table'}) : h('p', {class: 'muted'}, t('lookup.noFused')));
}

function dedupView(r) {
  return h('section', {'aria-labelledby': 'dedup-h'}, h('h3', {id: 'dedup-h'}, t('lookup.dedup')),
    r.deduplicated.length ? table([t('lookup.document'), t('lookup.section'), t('lookup.firstCall'), t('lookup.reason'),
      t('lookup.level')],
      r.deduplicated.map((d) => [d.source_path, d.heading || d.anchor || '–', String(d.first_call), d.reason,
        badge(d.judged)])) :
      h('p', {class: 'muted'}, r.session_id ? t('lookup.noDedup') : t('lookup.noSession')));
}

function timingsView(r) {
  const entries = Object.entries(r.timings_ms || {});
  const max = Math.max(1e-9, ...entries.filter(([k]) => k !== 'total').map(([, v]) => v));
  return h('section', {'aria-labelledby': 'timings-h'}, h('h3', {id: 'timings-h'}, t('lookup.timings')),
    table([t('lookup.stage'), 'ms', ''], entries.map(([stage, ms]) => {
      const bar = h('span', {class: 'bar'});
      bar.style.width = `${stage === 'total' ? 100 : Math.round((100 * ms) / max)}%`;
      return [stage, fmtNum(ms, 1), h('span', {class: 'bar-track', 'aria-hidden': 'true'}, bar)];
    }), {id: 'timings-table'}));
}

function detailsView(r) {
  const th = r.thresholds;
  return h('section', {'aria-labelledby': 'details-h'}, h('h3', {id: 'details-h'}, t('lookup.details')),
    h('dl', {class: 'meta'},
      h('dt', {}, t('lookup.policy')), h('dd', {}, r.policy),
      h('dt', {}, 'request_id'), h('dd', {}, h('code', {}, r.request_id)),
      h('dt', {}, t('lookup.index')), h('dd', {}, h('code', {}, r.index_version)),
      h('dt', {}, t('lookup.model')), h('dd', {}, r.embedding_model || t('lookup.noModel')),
      h('dt', {}, t('lookup.thresholds')), h('dd', {}, `similarity ${fmtNum(th.similarity_high)} / ` +
        `${fmtNum(th.similarity_low)} · coverage ${fmtNum(th.coverage_high)} / ${fmtNum(th.coverage_low)} · ${th.source}`),
      h('dt', {}, t('lookup.budget')), h('dd', {}, `${r.budget.chars} / ${r.budget.limit}` +
        (r.budget.omitted ? ` · ${t('lookup.omitted', {n: r.budget.omitted})}` : '')),
      h('dt', {}, t('lookup.notes')), h('dd', {}, r.notes.length ? h('ul', {}, r.notes.map((x) => h('li', {}, x))) : '–')));
}

// -- save as a golden case ----------------------------------------------------------------------

function saveCase(r) {
  const list = pieces(r);
  const out = h('div', {'aria-live': 'polite', id: 'case-result'});
  if (state.saved) out.append(notice(state.saved));
  const boxes = list.map(({doc, item}, i) => h('li', {}, h('input', {type: 'checkbox', id: `case-piece-${i + 1}`,
    value: String(i + 1), checked: i === 0}), ' ', h('label', {for: `case-piece-${i + 1}`},
    `${i + 1}. ${doc.source_path} › ${item.breadcrumb}`)));
  const stamp = new Date().toISOString().replace(/[-:T]/g, '').slice(0, 14);
  const id = h('input', {type: 'text', value: `console-${stamp}`});
  const split = select([['dev', 'dev'], ['test', 'test']], 'dev');
  const tags = TAGS.map((tag) => h('span', {class: 'tag-choice'}, h('input', {type: 'checkbox', id: `case-tag-${tag}`,
    value: tag}), h('label', {for: `case-tag-${tag}`}, tag)));
  const notes = h('input', {type: 'text'});
  const button = h('button', {type: 'submit', id: 'case-save'}, t('case.save'));
  return h('section', {class: 'save-case', 'aria-labelledby': 'case-h'},
    h('h2', {id: 'case-h'}, t('case.title')),
    h('form', {onsubmit: async (event) => {
      event.preventDefault();
      const chosen = list.map((_, i) => i + 1).filter((n) => document.getElementById(`case-piece-${n}`).checked);
      const body = {id: id.value.trim(), split: split.value, notes: notes.value,
        tags: TAGS.filter((tag) => document.getElementById(`case-tag-${tag}`).checked),
        pieces: list.length ? chosen : null,
        lookup: {query: r.query, status: r.status, documents: r.documents.map((d) => ({source_path: d.source_path,
          items: d.items.map((item) => ({heading_path: item.heading_path}))}))}};
      button.disabled = true;
      try {
        const saved = await api('POST', '/api/eval/cases', {json: body});
        state.saved = t('case.saved', {id: saved.case.id, file: saved.file, n: saved.count});
        replace(out, notice(state.saved));
      } catch (err) {
        replace(out, errorBox(err, t('case.failed')));
      }
      button.disabled = false;
    }},
    list.length ? h('fieldset', {}, h('legend', {}, t('case.pieces')), h('ul', {class: 'plain'}, boxes)) :
      h('p', {class: 'muted'}, t('case.noAnswer')),
    h('div', {class: 'row'}, field('case-id', t('case.id'), id), field('case-split', t('case.split'), split),
      field('case-notes', t('case.notes'), notes)),
    h('fieldset', {}, h('legend', {}, t('case.tags')), tags),
    h('div', {class: 'field-button'}, button)), out);
}
