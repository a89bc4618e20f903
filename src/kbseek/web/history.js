// A document's history on its page: the kept versions (newest first), one version's text, its diff against the
// current text, and a rollback (a write: the key must allow it; a confirmation first; a new version results).
import {api} from './api.js';
import {badge, encodePath, fmtDate, h, replace, table} from './dom.js';
import {t} from './i18n.js';
import {errorBox, loading} from './ui.js';

/** The history section of ``doc``'s page; ``onRolledBack(message)`` redraws the page after a rollback. */
export function historySection(doc, onRolledBack) {
  const box = h('div', {id: 'history', 'aria-live': 'polite'}, loading());
  const view = h('div', {id: 'version-view', 'aria-live': 'polite'});
  loadHistory(doc, box, view, onRolledBack);
  return h('section', {'aria-labelledby': 'doc-history-h'},
    h('h2', {id: 'doc-history-h'}, t('history.title')), h('p', {class: 'muted'}, t('history.help')), box, view);
}

async function loadHistory(doc, box, view, onRolledBack) {
  let history;
  try {
    history = await api('GET', `/api/documents/${encodePath(doc.path)}/history`);
  } catch (err) {
    replace(box, errorBox(err, t('history.loadFailed')));
    return;
  }
  const rows = [...history.versions].reverse().map((v) => {
    const current = v.version === history.current;
    const older = v.content_hash && !current;  // a deletion has no text to show or bring back
    return [
      h('span', {}, String(v.version), current ? [' ', badge('current', '', t('history.current'))] : null),
      fmtDate(v.created_at),
      v.restored_from ? t('history.restored', {n: v.restored_from}) : v.action,
      v.via,
      v.key_id ? `${v.actor} (${v.key_id})` : v.actor,
      h('span', {class: 'version-actions'},
        v.content_hash ? action(t('history.show'), `show-${v.version}`, () => showVersion(doc, v.version, view)) : null,
        older ? action(t('history.diff'), `diff-${v.version}`,
          () => showDiff(doc, v.version, history.current, view)) : null,
        older ? action(t('history.rollback'), `rollback-${v.version}`,
          () => confirmRollback(doc, v.version, view, onRolledBack)) : null)];
  });
  replace(box, table([t('history.version'), t('history.when'), t('history.action'), t('history.via'),
    t('history.who'), ''], rows, {id: 'history-table'}));
}

function action(label, id, onclick) {
  return h('button', {type: 'button', id, onclick}, label);
}

async function showVersion(doc, number, view) {
  replace(view, loading());
  try {
    const version = await api('GET', `/api/documents/${encodePath(doc.path)}/versions/${number}`);
    replace(view, h('h3', {}, t('history.versionTitle', {n: number})),
      h('pre', {class: 'chunk-text', id: 'version-text'}, version.content));
  } catch (err) {
    replace(view, errorBox(err, t('history.failed')));
  }
}

async function showDiff(doc, a, b, view) {
  replace(view, loading());
  try {
    const diff = await api('GET', `/api/documents/${encodePath(doc.path)}/diff`, {query: {a, b}});
    const lines = diff.diff.split('\n').filter((line, i, all) => line || i < all.length - 1).map((line, i) => {
      const file = i < 2 && (line.startsWith('--- ') || line.startsWith('+++ '));  // the header names the versions
      const kind = file ? 'diff-file' : line.startsWith('@@') ? 'diff-hunk' : line.startsWith('+') ? 'diff-add'
        : line.startsWith('-') ? 'diff-del' : '';
      return h('span', {class: kind}, `${line}\n`);
    });
    replace(view, h('h3', {}, t('history.diffTitle', {a, b})),
      diff.changed ? h('pre', {class: 'chunk-text diff', id: 'version-diff'}, lines) : h('p', {}, t('history.noDiff')));
  } catch (err) {
    replace(view, errorBox(err, t('history.failed')));
  }
}

function confirmRollback(doc, number, view, onRolledBack) {
  const out = h('div', {'aria-live': 'polite'});
  const yes = h('button', {type: 'button', class: 'danger', id: 'rollback-confirm'}, t('history.rollbackYes'));
  const no = h('button', {type: 'button'}, t('doc.cancel'));
  no.addEventListener('click', () => replace(view));
  yes.addEventListener('click', async () => {
    yes.disabled = true;
    try {
      const done = await api('POST', `/api/documents/${encodePath(doc.path)}/rollback`, {json: {to: number}});
      onRolledBack(t('history.rolledBack', {n: number, version: done.version}));
    } catch (err) {
      replace(out, errorBox(err, t('history.rollbackFailed')));
      yes.disabled = false;
    }
  });
  replace(view, h('div', {class: 'confirm', role: 'group', 'aria-labelledby': 'rollback-q'},
    h('p', {id: 'rollback-q'}, t('history.rollbackConfirm', {n: number, path: doc.path})), yes, ' ', no, out));
  yes.focus();
}
