// The Git sources the server syncs (its git_sources setting) on the documents page: each with its last result and
// a "sync now" button (a write: the key must allow it). Shown only when the server has sources configured.
import {api} from './api.js';
import {badge, fmtDate, h, replace, table} from './dom.js';
import {t} from './i18n.js';
import {errorBox} from './ui.js';

/** The sources section, empty until the list arrives (and when there is none); ``onSynced`` reloads the list. */
export function sourcesSection(onSynced) {
  const box = h('section', {id: 'git-sources', 'aria-labelledby': 'sources-h', 'aria-live': 'polite', hidden: true});
  loadSources(box, onSynced);
  return box;
}

async function loadSources(box, onSynced, results = {}) {
  let sources;
  try {
    ({sources} = await api('GET', '/api/sync/git'));
  } catch (err) {
    box.hidden = false;
    replace(box, h('h2', {id: 'sources-h'}, t('sources.title')), errorBox(err, t('sources.loadFailed')));
    return;
  }
  box.hidden = !sources.length;
  if (!sources.length) return;
  const rows = sources.map((s) => {
    const button = h('button', {type: 'button', id: `sync-${s.index}`, disabled: Boolean(s.running_since)},
      s.running_since ? t('sources.running') : t('sources.syncNow'));
    const outcome = h('div', {id: `sync-result-${s.index}`}, results[s.index] || lastResult(s.last));
    button.addEventListener('click', async () => {
      button.disabled = true;
      button.textContent = t('sources.running');
      try {
        results[s.index] = lastResult(await api('POST', '/api/sync/git', {json: {source: s.index}}));
        onSynced();
      } catch (err) {
        results[s.index] = errorBox(err, s.name);
      }
      await loadSources(box, onSynced, results);
    });
    return [h('strong', {}, s.name), h('code', {}, s.repo), s.ref, s.path || '/',
      s.every_s ? t('sources.every', {n: Math.round(s.every_s)}) : t('sources.never'), outcome, button];
  });
  replace(box, h('h2', {id: 'sources-h'}, t('sources.title')), h('p', {class: 'muted'}, t('sources.help')),
    table([t('sources.name'), t('sources.repo'), t('sources.ref'), t('sources.path'), t('sources.schedule'),
      t('sources.last'), ''], rows, {id: 'sources-table'}));
}

function lastResult(last) {
  if (!last) return h('span', {class: 'muted'}, t('sources.notYet'));
  const when = `${fmtDate(last.finished_at)} · ${last.trigger}`;
  if (last.error) {
    return h('div', {class: 'error', role: 'alert'}, h('code', {}, last.error.code), ' — ', last.error.message,
      h('div', {class: 'muted'}, when));
  }
  const counts = Object.entries(last.counts || {}).filter(([, n]) => n).map(([k, n]) => `${n} ${k}`).join(', ');
  return h('div', {},
    badge(last.ok ? 'ok' : 'failed', '', last.ok ? t('sources.ok') : t('sources.failed')), ' ',
    h('code', {}, (last.commit || '').slice(0, 12)), ` ${last.mode} · ${counts || t('sources.nothing')}`,
    last.failed && last.failed.length ? h('ul', {class: 'warnings'},
      last.failed.map((f) => h('li', {}, `${f.path}: ${f.reason}`))) : null,
    last.prune_skipped ? h('div', {class: 'muted'}, last.prune_skipped) : null,
    h('div', {class: 'muted'}, when));
}
