// Sessions: what a diagnosis session asked and got (its trace), and the verifier's summary of it.
import {api} from './api.js';
import {badge, encodePath, fmtDate, fmtNum, h, replace, table} from './dom.js';
import {t} from './i18n.js';
import {errorBox, field, loading} from './ui.js';

export async function render(root, id) {
  const input = h('input', {type: 'text', value: id || '', autocomplete: 'off'});
  const form = h('form', {class: 'filters', onsubmit: (event) => {
    event.preventDefault();
    const value = input.value.trim();
    location.hash = value ? `#/sessions/${encodeURIComponent(value)}` : '#/sessions';
  }}, field('session-id', t('sessions.id'), input), h('div', {class: 'field field-button'},
    h('button', {type: 'submit'}, t('sessions.show'))));
  const recent = h('section', {'aria-labelledby': 'recent-h'}, h('h2', {id: 'recent-h'}, t('sessions.recent')), loading());
  const detail = h('div', {id: 'session-detail', 'aria-live': 'polite'});
  replace(root, h('h1', {}, id ? t('sessions.titleOf', {id}) : t('sessions.title')), form, detail, recent);
  const jobs = [loadRecent(recent)];
  if (id) jobs.push(loadSession(detail, id));
  await Promise.all(jobs);
}

async function loadRecent(section) {
  const heading = section.querySelector('h2');
  let rows;
  try {
    rows = (await api('GET', '/api/invocations', {query: {limit: 2000}})).invocations;
  } catch (err) {
    replace(section, heading, errorBox(err, t('sessions.recentFailed')));
    return;
  }
  const sessions = new Map();
  for (const row of rows) {
    if (!row.session_id) continue;
    const entry = sessions.get(row.session_id) || {calls: 0};
    entry.calls += 1;
    entry.last = row;
    sessions.set(row.session_id, entry);
  }
  const list = [...sessions.entries()].sort((a, b) => String(b[1].last.created_at).localeCompare(a[1].last.created_at));
  replace(section, heading, list.length ? table([t('sessions.session'), t('sessions.calls'), t('sessions.lastQuery'),
    t('sessions.lastAt')], list.slice(0, 50).map(([sid, e]) => [
    h('a', {href: `#/sessions/${encodeURIComponent(sid)}`}, sid), String(e.calls), e.last.query,
    fmtDate(e.last.created_at)]), {id: 'recent-table'}) : h('p', {class: 'muted'}, t('sessions.none')));
}

async function loadSession(box, id) {
  replace(box, loading());
  const path = `/api/sessions/${encodeURIComponent(id)}`;
  const [trace, summary] = await Promise.allSettled([api('GET', `${path}/trace`), api('GET', `${path}/verify-summary`)]);
  replace(box,
    h('section', {'aria-labelledby': 'summary-h'}, h('h2', {id: 'summary-h'}, t('sessions.summary')),
      summary.status === 'rejected' ? errorBox(summary.reason, t('sessions.summaryFailed')) : summaryView(summary.value)),
    h('section', {'aria-labelledby': 'trace-h'}, h('h2', {id: 'trace-h'}, t('sessions.trace')),
      trace.status === 'rejected' ? errorBox(trace.reason, t('sessions.traceFailed')) : traceView(trace.value)));
}

function traceView(trace) {
  const calls = trace.calls.map((c) => [
    String(c.call ?? '–'), c.query, c.policy,
    c.success ? badge(c.relevance_level) : [badge('ERROR'), h('div', {class: 'error-message'}, c.error)],
    c.evidence_status || '–',
    c.evidence.length ? h('ul', {class: 'plain'}, c.evidence.map((e) => h('li', {},
      h('a', {href: `#/documents/${encodePath(e.path)}`}, e.path), ' ', badge(e.relevance),
      e.anchors.length ? h('div', {class: 'muted'}, e.anchors.map((a) => `#${a}`).join(' ')) : null))) : '–',
    c.deduplicated.length ? h('ul', {class: 'plain'}, c.deduplicated.map((d) => h('li', {},
      `${d.path}${d.anchor ? `#${d.anchor}` : ''} ← ${t('sessions.callN', {n: d.first_call})}`))) : '–',
    (c.feedback || []).length ? h('ul', {class: 'plain'}, c.feedback.map((f) => h('li', {}, badge(f.verdict),
      f.note ? ` ${f.note}` : ''))) : '–',
    fmtNum(c.duration_ms, 1), fmtDate(c.at)]);
  return h('div', {},
    table(['#', t('sessions.query'), t('lookup.policy'), t('lookup.level'), t('sessions.evidenceStatus'),
      t('lookup.evidence'), t('lookup.dedup'), t('sessions.feedback'), 'ms', t('sessions.at')], calls,
      {id: 'trace-table'}),
    h('h3', {}, t('sessions.seen')),
    trace.documents_seen.length ? table([t('lookup.document'), t('lookup.firstCall'), t('sessions.anchors')],
      trace.documents_seen.map((d) => [d.path || d.document_id, String(d.first_call),
        d.anchors.map((a) => `#${a}`).join(' ') || t('sessions.whole')])) : h('p', {class: 'muted'}, '–'));
}

function summaryView(s) {
  return h('div', {id: 'verify-summary', class: 'columns'},
    h('dl', {class: 'meta'},
      h('dt', {}, t('sessions.score')), h('dd', {}, h('strong', {}, fmtNum(s.evidence_score, 2))),
      h('dt', {}, t('sessions.calls')), h('dd', {}, String(s.calls)),
      h('dt', {}, t('sessions.noMatch')), h('dd', {}, s.no_confident_match.join(' · ') || '–'),
      h('dt', {}, t('sessions.repeated')), h('dd', {}, s.repeated.join(' · ') || '–'),
      h('dt', {}, t('sessions.sources')), h('dd', {}, s.sources.join(', ') || '–')),
    h('div', {}, h('h3', {}, t('sessions.summaryText')), h('pre', {class: 'agent-text', tabindex: '0'}, s.text)));
}
