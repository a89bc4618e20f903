// Pieces every page shares: the error box (code, status, message, hint: never swallowed), notices, loading.
import {h} from './dom.js';
import {t} from './i18n.js';

export function errorBox(err, context = '') {
  const status = err && err.status ? ` · HTTP ${err.status}` : '';
  const code = (err && err.code) || 'client_error';
  return h('div', {class: 'error', role: 'alert'},
    h('strong', {}, context ? `${context}: ` : `${t('error.title')}: `),
    h('code', {class: 'error-code'}, code), h('span', {class: 'muted'}, status), ' — ',
    h('span', {class: 'error-message'}, (err && err.message) || String(err)),
    err && err.hint ? h('div', {class: 'error-hint'}, `${t('error.hint')}: ${err.hint}`) : null,
    err && (err.status === 401 || err.status === 403) ? h('div', {class: 'error-hint'}, t('error.key')) : null);
}

export function notice(text, kind = 'ok') {
  return h('div', {class: `notice notice-${kind}`, role: 'status'}, text);
}

export function loading() {
  return h('p', {class: 'muted loading', role: 'status'}, t('loading'));
}

/** A labelled form field: label above, control below. */
export function field(id, label, control, help = null) {
  control.id = id;
  if (help) control.setAttribute('aria-describedby', `${id}-help`);
  return h('div', {class: 'field'}, h('label', {for: id}, label), control,
    help ? h('small', {class: 'muted', id: `${id}-help`}, help) : null);
}

export function select(options, value) {
  return h('select', {}, options.map(([optionValue, label]) =>
    h('option', {value: optionValue, selected: optionValue === value}, label)));
}
